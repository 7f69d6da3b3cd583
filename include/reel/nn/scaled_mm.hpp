#pragma once
// FP8 / FP4 scaled matrix products, PyTorch 2.15's torch.nn.functional.scaled_mm /
// scaled_addmm / scaled_addmm_: out = alpha * (decode(A) scaled by scale_a) @ (decode(B)
// scaled by scale_b) (+ beta * input) (+ bias), scales being decoding factors (they multiply).
//
// On the CPU there are two ways, chosen by use_fast_accum as on a GPU (false: accurate, true:
// fast):
// - use_fast_accum = false, the exact reference: every product of two FP8 / FP4 values is
//   exact in double, each scaling block of K (all of K for TensorWise and RowWise, 128, 32 or
//   16 for the block recipes) is summed in double (a double GEMM per block: for e4m3 x e4m3
//   and every FP4 product these sums are exact, whatever the order, while K * 448^2 < 2^35),
//   multiplied by its block scales and added up in double; alpha, beta and the bias are
//   applied in double and the result is rounded once to the output type.
// - use_fast_accum = true, the fast path: each operand decoded to float with its block scales
//   folded in (one rounding per element), one float GEMM over all of K. Against the reference:
//   |fast - exact| <= (K + 2) * 2^-24 * sum_k |a_k s_a b_k s_b| before the final rounding
//   (PyTorch refuses use_fast_accum with FP4 data, and so does reel).
#include "../core/config.hpp"
#include <string>

#include "../interop/any_tensor.hpp"
#include "../ops/products.hpp"

