#pragma once
// FP8 training of linear layers, torchao's float8 recipe: fp32 master weights; the forward
// y = x W^T through scaled_mm with x and W cast to float8_e4m3fn under dynamic scales
// (TensorWise or RowWise, from each call's amax: quantize), use_fast_accum on; the backward
// dX = dY W and dW = dY^T X through scaled_mm with dY cast to float8_e5m2 (more range, less
// precision, for gradients), use_fast_accum off. In a backward() that accumulates into
// weight.grad (micro-batches: a second backward() before zero_grad), dW is added there by
// one scaled_addmm_ (beta = 1: the GEMM's epilogue does the accumulation, one rounding) instead
// of being computed and then added. The FP8 products are not differentiated again (the
// gradients are constants to a second differentiation, as in PyTorch). Dims of the three
// contractions (in_features, out_features, the rows of x) that are not multiples of 16 are
// padded with zeros for the GEMM (on CUDA also the output columns, cuBLASLt's alignment).
#include "../core/config.hpp"
#include <any>

#include "../autograd/function.hpp"
#include "modules.hpp"
#include "quantize.hpp"

namespace reel::inline REEL_ABI {
namespace nn {
namespace functional {

struct Float8LinearOptions {
  ScalingType recipe = ScalingType::TensorWise;  // TensorWise or RowWise (dynamic scaling)
};

}  // namespace functional

namespace detail_fp8 {
using functional::Float8LinearOptions;
using functional::ScalingType;

// t (2-D) with dim d padded with zeros to a multiple of 16 (scaled_mm's K rule).
template <class D>
Tensor<float, D> pad16(const Tensor<float, D>& t, int64_t d) {
  const int64_t n = t.size(d), p = (n + 15) / 16 * 16;
  if (p == n) return t;
  Shape s = t.sizes();
  s[d] = p;
  auto z = zeros<float, D>(s);
  z.narrow(d, 0, n).copy_(t);
  return z;
}
// a [M, K] and b [K, N] quantized for scaled_mm (a to A per row, b to B per column).
template <class A, class B, class D>
auto fp8_operands(const Tensor<float, D>& a, const Tensor<float, D>& b, ScalingType r) {
  auto qa = functional::quantize<A>(pad16(a, 1), r);
  auto qb = functional::quantize<B>(pad16(b, 0), r, {.dim = 0});
  return std::pair{qa, qb};
}
template <class A, class B, class D>
Tensor<float, D> fp8_mm(const Tensor<float, D>& a, const Tensor<float, D>& b, ScalingType r, bool fast) {
  if constexpr (reel::detail::device_memory_v<D>) {  // (cuBLASLt also wants N a multiple of 16)
    const int64_t N = b.size(1);
    if (N % 16 != 0) return Tensor<float, D>(fp8_mm<A, B>(a, pad16(b, 1), r, fast).narrow(1, 0, N).contiguous());
  }
  auto [qa, qb] = fp8_operands<A, B>(a, b, r);
  return functional::scaled_mm<float>(qa.data, qb.data, qa.scale, qa.recipe, qb.scale, qb.recipe,
                                      {.use_fast_accum = fast});
}

struct Float8MatmulFn : autograd::Function<Float8MatmulFn> {
  static constexpr const char* name = "Float8LinearBackward";
  // x [N, in] @ w[out, in]^T
  template <class T, class D>
  static Tensor<T, D> forward(autograd::FunctionCtx<T, D>& ctx, const Tensor<T, D>& x, const Tensor<T, D>& w,
                              const Float8LinearOptions& o) {
    ctx.save_for_backward({x, w});
    ctx.saved_data["options"] = o;
    return fp8_mm<float8_e4m3fn, float8_e4m3fn>(x, w.mT(), o.recipe, true);
  }
  template <class T, class D>
  static std::vector<Tensor<T, D>> backward(autograd::FunctionCtx<T, D>& ctx, const Tensor<T, D>& g0) {
    const auto o = std::any_cast<Float8LinearOptions>(ctx.saved_data["options"]);
    auto s = ctx.saved_tensors();
    const Tensor<T, D> x = s[0].detach(), w = s[1].detach(), g = g0.detach();
    Tensor<T, D> gx, gw;
    if (ctx.needs_input_grad(0)) gx = fp8_mm<float8_e5m2, float8_e4m3fn>(g, w, o.recipe, false);
    if (ctx.needs_input_grad(1)) {
      Tensor<T, D> gt = g.mT().contiguous();
      // (in place on CUDA only where cuBLASLt can write weight.grad itself: in_features % 16 == 0)
      auto acc = reel::detail::accumulable_grad(s[1].impl());
      if (acc && Tensor<T, D>(acc).is_contiguous() && (!reel::detail::device_memory_v<D> || x.size(1) % 16 == 0)) {
        // the serialized WGRAD loop: weight.grad += dY^T X in the GEMM
        auto [qa, qb] = fp8_operands<float8_e5m2, float8_e4m3fn>(gt, x, o.recipe);
        functional::scaled_addmm_(Tensor<T, D>(acc), qa.data, qb.data, qa.scale, qa.recipe, qb.scale, qb.recipe);
      } else {
        gw = fp8_mm<float8_e5m2, float8_e4m3fn>(gt, x, o.recipe, false);
      }
    }
    return {gx, gw};
  }
};
}  // namespace detail_fp8

namespace functional {
// y = x W^T + b through FP8 (see above); x [..., in], weight [out, in], bias [out] or undefined.
template <class D>
Tensor<float, D> float8_linear(const Tensor<float, D>& x, const Tensor<float, D>& weight,
                               const Tensor<float, D>& bias = {}, const Float8LinearOptions& o = {}) {
  REEL_CHECK(o.recipe == ScalingType::TensorWise || o.recipe == ScalingType::RowWise, value_error,
             "float8_linear: the recipe must be TensorWise or RowWise (dynamic scaling), got ",
             reel::detail::scaling_name(o.recipe));
  REEL_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), value_error,
             "float8_linear: x [..., in] and weight [out, in] do not match: ", x.sizes(), " and ", weight.sizes());
  REEL_CHECK(!bias.defined() || bias.sizes() == Shape{weight.size(0)}, value_error,
             "float8_linear: bias must have shape [", weight.size(0), "], got ", bias.sizes());
  Shape out = x.sizes();
  out.back() = weight.size(0);
  Tensor<float, D> y = detail_fp8::Float8MatmulFn::apply(x.reshape({-1, x.size(-1)}), weight, o);
  if (bias.defined()) y = y + bias;
  return y.reshape(out);
}
}  // namespace functional

// A linear layer trained in FP8 (functional::float8_linear); its parameters are fp32, as
// Linear's, so optimizers, EMA, clipping and checkpoints see an ordinary layer.
template <class D = CPU>
class Float8Linear : public Module<float, D> {
 public:
  Tensor<float, D> weight, bias;
  functional::Float8LinearOptions options;
  Float8Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias = true,
               functional::Float8LinearOptions o = {})
      : options(o) {
    REEL_CHECK(in_features >= 0 && out_features >= 0, value_error, "Float8Linear: feature counts must be >= 0");
    const double k = in_features > 0 ? 1 / std::sqrt(static_cast<double>(in_features)) : 0;
    weight = this->register_parameter("weight", Tensor<float, D>(rand<float, D>({out_features, in_features}, gen) * (2 * k) - k));
    if (with_bias) bias = this->register_parameter("bias", Tensor<float, D>(rand<float, D>({out_features}, gen) * (2 * k) - k));
  }
  Tensor<float, D> operator()(const Tensor<float, D>& x) const { return functional::float8_linear(x, weight, bias, options); }
};

}  // namespace nn
}  // namespace reel
