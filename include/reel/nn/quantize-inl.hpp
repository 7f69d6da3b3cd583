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

REEL_INLINE void quantize_rows(ScalarType q, ScalingType r, bool two_level, int64_t R, int64_t K, const float* x,
                               std::uint8_t* codes, std::vector<float>& scales, float& global) {
  using S = ScalingType;
  const int64_t kblock = scale_kblock(r, K), nkb = (K + kblock - 1) / kblock;
  const int64_t G = quantize_groups(r, R, K) / std::max<int64_t>(nkb, 1);
  scales.assign(static_cast<size_t>(G * nkb), 0.0f);
  global = two_level ? quant_global(quant_amax(x, R * K)) : 1.0f;
  // the encoding loop with the element type chosen once
  auto encode = [&](int64_t r0, int64_t r1, int64_t k0, int64_t k1, const QuantRule& rule) {
    auto run = [&](auto&& code) {
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t k = k0; k < k1; ++k) {
          const float v = x[i * K + k];
          codes[i * K + k] = code(rule.divide ? v / rule.factor : v * rule.factor);
        }
    };
    if (q == ScalarType::Float8_e4m3fn)
      run([](float v) { return fp8_code_saturating<e4m3fn_format>(v); });
    else if (q == ScalarType::Float8_e5m2)
      run([](float v) { return fp8_code_saturating<e5m2_format>(v); });
    else
      run([](float v) { return quant_code(ScalarType::Float4_e2m1fn_x2, v); });
  };
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = r == S::TensorWise ? 0 : r == S::BlockWise128x128 ? g * 128 : g;
    const int64_t r1 = r == S::TensorWise ? R : r == S::BlockWise128x128 ? std::min(R, r0 + 128) : g + 1;
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = kb * kblock, k1 = std::min(K, k0 + kblock);
      float amax = 0;
      for (int64_t i = r0; i < r1; ++i) {
        const float a = quant_amax(x + i * K + k0, k1 - k0);
        if (!(a <= amax)) amax = amax != amax ? amax : a;
      }
      const QuantRule rule = quant_rule(q, r, amax, global);
      scales[g * nkb + kb] = rule.scale;
      encode(r0, r1, k0, k1, rule);
    }
  }
}

}  // namespace detail
}  // namespace reel