namespace reel::inline REEL_ABI {
namespace nn::functional {

enum class ScalingType { TensorWise, RowWise, BlockWise1x16, BlockWise1x32, BlockWise1x128, BlockWise128x128 };
enum class SwizzleType { NoSwizzle, Swizzle_32_4_4, Swizzle_32_8 };

// The scales of one operand: one tensor, or (NVFP4's two-level scaling) a list,
// {block_scales, global_scale}, with the recipes {BlockWise1x16, TensorWise}.
struct Scales {
  std::vector<AnyTensor> list;
  Scales(const AnyTensor& t) : list{t} {}
  template <class T, class D>
  Scales(const Tensor<T, D>& t) : list{AnyTensor(t)} {}
  Scales(std::initializer_list<AnyTensor> l) : list(l) {}
};
struct Recipes {
  std::vector<ScalingType> list;
  Recipes(ScalingType r) : list{r} {}
  Recipes(std::initializer_list<ScalingType> l) : list(l) {}
};

struct ScaledMmOptions {
  AnyTensor bias{};  // [N], of the output's type (bfloat16 or half outputs only)
  // the layout of BlockWise1x32 / 1x16 scales (for two-level scales: of the block scales)
  SwizzleType swizzle_a = SwizzleType::NoSwizzle, swizzle_b = SwizzleType::NoSwizzle;
  bool use_fast_accum = false;  // CPU: the float fast path instead of the exact reference
};
struct ScaledAddmmOptions {
  double beta = 1, alpha = 1;
  SwizzleType swizzle_a = SwizzleType::NoSwizzle, swizzle_b = SwizzleType::NoSwizzle;
  bool use_fast_accum = false;
};

}  // namespace nn::functional

namespace detail {
using nn::functional::Recipes;
using nn::functional::Scales;
using nn::functional::ScalingType;
using nn::functional::SwizzleType;

REEL_INLINE const char* scaling_name(ScalingType s);
// How many consecutive elements of K one scale covers (K itself for TensorWise and RowWise).
REEL_INLINE int64_t scale_kblock(ScalingType r, int64_t K);

// Where the scale of (row r, K block c) of a [rows, W] scale matrix lies in its swizzled
// buffer, and the buffer's (padded) element count.
REEL_INLINE int64_t swizzled_index(SwizzleType sw, int64_t r, int64_t c, int64_t W);
REEL_INLINE int64_t swizzled_numel(SwizzleType sw, int64_t rows, int64_t W);
// Its inverse: the (row r, K block c) whose scale element i of a swizzled [rows, W] buffer
// holds (r >= rows or c >= W: padding). On the host and in CUDA kernels.
REEL_HD inline void swizzled_position(SwizzleType sw, int64_t i, int64_t W, int64_t& r, int64_t& c) {
  if (sw == SwizzleType::Swizzle_32_4_4) {  // 128x4 tiles of 512 bytes
    const int64_t per_row = (W + 3) / 4, tile = i / 512, w = i % 512;
    r = (tile / per_row) * 128 + ((w % 16) / 4) * 32 + w / 16;
    c = (tile % per_row) * 4 + w % 4;
  } else {  // Swizzle_32_8: 32x8 tiles of 256 bytes
    const int64_t per_row = (W + 7) / 8, tile = i / 256, w = i % 256;
    r = (tile / per_row) * 32 + (w % 2) * 16 + (w % 64) / 4;
    c = (tile % per_row) * 8 + ((w % 4) / 2) * 4 + w / 64;
  }
}
// Checks the scales of one operand with `rows` rows along its outer dim (mat_a: M; mat_b: N)
// and K along the contraction (unpacked), data of type `data` (FP8 or FP4): the recipe list,
// the scale dtypes, shapes (or element counts, swizzled) and the swizzle. value_error /
// type_error naming the rule.
// a, b: the shapes of mat_a and mat_b (scaled_mm), or b null and a the shape of dequantize's
// data (whose scale is then named "scale").
REEL_INLINE void check_scales(const char* fn, bool is_a, ScalarType data, const Scales& s, const Recipes& r,
                              SwizzleType sw, int64_t rows, int64_t K, const Shape& a, const Shape* b);
// The scales of one operand as a row-major [rows, ceil(K / kblock)] matrix of doubles (the
// global scale of two-level scales folded in). Checked by check_scales first.
REEL_INLINE std::vector<double> scale_rows(const Scales& s, const Recipes& r, SwizzleType sw, bool is_a, int64_t rows,
                                           int64_t K);

// Checks a whole scaled product (shapes, recipe pair, the element types' rules, both sides'
// scales); returns the unpacked K.
REEL_INLINE int64_t check_scaled_mm(const char* fn, ScalarType ta, ScalarType tb, const Shape& a, const Shape& b,
                                    const Scales& sa, const Recipes& ra, const Scales& sb, const Recipes& rb,
                                    SwizzleType swa, SwizzleType swb, bool fast_accum);

// The exact product into acc (M x N): per K block a double GEMM, times the block scales.
// a: [M, K] row-major; b: [K, N] row-major, or [N, K] when b_nk; sa: [M, nkb], sb: [N, nkb].
REEL_INLINE void scaled_mm_exact(int64_t M, int64_t N, int64_t K, int64_t kblock, const double* a, const double* b,
                                 bool b_nk, const double* sa, const double* sb, double* acc);
// The fast product (operands decoded with their scales folded in): one float GEMM.
REEL_INLINE void scaled_mm_fast(int64_t M, int64_t N, int64_t K, const float* a, const float* b, bool b_nk,
                                float* c);

template <class T, class D>
std::vector<double> as_doubles(const Tensor<T, D>& t) {
  auto c = t.contiguous();
  std::vector<double> v(static_cast<size_t>(c.numel()));
  const T* p = c.data_ptr();
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(convert<float>(p[i]));
  return v;
}
// The values of a float32 or FP8 scale (others: empty; the checks admit no others).
REEL_INLINE std::vector<double> as_doubles(const AnyTensor& t);

template <class T>
inline constexpr bool is_scaled_mm_data_v =
    std::is_same_v<T, float8_e4m3fn> || std::is_same_v<T, float8_e5m2> || std::is_same_v<T, float4_e2m1fn_x2>;

// The decoded values of a 2-D FP8 / FP4 matrix t as a row-major matrix of V (FP4: the dim
// `packed` holds two values per element, the first in the low nibble). With a scale matrix s
// (nullptr: none) each value is multiplied by its scale in double and then rounded to V once:
// s[r * nkb + c / kblock], or, when s_by_col, s[c * nkb + r / kblock].
template <class V, class T, class D>
void decode_matrix_into(V* out, const Tensor<T, D>& t, int packed, const double* s = nullptr, int64_t nkb = 1,
                        int64_t kblock = 1, bool s_by_col = false) {
  constexpr bool fp4 = is_fp4_v<T>;
  const int64_t R = t.size(0) * (fp4 && packed == 0 ? 2 : 1), C = t.size(1) * (fp4 && packed == 1 ? 2 : 1);
  if constexpr (Backend<D>::has_data) {
    float lut[256];
    for (int i = 0; i < 256; ++i) {
      const auto e = T::from_bits(static_cast<std::uint8_t>(i));
      if constexpr (fp4)
        lut[i] = i < 16 ? e.first() : 0.0f;  // (nibbles)
      else
        lut[i] = convert<float>(e);
    }
    const auto* p = reinterpret_cast<const std::uint8_t*>(t.data_ptr());
    const int64_t s0 = t.stride(0), s1 = t.stride(1);
    auto value = [&](int64_t r, int64_t c) {
      if constexpr (fp4) {
        const int64_t pr = packed == 0 ? r / 2 : r, pc = packed == 1 ? c / 2 : c;
        return lut[(p[pr * s0 + pc * s1] >> (4 * ((packed == 0 ? r : c) & 1))) & 0xF];
      } else {
        return lut[p[r * s0 + c * s1]];
      }
    };
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        V* o = out + r * C;
        if (!s) {
          for (int64_t c = 0; c < C; ++c) o[c] = convert<V>(value(r, c));
        } else if (s_by_col) {
          const double* sc = s + r / kblock;
          for (int64_t c = 0; c < C; ++c) o[c] = convert<V>(static_cast<double>(value(r, c)) * sc[c * nkb]);
        } else {
          for (int64_t kb = 0, c = 0; kb < nkb; ++kb) {
            const double f = s[r * nkb + kb];
            for (const int64_t e = std::min(C, c + kblock); c < e; ++c)
              o[c] = convert<V>(static_cast<double>(value(r, c)) * f);
          }
        }
      }
    };
    parallel_range(R, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)));
  }
}
template <class V, class T, class D>
std::vector<V> decode_matrix(const Tensor<T, D>& t, int packed, const double* s = nullptr, int64_t nkb = 1,
                             int64_t kblock = 1, bool s_by_col = false) {
  const int64_t n = t.numel() * (is_fp4_v<T> ? 2 : 1);
  std::vector<V> out(static_cast<size_t>(n));
  decode_matrix_into(out.data(), t, packed, s, nkb, kblock, s_by_col);
  return out;
}
// A per-thread buffer of at least n elements of V, kept between calls (the fast path's decoded
// operands: allocating megabytes per call costs page faults on every call).
template <class V, int Slot>
V* scratch_buffer(int64_t n) {
  thread_local std::vector<V> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

template <class A, class B>
void check_scaled_mm_types() {
  static_assert(is_scaled_mm_data_v<A> && is_scaled_mm_data_v<B>,
                "reel::scaled_mm: mat_a and mat_b must be float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2 tensors");
  static_assert(is_fp4_v<A> == is_fp4_v<B>,
                "reel::scaled_mm: mat_a and mat_b must both be float8 or both float4_e2m1fn_x2 (as in PyTorch)");
  static_assert(!(std::is_same_v<A, float8_e5m2> && std::is_same_v<B, float8_e5m2>),
                "reel::scaled_mm: float8_e5m2 x float8_e5m2 is not supported (as in PyTorch): one operand must be "
                "float8_e4m3fn");
}

// The checks of a scaled product; returns the unpacked K.
template <class A, class B, class D>
int64_t check_scaled_mm_call(const char* fn, const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b, const Scales& sa,
                             const Recipes& ra, const Scales& sb, const Recipes& rb, SwizzleType swa, SwizzleType swb,
                             bool fast_accum) {
  check_scaled_mm_types<A, B>();
  return check_scaled_mm(fn, scalar_type_v<A>, scalar_type_v<B>, mat_a.sizes(), mat_b.sizes(), sa, ra, sb, rb, swa,
                         swb, fast_accum);
}
// The product before alpha / beta / bias: the exact path's doubles (d), or the fast path's
// floats (f, or written straight into `direct` when given: an [M, N] float output).
struct ScaledAcc {
  std::vector<double> d;
  std::vector<float> f;
  bool direct = false;
  double operator[](int64_t i) const { return f.empty() ? d[static_cast<size_t>(i)] : f[static_cast<size_t>(i)]; }
};
// mat_a @ mat_b with unpacked K, checked by check_scaled_mm_call.
template <class A, class B, class D>
ScaledAcc scaled_mm_acc(int64_t K, const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b, const Scales& sa,
                        const Recipes& ra, const Scales& sb, const Recipes& rb, SwizzleType swa, SwizzleType swb,
                        bool fast, float* direct = nullptr) {
  const int64_t M = mat_a.size(0), N = mat_b.size(1);
  ScaledAcc acc;
  if constexpr (Backend<D>::host_memory) {
    if (M == 0 || N == 0 || K == 0) {
      acc.d.assign(static_cast<size_t>(M * N), 0.0);
      return acc;
    }
    const int64_t kblock = scale_kblock(ra.list[0], K), nkb = (K + kblock - 1) / kblock;
    const auto ssa = scale_rows(sa, ra, swa, true, M, K), ssb = scale_rows(sb, rb, swb, false, N, K);
    // mat_b is read along its unit stride: as [K, N], or as [N, K] (PyTorch's usual b.t())
    const bool b_nk = mat_b.stride(0) == 1 && mat_b.stride(1) != 1;
    auto bv = b_nk ? mat_b.mT() : mat_b;
    const int bpacked = b_nk ? 1 : 0;
    if (fast) {
      float* a = scratch_buffer<float, 0>(M * K);
      float* b = scratch_buffer<float, 1>(N * K);
      decode_matrix_into(a, mat_a, 1, ssa.data(), nkb, kblock);
      decode_matrix_into(b, bv, bpacked, ssb.data(), nkb, kblock, !b_nk);
      if (!direct) acc.f.resize(static_cast<size_t>(M * N));
      acc.direct = direct != nullptr;
      scaled_mm_fast(M, N, K, a, b, b_nk, direct ? direct : acc.f.data());
    } else {
      auto a = decode_matrix<double>(mat_a, 1), b = decode_matrix<double>(bv, bpacked);
      acc.d.assign(static_cast<size_t>(M * N), 0.0);
      scaled_mm_exact(M, N, K, kblock, a.data(), b.data(), b_nk, ssa.data(), ssb.data(), acc.d.data());
    }
  }
  return acc;
}
template <class T, class A, class B, class D>
void scaled_addmm_into(const char* fn, const Tensor<T, D>& out, const Tensor<T, D>& input, const Tensor<A, D>& mat1,
                       const Tensor<B, D>& mat2, const Scales& scale_a, const Recipes& ra, const Scales& scale_b,
                       const Recipes& rb, const nn::functional::ScaledAddmmOptions& o) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, half> || std::is_same_v<T, float>,
                "reel::scaled_addmm: input must be a bfloat16, half or float tensor (the result has its type)");
  const int64_t M = mat1.dim() == 2 ? mat1.size(0) : -1, N = mat2.dim() == 2 ? mat2.size(1) : -1;
  REEL_CHECK(input.dim() == 2 && input.size(0) == M && input.size(1) == N, value_error, fn,
             ": input must have shape [M, N] = [", M, ", ", N, "] (mat1 is ", mat1.sizes(), ", mat2 ", mat2.sizes(),
             "), got ", input.sizes());
  REEL_CHECK(input.is_contiguous(), value_error, fn, ": input must be contiguous (as in PyTorch)");
  const int64_t K = check_scaled_mm_call(fn, mat1, mat2, scale_a, ra, scale_b, rb, o.swizzle_a, o.swizzle_b,
                                         o.use_fast_accum);
  if constexpr (device_memory_v<D>) {  // one GEMM with C = input
    Backend<D>::template scaled_mm<T>(mat1, mat2, K, scale_a, ra, scale_b, rb, o.swizzle_a, o.swizzle_b, AnyTensor(),
                                      o.use_fast_accum, o.alpha, o.beta, &input, out);
    return;
  }
  auto acc = scaled_mm_acc(K, mat1, mat2, scale_a, ra, scale_b, rb, o.swizzle_a, o.swizzle_b, o.use_fast_accum);
  if constexpr (Backend<D>::host_memory) {
    const T* in = input.data_ptr();
    T* p = out.mutable_data_ptr();
    for (int64_t i = 0; i < M * N; ++i) {
      const double c = o.beta == 0 ? 0.0 : o.beta * static_cast<double>(convert<float>(in[i]));
      p[i] = convert<T>(o.alpha * acc[i] + c);
    }
  }
}
}  // namespace detail

