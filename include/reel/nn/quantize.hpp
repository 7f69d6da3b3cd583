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
#include <bit>
#include <cmath>

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
// The rules of quantize as functions of one value or one group, shared by the CPU
// (quantize-inl.hpp) and CUDA (cuda/scaled_mm.cuh): float arithmetic only, bit operations
// instead of <cmath>, so host and device compute the same bits.

// float -> FP8 code (e4m3fn_format / e5m2_format), rounded to nearest even, saturating (OCP
// satfinite), NaN to the format's NaN: what to_float8_*(v, true) gives for a float.
template <class Fmt>
REEL_HD inline std::uint8_t fp8_code_saturating(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v), a = u & 0x7FFFFFFFu;
  const std::uint32_t sign = (u >> 31) ? Fmt::sign_mask : 0u;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | Fmt::nan_bits);
  constexpr int drop = 23 - Fmt::man_bits;
  constexpr std::uint32_t min_normal = static_cast<std::uint32_t>(127 + Fmt::emin) << 23;
  std::uint32_t mag;
  if (a >= min_normal) {  // round the mantissa to man_bits (a carry moves into the exponent), rebias
    const std::uint32_t r = a + ((1u << (drop - 1)) - 1) + ((a >> drop) & 1u);
    mag = (r >> drop) - (static_cast<std::uint32_t>(127 + Fmt::emin - 1) << Fmt::man_bits);
  } else {  // subnormal: a multiple of 2^(emin - man_bits); m < 2^(man_bits + 1) rounded to an
            // integer by adding and taking away 2^23 (one rounding, to nearest even)
    const float m = std::bit_cast<float>(a) * static_cast<float>(1u << (Fmt::man_bits - Fmt::emin));
    mag = static_cast<std::uint32_t>((m + 8388608.0f) - 8388608.0f);
  }
  if (mag > Fmt::max_finite_bits) mag = Fmt::max_finite_bits;
  return static_cast<std::uint8_t>(sign | mag);
}
// The code of v in data type q (FP4: the nibble; 6 and beyond saturate).
REEL_HD inline std::uint8_t quant_code(ScalarType q, float v) {
  if (q == ScalarType::Float8_e4m3fn) return fp8_code_saturating<e4m3fn_format>(v);
  if (q == ScalarType::Float8_e5m2) return fp8_code_saturating<e5m2_format>(v);
  return static_cast<std::uint8_t>(float4_e2m1fn_x2(v, 0.0f).bits() & 0xF);
}
// max |x[i * stride]| over n values, NaN if any is NaN
REEL_HD inline float quant_amax(const float* x, int64_t n, int64_t stride = 1) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::bit_cast<float>(std::bit_cast<std::uint32_t>(x[i * stride]) & 0x7FFFFFFFu);
    if (!(a <= m)) m = m != m ? m : a;
  }
  return m;
}
// 2^k as a float, k in [-127, 127]
REEL_HD inline float quant_pow2(int k) {
  return k >= -126 ? std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23) : std::bit_cast<float>(1u << 22);
}
// One group's decoding scale and what its values become before the cast: x * factor, or
// x / factor when `divide` (NVFP4). global: the two-level global scale (else 1).
struct QuantRule {
  float factor;
  bool divide;
  float scale;
};
REEL_HD inline QuantRule quant_rule(ScalarType q, ScalingType r, float amax, float global) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  if (r == ScalingType::BlockWise1x32) {  // power-of-two scale, OCP MX (floor)
    if (!(amax <= 3.4028234663852886e38f)) return {nan, false, nan};  // NaN or infinite
    const int emax = q == ScalarType::Float8_e4m3fn ? 8 : q == ScalarType::Float8_e5m2 ? 15 : 2;
    const int biased = static_cast<int>(std::bit_cast<std::uint32_t>(amax) >> 23);
    int e = amax == 0 || biased == 0 ? -127 : biased - 127 - emax;  // (subnormal amax: below -127 anyway)
    e = e < -127 ? -127 : e > 127 ? 127 : e;
    return {quant_pow2(-e), false, quant_pow2(e)};
  }
  if (r == ScalingType::BlockWise1x16) {  // NVFP4: an e4m3 block scale over the global scale
    float bs = amax / 6.0f / global;
    bs = bs < 0.015625f ? 0.015625f : bs > 448.0f ? 448.0f : bs;
    const float blk = static_cast<float>(
        decode_format_to_double<e4m3fn_format>(fp8_code_saturating<e4m3fn_format>(amax != amax ? amax : bs)));
    return {global * blk, true, blk};
  }
  const float qmax = q == ScalarType::Float8_e4m3fn ? 448.0f : q == ScalarType::Float8_e5m2 ? 57344.0f : 6.0f;
  const float enc = qmax / (amax > 1e-12f || amax != amax ? amax : 1e-12f);
  return {enc, false, 1.0f / enc};
}
// The two-level global scale from the tensor's amax.
REEL_HD inline float quant_global(float amax) { return (amax > 1e-12f || amax != amax ? amax : 1e-12f) / (448.0f * 6.0f); }

