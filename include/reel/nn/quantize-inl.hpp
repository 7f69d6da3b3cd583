#pragma once
// The non-template parts of quantize (header-only mode: included by quantize.hpp; compiled
// mode: by src/runtime.cpp).
#include <bit>
#include <cmath>

#include "quantize.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

REEL_INLINE void check_quantize_recipe(const char* fn, ScalarType q, ScalingType r, bool two_level, SwizzleType sw) {
  using S = ScalingType;
  const bool fp4 = q == ScalarType::Float4_e2m1fn_x2, mx = r == S::BlockWise1x32 || r == S::BlockWise1x16;
  REEL_CHECK(!fp4 || mx, value_error, fn,
             ": float4_e2m1fn_x2 data goes with the BlockWise1x32 (MXFP4) and BlockWise1x16 (NVFP4) recipes, not ",
             scaling_name(r));
  REEL_CHECK(r != S::BlockWise1x16 || fp4, value_error, fn,
             ": the BlockWise1x16 recipe (NVFP4) takes float4_e2m1fn_x2 data, got ", dtype_name(q));
  REEL_CHECK(!two_level || r == S::BlockWise1x16, value_error, fn,
             ": two-level scales belong to the BlockWise1x16 recipe (NVFP4), not ", scaling_name(r));
  REEL_CHECK(sw == SwizzleType::NoSwizzle || mx, value_error, fn,
             ": swizzled scales go with the BlockWise1x32 / BlockWise1x16 recipes only; ", scaling_name(r),
             " scales are not swizzled");
  REEL_CHECK(sw != SwizzleType::Swizzle_32_8 || r == S::BlockWise1x32, value_error, fn,
             ": Swizzle_32_8 (hipBLASLt's layout of MX scales) goes with the BlockWise1x32 recipe only");
}

// |x|'s maximum over a range, NaN if any is NaN
inline float quantize_amax(const float* x, int64_t n, int64_t stride = 1) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i * stride]);
    if (!(a <= m)) m = std::isnan(m) ? m : a;
  }
  return m;
}

REEL_INLINE void quantize_rows(ScalarType q, ScalingType r, bool two_level, int64_t R, int64_t K, const float* x,
                               std::uint8_t* codes, std::vector<double>& scales, double& global) {
  using S = ScalingType;
  const int64_t kblock = scale_kblock(r, K), nkb = (K + kblock - 1) / kblock;
  const int64_t G = r == S::TensorWise ? 1 : r == S::BlockWise128x128 ? (R + 127) / 128 : R;
  const float qmax = q == ScalarType::Float8_e4m3fn ? 448.0f : q == ScalarType::Float8_e5m2 ? 57344.0f : 6.0f;
  auto code = [q](float v) -> std::uint8_t {
    if (q == ScalarType::Float8_e4m3fn) return to_float8_e4m3fn(v, true).bits();
    if (q == ScalarType::Float8_e5m2) return to_float8_e5m2(v, true).bits();
    return float4_e2m1fn_x2(v, 0.0f).bits() & 0xF;  // (saturates at 6)
  };
  scales.assign(static_cast<size_t>(G * nkb), 0.0);
  global = 1;
  if (two_level) global = static_cast<float>(std::max(quantize_amax(x, R * K), 1e-12f) / (448.0f * 6.0f));
  const float gf = static_cast<float>(global);
  // the rows and K range of group (g, kb)
  auto rows_of = [&](int64_t g, int64_t& r0, int64_t& r1) {
    if (r == S::TensorWise) r0 = 0, r1 = R;
    else if (r == S::BlockWise128x128) r0 = g * 128, r1 = std::min(R, r0 + 128);
    else r0 = g, r1 = g + 1;
  };
  for (int64_t g = 0; g < G; ++g) {
    int64_t r0, r1;
    rows_of(g, r0, r1);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = kb * kblock, k1 = std::min(K, k0 + kblock);
      float amax = 0;
      for (int64_t i = r0; i < r1; ++i) {
        const float a = quantize_amax(x + i * K + k0, k1 - k0);
        if (!(a <= amax)) amax = std::isnan(amax) ? amax : a;
      }
      // the scale, and what multiplies x before the cast
      double scale;
      auto apply = [&](auto&& f) {
        for (int64_t i = r0; i < r1; ++i)
          for (int64_t k = k0; k < k1; ++k) codes[i * K + k] = code(f(x[i * K + k]));
      };
      if (r == S::BlockWise1x32) {  // power-of-two scale, OCP MX (floor)
        const int emax = q == ScalarType::Float8_e4m3fn ? 8 : q == ScalarType::Float8_e5m2 ? 15 : 2;
        if (!std::isfinite(amax)) {
          scale = std::numeric_limits<double>::quiet_NaN();
        } else {
          const int e = amax == 0 ? -127 : std::clamp(std::ilogb(amax) - emax, -127, 127);
          scale = std::ldexp(1.0, e);
        }
        apply([&](float v) { return static_cast<float>(static_cast<double>(v) / scale); });
      } else if (r == S::BlockWise1x16) {  // NVFP4: e4m3 block scales (over the global scale)
        const float bs = std::clamp(amax / 6.0f / gf, 0.015625f, 448.0f);
        const float blk = convert<float>(to_float8_e4m3fn(std::isnan(amax) ? amax : bs, true));
        scale = blk;
        const float den = gf * blk;
        apply([&](float v) { return v / den; });
      } else {  // float32 scales: enc = max_q / amax
        const float enc = qmax / std::max(amax, 1e-12f);
        scale = 1.0f / enc;
        apply([&](float v) { return v * enc; });
      }
      scales[g * nkb + kb] = scale;
    }
  }
}

}  // namespace detail
}  // namespace reel