namespace nn::functional {

// out[M, N] of type Out (bfloat16, half or float) = (A scaled) @ (B scaled) + bias. mat_a is
// [M, K], mat_b [K, N] (FP4: [M, K / 2] and [K / 2, N], packed along K).
template <class Out = bfloat16, class A, class B, class D>
Tensor<Out, D> scaled_mm(const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b, const Scales& scale_a,
                         const Recipes& recipe_a, const Scales& scale_b, const Recipes& recipe_b,
                         const ScaledMmOptions& o = {}) {
  static_assert(std::is_same_v<Out, bfloat16> || std::is_same_v<Out, half> || std::is_same_v<Out, float>,
                "reel::scaled_mm: the output type must be bfloat16, half or float");
  const int64_t K = detail::check_scaled_mm_call("scaled_mm", mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b,
                                                 o.swizzle_a, o.swizzle_b, o.use_fast_accum);
  const int64_t M = mat_a.size(0), N = mat_b.size(1);
  std::vector<double> bias;  // (checked before the product is computed)
  if (o.bias.defined()) {
    REEL_CHECK((!std::is_same_v<Out, float>), value_error,
               "scaled_mm: a bias is only supported for bfloat16 and half outputs (as in PyTorch)");
    REEL_CHECK(o.bias.dtype() == scalar_type_v<Out>, type_error, "scaled_mm: the bias must have the output's dtype ",
               scalar_type_of<Out>::name, ", got ", dtype_name(o.bias.dtype()));
    REEL_CHECK(o.bias.sizes() == Shape{N}, value_error, "scaled_mm: the bias must have shape [", N, "] (N), got ",
               o.bias.sizes());
    if constexpr (detail::Backend<D>::host_memory) bias = detail::as_doubles(o.bias.template as<Out, D>());
  }
  if constexpr (detail::device_memory_v<D>) {
    auto out = empty<Out, D>({M, N});
    detail::Backend<D>::template scaled_mm<Out>(mat_a, mat_b, K, scale_a, recipe_a, scale_b, recipe_b, o.swizzle_a,
                                                o.swizzle_b, o.bias, o.use_fast_accum, 1.0, 0.0, nullptr, out);
    return out;
  }
  auto out = empty<Out, D>({M, N});
  float* direct = nullptr;  // (a float output without bias: the fast path's GEMM writes it)
  if constexpr (std::is_same_v<Out, float> && detail::Backend<D>::host_memory) direct = out.mutable_data_ptr();
  auto acc = detail::scaled_mm_acc(K, mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b, o.swizzle_a, o.swizzle_b,
                                   o.use_fast_accum, direct);
  if constexpr (detail::Backend<D>::host_memory) {
    if (acc.direct) return out;
    Out* p = out.mutable_data_ptr();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        p[i * N + j] = convert<Out>(acc[i * N + j] + (bias.empty() ? 0.0 : bias[j]));
  }
  return out;
}

// beta * input + alpha * scaled_mm(mat1, mat2), rounded once to input's type; input [M, N].
// beta == 0 ignores input's values (a NaN there does not leak).
template <class T, class A, class B, class D>
Tensor<T, D> scaled_addmm(const Tensor<T, D>& input, const Tensor<A, D>& mat1, const Tensor<B, D>& mat2,
                          const Scales& scale_a, const Recipes& recipe_a, const Scales& scale_b,
                          const Recipes& recipe_b, const ScaledAddmmOptions& o = {}) {
  auto out = empty<T, D>(input.sizes());
  detail::scaled_addmm_into("scaled_addmm", out, input, mat1, mat2, scale_a, recipe_a, scale_b, recipe_b, o);
  return out;
}

// In place: input = beta * input + alpha * scaled_mm(mat1, mat2); returns input (its storage
// kept). Nothing is written when a check fails.
template <class T, class A, class B, class D>
const Tensor<T, D>& scaled_addmm_(const Tensor<T, D>& input, const Tensor<A, D>& mat1, const Tensor<B, D>& mat2,
                                  const Scales& scale_a, const Recipes& recipe_a, const Scales& scale_b,
                                  const Recipes& recipe_b, const ScaledAddmmOptions& o = {}) {
  detail::scaled_addmm_into("scaled_addmm_", input, input, mat1, mat2, scale_a, recipe_a, scale_b, recipe_b, o);
  return input;
}

}  // namespace nn::functional

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "scaled_mm-inl.hpp"
#endif
