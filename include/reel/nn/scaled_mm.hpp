#pragma once
// FP8 scaled matrix products, PyTorch 2.15's torch.nn.functional.scaled_mm / scaled_addmm /
// scaled_addmm_: out = alpha * (decode(A) scaled by scale_a) @ (decode(B) scaled by scale_b)
// (+ beta * input) (+ bias), scales being decoding factors (they multiply).
//
// On the CPU this is the exact reference: every product of two FP8 values is exact in double,
// each scaling block of K (all of K for TensorWise and RowWise, 128 for the block recipes) is
// accumulated in double, multiplied by its block scales and added up in double; alpha, beta and
// the bias are applied in double and the result is rounded once to the output type.
#include "../core/config.hpp"
#include <string>

#include "../interop/any_tensor.hpp"

namespace reel::inline REEL_ABI {
namespace nn::functional {

enum class ScalingType { TensorWise, RowWise, BlockWise1x16, BlockWise1x32, BlockWise1x128, BlockWise128x128 };
enum class SwizzleType { NoSwizzle, Swizzle_32_4_4, Swizzle_32_8 };

struct ScaledMmOptions {
  AnyTensor bias{};  // [N], of the output's type (bfloat16 or half outputs only)
  SwizzleType swizzle_a = SwizzleType::NoSwizzle, swizzle_b = SwizzleType::NoSwizzle;
  bool use_fast_accum = false;  // (the CPU accumulates exactly either way)
};
struct ScaledAddmmOptions {
  double beta = 1, alpha = 1;
  SwizzleType swizzle_a = SwizzleType::NoSwizzle, swizzle_b = SwizzleType::NoSwizzle;
  bool use_fast_accum = false;
};

}  // namespace nn::functional

namespace detail {
using nn::functional::ScalingType;
using nn::functional::SwizzleType;

REEL_INLINE const char* scaling_name(ScalingType s);
// Checks everything about a scaled product that does not depend on the element types known at
// compile time (shapes, scale dtypes and shapes, the recipe pair, swizzles); raises value_error
// / type_error / not_implemented_error naming the rule. Returns the K block of the scales.
REEL_INLINE int64_t check_scaled_mm(const char* fn, const Shape& a, const Shape& b, const AnyTensor& scale_a,
                                    ScalingType ra, const AnyTensor& scale_b, ScalingType rb, SwizzleType sa,
                                    SwizzleType sb);

// The reference product into acc (M x N, double): per K block, sum in double, times the block
// scales. a: M x K, bt: mat_b transposed (N x K), row-major doubles; scales as doubles,
// row-major in their shapes.
REEL_INLINE void scaled_mm_reference(int64_t M, int64_t N, int64_t K, int64_t kblock, const double* a, const double* bt,
                                     const double* sa, ScalingType ra, const double* sb, ScalingType rb, double* acc);

template <class T>
std::vector<double> as_doubles(const Tensor<T, CPU>& t) {
  auto c = t.contiguous();
  std::vector<double> v(static_cast<size_t>(c.numel()));
  const T* p = c.data_ptr();
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(convert<float>(p[i]));
  return v;
}
inline std::vector<double> as_doubles(const AnyTensor& t) {
  return t.visit([](const auto& x) -> std::vector<double> {
    using T = typename std::decay_t<decltype(x)>::value_type;
    if constexpr (std::is_same_v<T, float> || is_fp8_v<T>)
      return as_doubles(x);
    else
      return {};  // (check_scaled_mm admits only float and float8 scales)
  });
}

template <class A, class B>
void check_scaled_mm_types() {
  static_assert((std::is_same_v<A, float8_e4m3fn> || std::is_same_v<A, float8_e5m2>) &&
                    (std::is_same_v<B, float8_e4m3fn> || std::is_same_v<B, float8_e5m2>),
                "reel::scaled_mm: mat_a and mat_b must be float8_e4m3fn or float8_e5m2 tensors");
  static_assert(!(std::is_same_v<A, float8_e5m2> && std::is_same_v<B, float8_e5m2>),
                "reel::scaled_mm: float8_e5m2 x float8_e5m2 is not supported (as in PyTorch): one operand must be "
                "float8_e4m3fn");
}

// The checks of a scaled product; returns the K block of the scales.
template <class A, class B, class D>
int64_t check_scaled_mm_call(const char* fn, const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b,
                             const AnyTensor& scale_a, ScalingType ra, const AnyTensor& scale_b, ScalingType rb,
                             SwizzleType swa, SwizzleType swb) {
  check_scaled_mm_types<A, B>();
  require_host_memory<D>(fn);
  return check_scaled_mm(fn, mat_a.sizes(), mat_b.sizes(), scale_a, ra, scale_b, rb, swa, swb);
}
// acc (M x N doubles) for mat_a @ mat_b, checked by check_scaled_mm_call (kblock: its result).
template <class A, class B, class D>
std::vector<double> scaled_mm_acc(int64_t kblock, const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b,
                                  const AnyTensor& scale_a, ScalingType ra, const AnyTensor& scale_b, ScalingType rb) {
  const int64_t M = mat_a.size(0), K = mat_a.size(1), N = mat_b.size(1);
  std::vector<double> acc(static_cast<size_t>(M * N), 0.0);
  if constexpr (Backend<D>::has_data) {
    // (b read as [N, K]: both operands of each dot product contiguous)
    auto a = as_doubles(mat_a), bt = as_doubles(mat_b.mT()), sa = as_doubles(scale_a), sb = as_doubles(scale_b);
    scaled_mm_reference(M, N, K, kblock, a.data(), bt.data(), sa.data(), ra, sb.data(), rb, acc.data());
  }
  return acc;
}
template <class T, class A, class B, class D>
void scaled_addmm_into(const char* fn, const Tensor<T, D>& out, const Tensor<T, D>& input, const Tensor<A, D>& mat1,
                       const Tensor<B, D>& mat2, const AnyTensor& scale_a, ScalingType ra, const AnyTensor& scale_b,
                       ScalingType rb, const nn::functional::ScaledAddmmOptions& o) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, half> || std::is_same_v<T, float>,
                "reel::scaled_addmm: input must be a bfloat16, half or float tensor (the result has its type)");
  const int64_t M = mat1.dim() == 2 ? mat1.size(0) : -1, N = mat2.dim() == 2 ? mat2.size(1) : -1;
  REEL_CHECK(input.dim() == 2 && input.size(0) == M && input.size(1) == N, value_error, fn,
             ": input must have shape [M, N] = [", M, ", ", N, "] (mat1 is ", mat1.sizes(), ", mat2 ", mat2.sizes(),
             "), got ", input.sizes());
  REEL_CHECK(input.is_contiguous(), value_error, fn, ": input must be contiguous (as in PyTorch)");
  const int64_t kblock = check_scaled_mm_call(fn, mat1, mat2, scale_a, ra, scale_b, rb, o.swizzle_a, o.swizzle_b);
  auto acc = scaled_mm_acc(kblock, mat1, mat2, scale_a, ra, scale_b, rb);
  if constexpr (Backend<D>::has_data) {
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

// out[M, N] of type Out (bfloat16, half or float) = (A scaled) @ (B scaled) + bias.
template <class Out = bfloat16, class A, class B, class D>
Tensor<Out, D> scaled_mm(const Tensor<A, D>& mat_a, const Tensor<B, D>& mat_b, const AnyTensor& scale_a,
                         ScalingType recipe_a, const AnyTensor& scale_b, ScalingType recipe_b,
                         const ScaledMmOptions& o = {}) {
  static_assert(std::is_same_v<Out, bfloat16> || std::is_same_v<Out, half> || std::is_same_v<Out, float>,
                "reel::scaled_mm: the output type must be bfloat16, half or float");
  const int64_t kblock = detail::check_scaled_mm_call("scaled_mm", mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b,
                                                      o.swizzle_a, o.swizzle_b);
  const int64_t M = mat_a.size(0), N = mat_b.size(1);
  std::vector<double> bias;  // (checked before the product is computed)
  if (o.bias.defined()) {
    REEL_CHECK((!std::is_same_v<Out, float>), value_error,
               "scaled_mm: a bias is only supported for bfloat16 and half outputs (as in PyTorch)");
    REEL_CHECK(o.bias.dtype() == scalar_type_v<Out>, type_error, "scaled_mm: the bias must have the output's dtype ",
               scalar_type_of<Out>::name, ", got ", dtype_name(o.bias.dtype()));
    REEL_CHECK(o.bias.sizes() == Shape{N}, value_error, "scaled_mm: the bias must have shape [", N, "] (N), got ",
               o.bias.sizes());
    bias = detail::as_doubles(o.bias.template as<Out, D>());
  }
  auto acc = detail::scaled_mm_acc(kblock, mat_a, mat_b, scale_a, recipe_a, scale_b, recipe_b);
  auto out = empty<Out, D>({M, N});
  if constexpr (detail::Backend<D>::has_data) {
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
                          const AnyTensor& scale_a, ScalingType recipe_a, const AnyTensor& scale_b,
                          ScalingType recipe_b, const ScaledAddmmOptions& o = {}) {
  auto out = empty<T, D>(input.sizes());
  detail::scaled_addmm_into("scaled_addmm", out, input, mat1, mat2, scale_a, recipe_a, scale_b, recipe_b, o);
  return out;
}

// In place: input = beta * input + alpha * scaled_mm(mat1, mat2); returns input (its storage
// kept). Nothing is written when a check fails.
template <class T, class A, class B, class D>
const Tensor<T, D>& scaled_addmm_(const Tensor<T, D>& input, const Tensor<A, D>& mat1, const Tensor<B, D>& mat2,
                                  const AnyTensor& scale_a, ScalingType recipe_a, const AnyTensor& scale_b,
                                  ScalingType recipe_b, const ScaledAddmmOptions& o = {}) {
  detail::scaled_addmm_into("scaled_addmm_", input, input, mat1, mat2, scale_a, recipe_a, scale_b, recipe_b, o);
  return input;
}

}  // namespace nn::functional


}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "scaled_mm-inl.hpp"
#endif