// What quantize computes before laying out its results: one code per value of the [R, K]
// input (FP4: the nibble), the group scales [G, nkb] (G = 1 (TensorWise), ceil(R / 128)
// (BlockWise128x128) or R), the global scale (1 unless two-level).
template <class D>
struct QuantCodes {
  Tensor<std::uint8_t, D> codes;
  Tensor<float, D> scales;
  Tensor<float, D> global;  // (one element)
};
// G * nkb: how many groups (scales) a recipe makes of an [R, K] input.
inline int64_t quantize_groups(ScalingType r, int64_t R, int64_t K) {
  const int64_t kblock = scale_kblock(r, K), nkb = (K + kblock - 1) / kblock;
  const int64_t G = r == ScalingType::TensorWise ? 1 : r == ScalingType::BlockWise128x128 ? (R + 127) / 128 : R;
  return G * nkb;
}
// float32 group scales gp ([G, nkb]) as scaled_mm takes them: [G, nkb] (is_a) or [nkb, G].
// (fill_by_index's function objects are named types: see there)
struct PlainScaleAt {
  const float* gp;
  int64_t G, nkb;
  bool is_a;
  REEL_HD float operator()(int64_t i) const { return gp[is_a ? i : (i % G) * nkb + i / G]; }
};
template <class D>
Tensor<float, D> quant_plain_scales(const float* gp, int64_t G, int64_t nkb, bool is_a, Shape shape) {
  return fill_by_index<float, D>(G * nkb, PlainScaleAt{gp, G, nkb, is_a}).reshape(std::move(shape));
}
template <class S>
struct ByteScaleAt {
  const float* gp;
  int64_t R, nkb;
  SwizzleType sw;
  REEL_HD S operator()(int64_t i) const {
    int64_t r = i / nkb, c = i % nkb;
    if (sw != SwizzleType::NoSwizzle) swizzled_position(sw, i, nkb, r, c);
    return S(r < R && c < nkb ? gp[r * nkb + c] : 0.0f);
  }
};
// The codes ([R, K] bytes) as Q data in x's layout ([R, Kd], or [Kd, R] when !along_rows).
template <class Q>
struct CodeAt {
  const std::uint8_t* cp;
  int64_t K, Kd, R;
  bool along_rows;
  REEL_HD Q operator()(int64_t i) const {
    const int64_t r = along_rows ? i / Kd : i % R, k = along_rows ? i % Kd : i / R;
    const std::uint8_t* row = cp + r * K;
    if constexpr (is_fp4_v<Q>)
      return Q::from_bits(static_cast<std::uint8_t>(row[2 * k] | (row[2 * k + 1] << 4)));
    else
      return Q::from_bits(row[k]);
  }
};
// One dequantized value: the code at (r, c) of a [rows, VC] byte view times its group's scale.
template <class Q, class Out>
struct DequantAt {
  const std::uint8_t* p;
  const double* sp;
  int64_t s0, s1, VC, nkb, kblock;
  bool along_rows;
  REEL_HD Out operator()(int64_t i) const {
    const int64_t r = i / VC, c = i % VC, k = along_rows ? c : r, row = along_rows ? r : c;
    // (FP4: two values per byte along the packed dim)
    const int64_t at = is_fp4_v<Q> ? (along_rows ? r * s0 + (c / 2) * s1 : (r / 2) * s0 + c * s1) : r * s0 + c * s1;
    const std::uint8_t b = p[at];
    double v;
    if constexpr (is_fp4_v<Q>)
      v = float4_e2m1fn_x2::from_bits(static_cast<std::uint8_t>((b >> (4 * (k & 1))) & 0xF)).first();
    else if constexpr (std::is_same_v<Q, float8_e4m3fn>)
      v = decode_format_to_double<e4m3fn_format>(b);
    else
      v = decode_format_to_double<e5m2_format>(b);
    return convert<Out>(v * sp[row * nkb + k / kblock]);
  }
};
// One-byte group scales gp ([R, nkb]) as they are or swizzled (padding 0).
template <class S, class D>
Tensor<S, D> quant_byte_scales(const float* gp, int64_t R, int64_t nkb, SwizzleType sw) {
  const int64_t n = sw == SwizzleType::NoSwizzle ? R * nkb : swizzled_numel(sw, R, nkb);
  Tensor<S, D> t = fill_by_index<S, D>(n, ByteScaleAt<S>{gp, R, nkb, sw});
  return sw == SwizzleType::NoSwizzle ? Tensor<S, D>(t.reshape({R, nkb})) : t;
}
// The scales with each tensor on the host (dequantize on CUDA lays them out there).
template <class D>
Scales scales_on_host(const Scales& s) {
  Scales h = s;
  for (auto& t : h.list) {
    if (t.device() == DeviceType::CPU) continue;
    if (t.dtype() == ScalarType::Float8_e8m0fnu)
      t = AnyTensor(t.template as<float8_e8m0fnu, D>().template to_device<CPU>());
    else if (t.dtype() == ScalarType::Float8_e4m3fn)
      t = AnyTensor(t.template as<float8_e4m3fn, D>().template to_device<CPU>());
    else
      t = AnyTensor(t.template as<float, D>().template to_device<CPU>());  // (check_scales admits no other)
  }
  return h;
}
// The recipe rules of quantize / dequantize for data of type q.
REEL_INLINE void check_quantize_recipe(const char* fn, ScalarType q, ScalingType r, bool two_level, SwizzleType sw);
// The CPU's quantize_rows: x [R, K] row-major floats.
REEL_INLINE void quantize_rows(ScalarType q, ScalingType r, bool two_level, int64_t R, int64_t K, const float* x,
                               std::uint8_t* codes, std::vector<float>& scales, float& global);
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
  // [R, K] row-major floats -> codes and group scales (CPU: quantize_rows; CUDA: its kernels)
  auto rk = (x.dim() == 2 && d == 0 ? x.mT() : x).template to<float>().contiguous();
  detail::QuantCodes<D> qc;
  if constexpr (detail::device_memory_v<D>) {
    qc = detail::Backend<D>::quantize_rows(scalar_type_v<Q>, recipe, o.two_level, R, K, rk);
  } else {
    std::vector<std::uint8_t> codes(static_cast<size_t>(R * K));
    std::vector<float> gs;
    float global = 1;
    if constexpr (detail::Backend<D>::has_data)
      detail::quantize_rows(scalar_type_v<Q>, recipe, o.two_level, R, K, rk.data_ptr(), codes.data(), gs, global);
    else
      gs.assign(static_cast<size_t>(detail::quantize_groups(recipe, R, K)), 0.0f);
    qc.codes = from_vector<std::uint8_t, D>(codes, Shape{R * K});
    qc.scales = from_vector<float, D>(gs, Shape{static_cast<int64_t>(gs.size())});
    qc.global = full<float, D>({}, global);
  }
  const std::uint8_t* cp = qc.codes.data_ptr();
  const float* gp = qc.scales.data_ptr();
  // the data, in x's layout (FP4: packed along d)
  Shape ds = x.sizes();
  if (fp4) ds[d] /= 2;
  const int64_t Kd = fp4 ? K / 2 : K, nd = R * Kd;
  const bool along_rows = d == 1;
  Tensor<Q, D> data = detail::fill_by_index<Q, D>(nd, detail::CodeAt<Q>{cp, K, Kd, R, along_rows}).reshape(ds);
  // the scales, in the layout scaled_mm takes for this operand (is_a: d == 1)
  const bool is_a = d == 1;
  const int64_t kblock = detail::scale_kblock(recipe, K), nkb = (K + kblock - 1) / kblock;
  const int64_t G = detail::quantize_groups(recipe, R, K) / std::max<int64_t>(nkb, 1);
  AnyTensor scale;
  switch (recipe) {
    case ScalingType::TensorWise: scale = detail::quant_plain_scales<D>(gp, G, nkb, is_a, Shape{}); break;
    case ScalingType::RowWise:
      scale = detail::quant_plain_scales<D>(gp, G, nkb, is_a, is_a ? Shape{R, 1} : Shape{1, R});
      break;
    case ScalingType::BlockWise1x128:
    case ScalingType::BlockWise128x128:
      scale = detail::quant_plain_scales<D>(gp, G, nkb, is_a, is_a ? Shape{G, nkb} : Shape{nkb, G});
      break;
    case ScalingType::BlockWise1x32: scale = detail::quant_byte_scales<float8_e8m0fnu, D>(gp, R, nkb, o.swizzle); break;
    default: scale = detail::quant_byte_scales<float8_e4m3fn, D>(gp, R, nkb, o.swizzle);
  }
  if (o.two_level)
    return {data, Scales{scale, qc.global.reshape({})},
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
  detail::check_scales("dequantize", d == 1, scalar_type_v<Q>, scale, recipe, o.swizzle, R, K, data.sizes(), nullptr);
  Shape os = data.sizes();
  if (fp4) os[d] *= 2;
  if constexpr (detail::device_memory_v<D>) {
    // the scales (small) laid out on the host as [R, K blocks] doubles, then one kernel
    const int64_t kblock = detail::scale_kblock(r0, K), nkb = (K + kblock - 1) / kblock;
    const Tensor<double, D> sd = from_vector<double, D>(
        detail::scale_rows(detail::scales_on_host<D>(scale), recipe, o.swizzle, d == 1, R, K), Shape{R * nkb});
    const double* sp = sd.data_ptr();
    const auto* p = reinterpret_cast<const std::uint8_t*>(view.data_ptr());
    const int64_t s0 = view.stride(0), s1 = view.stride(1);
    const bool along_rows = d == 1;  // rows of view: R (K along them), else K
    const int64_t VC = along_rows ? K : R;
    return detail::fill_by_index<Out, D>(R * K, detail::DequantAt<Q, Out>{p, sp, s0, s1, VC, nkb, kblock, along_rows})
        .reshape(os);
  }
  auto out = empty<Out, D>(os);
  if constexpr (detail::Backend<D>::has_data) {
    const int64_t kblock = detail::scale_kblock(r0, K), nkb = (K + kblock - 1) / kblock;
    const auto s = detail::scale_rows(scale, recipe, o.swizzle, d == 1, R, K);
    detail::decode_matrix_into(out.mutable_data_ptr(), view, static_cast<int>(d), s.data(), nkb, kblock, d == 0);
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
