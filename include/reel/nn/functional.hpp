#pragma once
// nn::functional: activations and small building blocks written with reel ops.
#include "../core/config.hpp"
#include "../ops/products.hpp"

namespace reel::inline REEL_ABI {

// Activations with parameters, each one elementwise op with PyTorch's forward and backward
// formulas (softplus_backward, elu_backward, leaky_relu_backward), so also at NaN and +-inf.
struct SoftplusOp : FloatRule {
  static constexpr bool requires_order = true;
  double beta = 1, threshold = 20;
  template <class C> REEL_HD C apply(C x) const {
    const C bx = x * C(beta);
    return bx > C(threshold) ? x : std::log1p(std::exp(bx)) / C(beta);
  }
  template <class O, class X> auto d0(const O&, const X& x) const {
    auto z = exp(x * beta);
    return where(gt(x * beta, threshold), 1, z / (z + 1));
  }
};
struct EluOp : FloatRule {
  static constexpr bool requires_order = true;
  double alpha = 1, scale = 1, input_scale = 1;
  template <class C> REEL_HD C apply(C x) const {
    return x <= C(0) ? std::expm1(x * C(input_scale)) * C(alpha * scale) : x * C(scale);
  }
  template <class O, class X> auto d0(const O&, const X& x) const {
    return where(le(x, 0), (input_scale * alpha * scale) * exp(x * input_scale), scale);
  }
};
struct LeakyReluOp : SameTypeRule {
  static constexpr bool requires_order = true;
  double slope = 0.01;
  template <class C> REEL_HD C apply(C x) const { return x > C(0) ? x : x * C(slope); }
  template <class O, class X> auto d0(const O&, const X& x) const {
    auto pos = gt(x, 0);  // (1 as x's type, so that the slope is a number of x's type too)
    return where(pos, cast<detail::value_t<X>>(pos), slope);
  }
};

namespace nn::functional {

template <TensorLike X> auto softplus(const X& x, double beta = 1, double threshold = 20) {
  static_assert(is_floating_v<detail::value_t<X>>, "reel::softplus: needs a floating point tensor");
  return make_expr(SoftplusOp{{}, beta, threshold}, x);
}
template <TensorLike X> auto elu(const X& x, double alpha = 1) {
  static_assert(is_floating_v<detail::value_t<X>>, "reel::elu: needs a floating point tensor");
  return make_expr(EluOp{{}, alpha, 1, 1}, x);
}
// selu: elu with PyTorch's fixed alpha and scale
template <TensorLike X> auto selu(const X& x) {
  static_assert(is_floating_v<detail::value_t<X>>, "reel::selu: needs a floating point tensor");
  return make_expr(EluOp{{}, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1}, x);
}
template <TensorLike X> auto leaky_relu(const X& x, double negative_slope = 0.01) {
  static_assert(is_floating_v<detail::value_t<X>>, "reel::leaky_relu: needs a floating point tensor");
  return make_expr(LeakyReluOp{{}, negative_slope}, x);
}

template <TensorLike X> auto relu(const X& x) { return reel::relu(x); }

// Saturating bounds like clamp: uint8 [0, 5, 200] -> [0, 1, 1].
template <TensorLike X> auto hardtanh(const X& x, Bound min = -1.0, Bound max = 1.0) {
  using T = detail::value_t<X>;
  if constexpr (std::is_integral_v<T>) {
    // -1.0 / 1.0 defaults are integers for integer tensors
    auto as_int = [](const Bound& b) { return b.kind == Bound::Floating && b.d == std::floor(b.d) && std::abs(b.d) < 9e18 ? Bound(static_cast<int64_t>(b.d)) : b; };
    return make_expr(ClampOp<T>(as_int(min), as_int(max), "hardtanh", true), x);
  } else {
    return make_expr(ClampOp<T>(min, max, "hardtanh", true), x);
  }
}

// gelu(x) = x * Phi(x) (approximate = "none"), or the tanh approximation.
template <TensorLike X> auto gelu(const X& x, bool tanh_approximation = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::gelu: needs a floating point tensor");
  using R = Tensor<T, detail::device_t<X>>;
  return tanh_approximation ? R(make_expr(GeluTanhOp{}, x)) : R(make_expr(GeluOp{}, x));
}

template <TensorLike X>
Tensor<detail::value_t<X>, detail::device_t<X>> softmax(const X& x, int64_t dim) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::softmax: needs a floating point tensor");
  auto xt = detail::materialize(x);
  // The row's maximum is a shift (no gradient). As in PyTorch, a row holding +inf (inf - inf)
  // or only -inf is NaN throughout.
  Tensor<T, detail::device_t<X>> e = exp(xt - amax(xt.detach(), {dim}, true));
  return Tensor<T, detail::device_t<X>>(e / sum(e, {dim}, true));
}

template <TensorLike X>
Tensor<detail::value_t<X>, detail::device_t<X>> log_softmax(const X& x, int64_t dim) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::log_softmax: needs a floating point tensor");
  auto xt = detail::materialize(x);
  Tensor<T, detail::device_t<X>> s = xt - amax(xt.detach(), {dim}, true);  // as softmax
  return Tensor<T, detail::device_t<X>>(s - log(sum(exp(s), {dim}, true)));
}

// Zeroes each element with probability p and scales the rest by 1 / (1 - p). The mask is
// real, so for complex x the real and imaginary parts are dropped together. The gradient is
// mask / (1 - p) (the op is x * mask, differentiable to any order).
template <class T, class D>
Tensor<T, D> dropout(const Tensor<T, D>& x, double p, bool training, Generator& gen) {
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::dropout: needs a floating point or complex tensor");
  REEL_CHECK(p >= 0 && p <= 1, value_error, "dropout probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return x;
  using R = real_t<T>;
  Tensor<R, D> mask;
  if (p == 1) {
    mask = zeros<R, D>(x.sizes());
  } else {
    auto keep = rand<double, D>(x.sizes(), gen);
    mask = cast<R>(lt(keep, 1 - p)) * R(1 / (1 - p));
  }
  return x * mask;
}

template <class T, class D> Tensor<T, D> linear(const Tensor<T, D>& x, const Tensor<T, D>& w, const Tensor<T, D>& b = {});
// Expressions (evaluated first) and operands of different types.
template <TensorLike X, TensorLike W, TensorLike... B>
  requires(!same_tensors_v<X, W, B...> && sizeof...(B) <= 1)
auto linear(const X& x, const W& w, const B&... b) {
  static_assert((std::is_same_v<detail::value_t<X>, detail::value_t<W>> && ... && std::is_same_v<detail::value_t<X>, detail::value_t<B>>),
                "reel::nn::functional::linear: input, weight and bias have different element types: convert with "
                ".to<T>() (a tensor) or cast<T>(e) (an expression)");
  static_assert((std::is_same_v<detail::device_t<X>, detail::device_t<W>> && ... && std::is_same_v<detail::device_t<X>, detail::device_t<B>>),
                "reel::nn::functional::linear: the operands are on different devices");
  return linear(detail::materialize(x), detail::materialize(w), Tensor<detail::value_t<X>, detail::device_t<X>>(detail::materialize(b))...);
}

// y = x W^T + b
template <class T, class D>
Tensor<T, D> linear(const Tensor<T, D>& x, const Tensor<T, D>& w, const Tensor<T, D>& b) {
  auto y = matmul(x, w.mT());
  if (b.defined()) return y + b;
  return y;
}

}  // namespace nn::functional
}  // namespace reel
