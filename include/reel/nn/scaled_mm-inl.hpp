#pragma once
// The non-template parts of scaled_mm (header-only mode: included by scaled_mm.hpp; compiled
// mode: by src/runtime.cpp).
#include "scaled_mm.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// Only the dtypes a scale may have (float and the FP8 types) are instantiated, not a visit of
// all 17.
template <class... T>
std::vector<double> as_doubles_of(const AnyTensor& t) {
  REEL_CHECK(t.device() == DeviceType::CPU, not_implemented_error, "AnyTensor::visit: only CPU tensors");
  std::vector<double> r;
  ((t.is<T>() ? (void)(r = as_doubles(t.as<T, CPU>())) : void()), ...);
  return r;
}
REEL_INLINE std::vector<double> as_doubles(const AnyTensor& t) {
  return as_doubles_of<float, float8_e4m3fn, float8_e5m2, float8_e8m0fnu>(t);
}

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

REEL_INLINE int64_t scale_kblock(ScalingType r, int64_t K) {
  switch (r) {
    case ScalingType::BlockWise1x16: return 16;
    case ScalingType::BlockWise1x32: return 32;
    case ScalingType::BlockWise1x128:
    case ScalingType::BlockWise128x128: return 128;
    default: return std::max<int64_t>(K, 1);
  }
}

namespace smm {
inline int64_t cdiv(int64_t x, int64_t y) { return (x + y - 1) / y; }
inline int64_t round_up(int64_t x, int64_t y) { return cdiv(x, y) * y; }
inline const char* swizzle_name(SwizzleType s) {
  return s == SwizzleType::NoSwizzle ? "NoSwizzle" : s == SwizzleType::Swizzle_32_4_4 ? "Swizzle_32_4_4" : "Swizzle_32_8";
}
inline bool mx_recipe(ScalingType r) { return r == ScalingType::BlockWise1x32 || r == ScalingType::BlockWise1x16; }
}  // namespace smm

