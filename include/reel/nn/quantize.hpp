#pragma once
// quantize / dequantize for scaled_mm: amax -> scale -> saturating cast, per recipe, with the
// conventions of torchao's float8 and MX code (the recipes' reference implementations):
// - TensorWise, RowWise, BlockWise1x128, BlockWise128x128 (float32 scales): per group,
//   enc = max_q / max(amax, 1e-12) in float, data = saturate(x * enc), scale = 1 / enc (the
//   decoding factor scaled_mm takes);
// - BlockWise1x32 (MX, float8_e8m0fnu scales): scale = 2^(floor(log2(amax)) - emax_q), emax_q
//   being 8 (e4m3), 15 (e5m2) or 2 (e2m1), clamped to [2^-127, 2^127]; amax 0 gives 2^-127, a
//   NaN or infinite amax a NaN scale; data = saturate(x / scale);
// - BlockWise1x16 (NVFP4, float4_e2m1fn_x2 data, float8_e4m3fn scales): block scale =
//   e4m3(clamp(amax / 6 / g, 2^-6, 448)), data = saturate(x / (g * block scale)), g = 1, or with
//   two_level a float32 global scale g = max(amax of the tensor, 1e-12) / (448 * 6).
// Everything is computed in float, the input converted to float first.
#include "../core/config.hpp"

#include "scaled_mm.hpp"

namespace reel::inline REEL_ABI {
namespace nn::functional {

struct QuantizeOptions {
  // The contraction dim: blocks of 1 x k run along it, and the scales take the layout scaled_mm
  // wants for that operand: -1 (or 1) for mat_a [M, K], 0 for mat_b [K, N]. FP4 data is packed
  // along it.
  int64_t dim = -1;
  SwizzleType swizzle = SwizzleType::NoSwizzle;  // the layout of BlockWise1x32 / 1x16 scales
  bool two_level = false;  // BlockWise1x16: a float32 global scale besides the e4m3 block scales
};

template <class Q, class D>
struct Quantized {
  Tensor<Q, D> data;
  Scales scale;    // decoding factors in scaled_mm's layout ({block scales, global scale}: two-level)
  Recipes recipe;  // ({BlockWise1x16, TensorWise}: two-level)
  QuantizeOptions options;
};

}  // namespace nn::functional

namespace detail {
// The recipe rules of quantize / dequantize for data of type q.
REEL_INLINE void check_quantize_recipe(const char* fn, ScalarType q, ScalingType r, bool two_level, SwizzleType sw);
// Quantizes x ([R, K] row-major floats, K the contraction) into one code per value (FP4: the
// nibble) and the group scales ([G, nkb] row-major: G = 1 (TensorWise), ceil(R / 128)
// (BlockWise128x128) or R) as doubles; global: the two-level global scale (else 1).
REEL_INLINE void quantize_rows(ScalarType q, ScalingType r, bool two_level, int64_t R, int64_t K, const float* x,
                               std::uint8_t* codes, std::vector<double>& scales, double& global);
}  // namespace detail

namespace nn::functional {

// x quantized to Q (float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2) with the recipe's scales.
// x: 2-D (TensorWise: any shape).
template <class Q, TensorLike X>
Quantized<Q, detail::device_t<X>> quantize(const X& xe, ScalingType recipe, const QuantizeOptions& o = {}) {
  using T = detail::value_t<X>;
  using D = detail::device_t<X>;
  static_assert(detail::is_scaled_mm_data_v<Q>,
                "reel::quantize: the data type must be float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2");
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::quantize: needs a float, double, half or bfloat16 tensor");
  detail::require_host_memory<D>("quantize");
  auto x = Tensor<T, D>(detail::materialize(xe));
  detail::check_quantize_recipe("quantize", scalar_type_v<Q>, recipe, o.two_level, o.swizzle);
  const bool tw = recipe == ScalingType::TensorWise;
  REEL_CHECK(tw || x.dim() == 2, value_error, "quantize: the ", detail::scaling_name(recipe),
             " recipe needs a matrix (2-D), got shape ", x.sizes());
  const int64_t d = x.dim() == 2 ? (o.dim < 0 ? o.dim + 2 : o.dim) : 1;
  REEL_CHECK(x.dim() != 2 || d == 0 || d == 1, value_error, "quantize: dim must be -1, 0 or 1, got ", o.dim);
  const int64_t K = x.dim() == 2 ? x.size(d) : x.numel(), R = x.dim() == 2 ? x.size(1 - d) : 1;
  constexpr bool fp4 = is_fp4_v<Q>;
  REEL_CHECK(!fp4 || K % 2 == 0, value_error, "quantize: FP4 data packs pairs along dim ", d,
             ", whose size must be even, got ", K);
  // [R, K] row-major floats
  auto rk = (x.dim() == 2 && d == 0 ? x.mT() : x).template to<float>().contiguous();
  std::vector<std::uint8_t> codes(static_cast<size_t>(R * K));
  std::vector<double> gs;
  double global = 1;
  if constexpr (detail::Backend<D>::has_data)
    detail::quantize_rows(scalar_type_v<Q>, recipe, o.two_level, R, K, rk.data_ptr(), codes.data(), gs, global);
  // the data, in x's layout (FP4: packed along d)
  Shape ds = x.sizes();
  if (fp4) ds[d] /= 2;
  auto data = empty<Q, D>(ds);
  if constexpr (detail::Backend<D>::has_data) {
    auto* p = reinterpret_cast<std::uint8_t*>(data.mutable_data_ptr());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const std::uint8_t c = codes[r * K + k];
        if constexpr (fp4) {
          const int64_t i = d == 1 ? r * (K / 2) + k / 2 : (k / 2) * R + r;
          p[i] = static_cast<std::uint8_t>((k & 1) ? (p[i] | (c << 4)) : c);
        } else {
          p[d == 1 ? r * K + k : k * R + r] = c;
        }
      }
  }
  // the scales, in the layout scaled_mm takes for this operand (is_a: d == 1)
  const bool is_a = d == 1;
  const int64_t nkb = (K + detail::scale_kblock(recipe, K) - 1) / detail::scale_kblock(recipe, K);
  const int64_t G = static_cast<int64_t>(gs.size()) / std::max<int64_t>(nkb, 1);
  auto layout = [&]<class S>(Shape shape, int64_t numel, auto index) {
    std::vector<S> v(static_cast<size_t>(numel), S(0.0f));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t kb = 0; kb < nkb; ++kb) v[index(g, kb)] = S(static_cast<float>(gs[g * nkb + kb]));
    return from_vector<S, D>(v, shape);
  };
  auto plain = [&](int64_t g, int64_t kb) { return is_a ? g * nkb + kb : kb * G + g; };
  AnyTensor scale;
  switch (recipe) {
    case ScalingType::TensorWise: scale = layout.template operator()<float>(Shape{}, 1, plain); break;
    case ScalingType::RowWise:
      scale = layout.template operator()<float>(is_a ? Shape{R, 1} : Shape{1, R}, R, plain);
      break;
    case ScalingType::BlockWise1x128:
    case ScalingType::BlockWise128x128:
      scale = layout.template operator()<float>(is_a ? Shape{G, nkb} : Shape{nkb, G}, G * nkb, plain);
      break;
    default: {
      auto put = [&]<class S>() {
        if (o.swizzle == SwizzleType::NoSwizzle)
          return layout.template operator()<S>(Shape{R, nkb}, R * nkb, [&](int64_t g, int64_t kb) { return g * nkb + kb; });
        const int64_t n = detail::swizzled_numel(o.swizzle, R, nkb);
        return layout.template operator()<S>(Shape{n}, n, [&](int64_t g, int64_t kb) {
          return detail::swizzled_index(o.swizzle, g, kb, nkb);
        });
      };
      if (recipe == ScalingType::BlockWise1x32)
        scale = put.template operator()<float8_e8m0fnu>();
      else
        scale = put.template operator()<float8_e4m3fn>();
    }
  }
  if (o.two_level)
    return {data, Scales{scale, from_vector<float, D>({static_cast<float>(global)}, Shape{})},
            Recipes{ScalingType::BlockWise1x16, ScalingType::TensorWise}, o};
  return {data, Scales{scale}, Recipes{recipe}, o};
}

