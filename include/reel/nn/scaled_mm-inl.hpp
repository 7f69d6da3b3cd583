#pragma once
// The non-template parts of scaled_mm (header-only mode: included by scaled_mm.hpp; compiled
// mode: by src/runtime.cpp).
#include "scaled_mm.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

REEL_INLINE const char* scaling_name(ScalingType s) {
  switch (s) {
    case ScalingType::TensorWise: return "TensorWise";
    case ScalingType::RowWise: return "RowWise";
    case ScalingType::BlockWise1x16: return "BlockWise1x16";
    case ScalingType::BlockWise1x32: return "BlockWise1x32";
    case ScalingType::BlockWise1x128: return "BlockWise1x128";
    case ScalingType::BlockWise128x128: return "BlockWise128x128";
  }
  return "?";
}

// The scale shape a recipe asks for: `a` for mat_a [M, K], else for mat_b [K, N].
REEL_INLINE Shape expected_scale_shape(ScalingType r, bool a, int64_t M, int64_t N, int64_t K) {
  auto cdiv = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
  switch (r) {
    case ScalingType::TensorWise: return Shape{};
    case ScalingType::RowWise: return a ? Shape{M, 1} : Shape{1, N};
    case ScalingType::BlockWise1x128: return a ? Shape{M, cdiv(K, 128)} : Shape{cdiv(K, 128), N};
    case ScalingType::BlockWise128x128:
      return a ? Shape{cdiv(M, 128), cdiv(K, 128)} : Shape{cdiv(K, 128), cdiv(N, 128)};
    default: return Shape{};
  }
}

REEL_INLINE int64_t check_scaled_mm(const char* fn, const Shape& a, const Shape& b, const AnyTensor& scale_a,
                                    ScalingType ra, const AnyTensor& scale_b, ScalingType rb, SwizzleType sa,
                                    SwizzleType sb) {
  REEL_CHECK(a.size() == 2 && b.size() == 2, value_error, fn, ": mat_a and mat_b must be matrices (2-D), got shapes ", a,
             " and ", b);
  REEL_CHECK(a[1] == b[0], value_error, fn, ": mat_a and mat_b shapes cannot be multiplied (", a[0], "x", a[1], " and ",
             b[0], "x", b[1], ")");
  const int64_t M = a[0], K = a[1], N = b[1];
  REEL_CHECK(K % 16 == 0, value_error, fn, ": K (mat_a.size(1)) must be a multiple of 16, got ", K);
  REEL_CHECK(scale_a.defined() && scale_b.defined(), value_error, fn, ": scale_a and scale_b are required");
  using S = ScalingType;
  const bool ok = (ra == S::TensorWise && rb == S::TensorWise) || (ra == S::RowWise && rb == S::RowWise) ||
                  ((ra == S::BlockWise1x128 || ra == S::BlockWise128x128) &&
                   (rb == S::BlockWise1x128 || rb == S::BlockWise128x128) &&
                   !(ra == S::BlockWise128x128 && rb == S::BlockWise128x128)) ||
                  (ra == S::BlockWise1x32 && rb == S::BlockWise1x32) || (ra == S::BlockWise1x16 && rb == S::BlockWise1x16);
  REEL_CHECK(ok, value_error, fn, ": the recipe pair (", scaling_name(ra), ", ", scaling_name(rb),
             ") is not supported; the pairs are (TensorWise, TensorWise), (RowWise, RowWise), (BlockWise1x128 or "
             "BlockWise128x128, BlockWise1x128 or BlockWise128x128, not both 128x128), (BlockWise1x32, BlockWise1x32) "
             "and (BlockWise1x16, BlockWise1x16)");
  REEL_CHECK(ra != S::BlockWise1x32 && ra != S::BlockWise1x16, not_implemented_error, fn, ": the ", scaling_name(ra),
             " recipes (MX / NVFP4 block scales) are not implemented yet");
  REEL_CHECK(sa == SwizzleType::NoSwizzle && sb == SwizzleType::NoSwizzle, value_error, fn,
             ": swizzled scales go with the BlockWise1x32 / BlockWise1x16 recipes only; ", scaling_name(ra),
             " scales are not swizzled");
  auto check_scale = [&](const AnyTensor& s, ScalingType r, bool is_a) {
    const char* name = is_a ? "scale_a" : "scale_b";
    REEL_CHECK(s.dtype() == ScalarType::Float, type_error, fn, ": ", name, " of the ", scaling_name(r),
               " recipe must be a float32 tensor, got ", dtype_name(s.dtype()));
    const Shape want = expected_scale_shape(r, is_a, M, N, K);
    if (r == S::TensorWise)
      REEL_CHECK(s.numel() == 1, value_error, fn, ": ", name, " of the TensorWise recipe must have one element, got shape ",
                 s.sizes());
    else
      REEL_CHECK(s.sizes() == want, value_error, fn, ": ", name, " of the ", scaling_name(r), " recipe must have shape ",
                 want, " for mat_a ", a, " and mat_b ", b, ", got ", s.sizes());
  };
  check_scale(scale_a, ra, true);
  check_scale(scale_b, rb, false);
  return (ra == S::TensorWise || ra == S::RowWise) ? std::max<int64_t>(K, 1) : 128;
}

REEL_INLINE void scaled_mm_reference(int64_t M, int64_t N, int64_t K, int64_t kblock, const double* a, const double* bt,
                                     const double* sa, ScalingType ra, const double* sb, ScalingType rb, double* acc) {
  const int64_t nkb = (K + kblock - 1) / kblock, nb128 = (N + 127) / 128;
  auto scale_a = [&](int64_t m, int64_t kb) {
    switch (ra) {
      case ScalingType::TensorWise: return sa[0];
      case ScalingType::RowWise: return sa[m];
      case ScalingType::BlockWise1x128: return sa[m * nkb + kb];
      default: return sa[(m / 128) * nkb + kb];  // BlockWise128x128
    }
  };
  auto scale_b = [&](int64_t kb, int64_t n) {
    switch (rb) {
      case ScalingType::TensorWise: return sb[0];
      case ScalingType::RowWise: return sb[n];
      case ScalingType::BlockWise1x128: return sb[kb * N + n];
      default: return sb[kb * nb128 + n / 128];  // BlockWise128x128
    }
  };
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double total = 0;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        double part = 0;
        for (int64_t k = kb * kblock, e = std::min(K, k + kblock); k < e; ++k) part += a[m * K + k] * bt[n * K + k];
        total += part * scale_a(m, kb) * scale_b(kb, n);
      }
      acc[m * N + n] = total;
    }
}

}  // namespace detail
}  // namespace reel