// Where the scale of (row r, K block c) of a [rows, W] scale matrix lies in its swizzled
// buffer: cuBLASLt's 128x4 tiles (Swizzle_32_4_4, W padded to a multiple of 4: PyTorch's
// to_blocked), hipBLASLt's 32x8 tiles (Swizzle_32_8, W padded to a multiple of 8).
REEL_INLINE int64_t swizzled_index(SwizzleType sw, int64_t r, int64_t c, int64_t W) {
  if (sw == SwizzleType::Swizzle_32_4_4)
    return ((r / 128) * (smm::round_up(W, 4) / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
  return ((r / 32) * (smm::round_up(W, 8) / 8) + c / 8) * 256 + (c % 4) * 64 + (r % 16) * 4 + ((c % 8) / 4) * 2 +
         (r % 32) / 16;
}
// The padded element count of a swizzled [rows, W] scale matrix.
REEL_INLINE int64_t swizzled_numel(SwizzleType sw, int64_t rows, int64_t W) {
  return sw == SwizzleType::Swizzle_32_4_4 ? smm::round_up(rows, 128) * smm::round_up(W, 4) : smm::round_up(rows, 32) * smm::round_up(W, 8);
}
namespace smm {
// "mat_a [M, K] and mat_b [K, N]", or "data [R, K]" (dequantize), in check_scales' messages.
struct OperandShapes {
  const Shape& a;
  const Shape* b;
  friend std::ostream& operator<<(std::ostream& os, const OperandShapes& o) {
    if (!o.b) return os << "data " << o.a;
    return os << "mat_a " << o.a << " and mat_b " << *o.b;
  }
};
}  // namespace smm
REEL_INLINE void check_scales(const char* fn, bool is_a, ScalarType data, const Scales& s, const Recipes& r,
                              SwizzleType sw, int64_t rows, int64_t K, const Shape& a, const Shape* b) {
  using S = ScalingType;
  const smm::OperandShapes shapes{a, b};
  const char* name = !b ? "scale" : is_a ? "scale_a" : "scale_b";
  const char* rdim = !b ? "rows" : is_a ? "M" : "N";
  const size_t nr = r.list.size();
  REEL_CHECK(nr == 1 || (nr == 2 && r.list[0] == S::BlockWise1x16 && r.list[1] == S::TensorWise), value_error, fn,
             ": the recipes of ", name, " must be one recipe, or {BlockWise1x16, TensorWise} (NVFP4's two-level "
             "scales), got ", nr, " recipes");
  REEL_CHECK(s.list.size() == nr, value_error, fn, ": ", name, " must have one tensor per recipe (", nr, "), got ",
             s.list.size());
  for (const auto& t : s.list) REEL_CHECK(t.defined(), value_error, fn, ": ", name, " is required");
  const S r0 = r.list[0];
  const AnyTensor& s0 = s.list[0];
  const bool fp4 = data == ScalarType::Float4_e2m1fn_x2;
  const char* operand = !b ? "data" : is_a ? "mat_a" : "mat_b";
  if (r0 == S::BlockWise1x16)
    REEL_CHECK(fp4, value_error, fn, ": the BlockWise1x16 recipe (NVFP4) takes float4_e2m1fn_x2 data, got ",
               dtype_name(data), " (", operand, ")");
  else if (r0 == S::BlockWise1x32)
    REEL_CHECK(fp4 || data == ScalarType::Float8_e4m3fn, value_error, fn,
               ": the BlockWise1x32 recipe takes float8_e4m3fn (MXFP8) or float4_e2m1fn_x2 (MXFP4) data, got ",
               dtype_name(data), " (", operand, ")");
  else
    REEL_CHECK(!fp4, value_error, fn,
               ": float4_e2m1fn_x2 data goes with the BlockWise1x32 (MXFP4) and BlockWise1x16 (NVFP4) recipes, not ",
               scaling_name(r0));
  const ScalarType want = r0 == S::BlockWise1x32 ? ScalarType::Float8_e8m0fnu
                          : r0 == S::BlockWise1x16 ? ScalarType::Float8_e4m3fn
                                                   : ScalarType::Float;
  REEL_CHECK(s0.dtype() == want, type_error, fn, ": ", name, " of the ", scaling_name(r0), " recipe must be a ",
             dtype_name(want), " tensor, got ", dtype_name(s0.dtype()));
  if (nr == 2)
    REEL_CHECK(s.list[1].dtype() == ScalarType::Float && s.list[1].numel() == 1, value_error, fn,
               ": the global scale of two-level scales (", name, "[1]) must be a float32 tensor with one element, got ",
               dtype_name(s.list[1].dtype()), " of shape ", s.list[1].sizes());
  if (!smm::mx_recipe(r0))
    REEL_CHECK(sw == SwizzleType::NoSwizzle, value_error, fn,
               ": swizzled scales go with the BlockWise1x32 / BlockWise1x16 recipes only; ", scaling_name(r0),
               " scales are not swizzled");
  REEL_CHECK(sw != SwizzleType::Swizzle_32_8 || r0 == S::BlockWise1x32, value_error, fn,
             ": Swizzle_32_8 (hipBLASLt's layout of MX scales) goes with the BlockWise1x32 recipe only");
  const int64_t nkb = smm::cdiv(K, scale_kblock(r0, K));
  Shape want_shape;
  switch (r0) {
    case S::TensorWise:
      REEL_CHECK(s0.numel() == 1, value_error, fn, ": ", name, " of the TensorWise recipe must have one element, got shape ",
                 s0.sizes());
      return;
    case S::RowWise: want_shape = is_a ? Shape{rows, 1} : Shape{1, rows}; break;
    case S::BlockWise1x128: want_shape = is_a ? Shape{rows, nkb} : Shape{nkb, rows}; break;
    case S::BlockWise128x128: want_shape = is_a ? Shape{smm::cdiv(rows, 128), nkb} : Shape{nkb, smm::cdiv(rows, 128)}; break;
    default:  // BlockWise1x32 / 1x16: [rows, K blocks] as it is, or swizzled (padded, any shape)
      if (sw == SwizzleType::NoSwizzle) {
        want_shape = Shape{rows, nkb};
        break;
      }
      REEL_CHECK(s0.numel() == swizzled_numel(sw, rows, nkb), value_error, fn, ": ", name, " of the ",
                 scaling_name(r0), " recipe, swizzled ", smm::swizzle_name(sw), ", must have ",
                 "round_up(", rdim,
                 sw == SwizzleType::Swizzle_32_4_4 ? ", 128) * round_up(ceil(K / " : ", 32) * round_up(ceil(K / ",
                 scale_kblock(r0, K), sw == SwizzleType::Swizzle_32_4_4 ? "), 4) = " : "), 8) = ",
                 swizzled_numel(sw, rows, nkb), " elements for ", shapes, ", got shape ", s0.sizes());
      return;
  }
  REEL_CHECK(s0.sizes() == want_shape, value_error, fn, ": ", name, " of the ", scaling_name(r0),
             " recipe must have shape ", want_shape, " for ", shapes, ", got ", s0.sizes());
}

REEL_INLINE std::vector<double> scale_rows(const Scales& s, const Recipes& r, SwizzleType sw, bool is_a, int64_t rows,
                                           int64_t K) {
  using S = ScalingType;
  const S r0 = r.list[0];
  const int64_t nkb = smm::cdiv(K, scale_kblock(r0, K)), rb = smm::cdiv(rows, 128);
  const auto v = as_doubles(s.list[0]);
  const double g = r.list.size() == 2 ? as_doubles(s.list[1])[0] : 1.0;
  std::vector<double> out(static_cast<size_t>(rows * nkb));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t kb = 0; kb < nkb; ++kb) {
      double x;
      switch (r0) {
        case S::TensorWise: x = v[0]; break;
        case S::RowWise: x = v[i]; break;
        case S::BlockWise1x128: x = is_a ? v[i * nkb + kb] : v[kb * rows + i]; break;
        case S::BlockWise128x128: x = is_a ? v[(i / 128) * nkb + kb] : v[kb * rb + i / 128]; break;
        default: x = v[sw == SwizzleType::NoSwizzle ? i * nkb + kb : swizzled_index(sw, i, kb, nkb)];
      }
      out[i * nkb + kb] = x * g;
    }
  return out;
}

REEL_INLINE int64_t check_scaled_mm(const char* fn, ScalarType ta, ScalarType tb, const Shape& a, const Shape& b,
                                    const Scales& sa, const Recipes& ra, const Scales& sb, const Recipes& rb,
                                    SwizzleType swa, SwizzleType swb, bool fast_accum) {
  REEL_CHECK(a.size() == 2 && b.size() == 2, value_error, fn, ": mat_a and mat_b must be matrices (2-D), got shapes ", a,
             " and ", b);
  REEL_CHECK(a[1] == b[0], value_error, fn, ": mat_a and mat_b shapes cannot be multiplied (", a[0], "x", a[1], " and ",
             b[0], "x", b[1], ")");
  const bool fp4 = ta == ScalarType::Float4_e2m1fn_x2;
  const int64_t M = a[0], K = a[1] * (fp4 ? 2 : 1), N = b[1];
  REEL_CHECK(K % 16 == 0, value_error, fn, fp4 ? ": K (2 * mat_a.size(1), FP4 being packed) must be a multiple of 16, got "
                                               : ": K (mat_a.size(1)) must be a multiple of 16, got ", K);
  REEL_CHECK(!(fp4 && fast_accum), value_error, fn,
             ": use_fast_accum is not supported with float4_e2m1fn_x2 data (as in PyTorch)");
  REEL_CHECK(!ra.list.empty() && !rb.list.empty(), value_error, fn, ": recipe_a and recipe_b are required");
  using S = ScalingType;
  const S a0 = ra.list[0], b0 = rb.list[0];
  const bool ok = (a0 == S::TensorWise && b0 == S::TensorWise) || (a0 == S::RowWise && b0 == S::RowWise) ||
                  ((a0 == S::BlockWise1x128 || a0 == S::BlockWise128x128) &&
                   (b0 == S::BlockWise1x128 || b0 == S::BlockWise128x128) &&
                   !(a0 == S::BlockWise128x128 && b0 == S::BlockWise128x128)) ||
                  (a0 == S::BlockWise1x32 && b0 == S::BlockWise1x32) || (a0 == S::BlockWise1x16 && b0 == S::BlockWise1x16);
  REEL_CHECK(ok, value_error, fn, ": the recipe pair (", scaling_name(a0), ", ", scaling_name(b0),
             ") is not supported; the pairs are (TensorWise, TensorWise), (RowWise, RowWise), (BlockWise1x128 or "
             "BlockWise128x128, BlockWise1x128 or BlockWise128x128, not both 128x128), (BlockWise1x32, BlockWise1x32) "
             "and (BlockWise1x16, BlockWise1x16)");
  REEL_CHECK(ra.list.size() == rb.list.size(), value_error, fn,
             ": two-level (NVFP4) scales must be given for both operands or for neither");
  check_scales(fn, true, ta, sa, ra, swa, M, K, a, &b);
  check_scales(fn, false, tb, sb, rb, swb, N, K, a, &b);
  return K;
}

REEL_INLINE void scaled_mm_exact(int64_t M, int64_t N, int64_t K, int64_t kblock, const double* a, const double* b,
                                 bool b_nk, const double* sa, const double* sb, double* acc) {
  const int64_t nkb = smm::cdiv(K, kblock);
  std::vector<double> part(static_cast<size_t>(M * N));
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int64_t k0 = kb * kblock, kk = std::min(K, k0 + kblock) - k0;
    if (b_nk)
      gemm_ex<double, false, true>(M, N, kk, a + k0, K, b + k0, K, part.data(), N, false);
    else
      gemm_ex<double, false, false>(M, N, kk, a + k0, K, b + k0 * N, N, part.data(), N, false);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) acc[m * N + n] += part[m * N + n] * sa[m * nkb + kb] * sb[n * nkb + kb];
  }
}

REEL_INLINE void scaled_mm_fast(int64_t M, int64_t N, int64_t K, const float* a, const float* b, bool b_nk,
                                float* c) {
  if (b_nk)
    gemm_ex<float, false, true>(M, N, K, a, K, b, K, c, N, false);
  else
    gemm_ex<float, false, false>(M, N, K, a, K, b, N, c, N, false);
}

}  // namespace detail
}  // namespace reel