// The values data * scale (scales as quantize makes them and scaled_mm takes them; o.dim:
// the contraction dim, o.swizzle: the layout of BlockWise1x32 / 1x16 scales), rounded once to
// Out. FP4 data is unpacked along o.dim.
template <class Out = float, class Q, class D>
Tensor<Out, D> dequantize(const Tensor<Q, D>& data, const Scales& scale, const Recipes& recipe,
                          const QuantizeOptions& o = {}) {
  static_assert(detail::is_scaled_mm_data_v<Q>,
                "reel::dequantize: the data type must be float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2");
  detail::require_host_memory<D>("dequantize");
  REEL_CHECK(!recipe.list.empty(), value_error, "dequantize: a recipe is required");
  const ScalingType r0 = recipe.list[0];
  detail::check_quantize_recipe("dequantize", scalar_type_v<Q>, r0, recipe.list.size() == 2, o.swizzle);
  const bool tw = r0 == ScalingType::TensorWise;
  REEL_CHECK(tw || data.dim() == 2, value_error, "dequantize: the ", detail::scaling_name(r0),
             " recipe needs a matrix (2-D), got shape ", data.sizes());
  constexpr bool fp4 = is_fp4_v<Q>;
  const bool mat = data.dim() == 2;
  const int64_t d = mat ? (o.dim < 0 ? o.dim + 2 : o.dim) : 1;
  REEL_CHECK(!mat || d == 0 || d == 1, value_error, "dequantize: dim must be -1, 0 or 1, got ", o.dim);
  auto view = mat ? data : data.reshape({1, data.numel()});
  const int64_t K = view.size(d) * (fp4 ? 2 : 1), R = view.size(1 - d);
  detail::check_scales("dequantize", d == 1, scalar_type_v<Q>, scale, recipe, o.swizzle, R, K, data.sizes(),
                       data.sizes());
  Shape os = data.sizes();
  if (fp4) os[d] *= 2;
  auto out = empty<Out, D>(os);
  if constexpr (detail::Backend<D>::has_data) {
    const int64_t kblock = detail::scale_kblock(r0, K), nkb = (K + kblock - 1) / kblock;
    const auto s = detail::scale_rows(scale, recipe, o.swizzle, d == 1, R, K);
    const auto v = detail::decode_matrix<double>(view, static_cast<int>(d), s.data(), nkb, kblock, d == 0);
    Out* p = out.mutable_data_ptr();
    for (size_t i = 0; i < v.size(); ++i) p[i] = convert<Out>(v[i]);
  }
  return out;
}
template <class Out = float, class Q, class D>
Tensor<Out, D> dequantize(const Quantized<Q, D>& q) {
  return dequantize<Out>(q.data, q.scale, q.recipe, q.options);
}

}  // namespace nn::functional
}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "quantize-inl.hpp"
#endif
