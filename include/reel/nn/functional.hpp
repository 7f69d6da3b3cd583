#pragma once
// nn::functional: activations and small building blocks written with reel ops.
#include "../core/config.hpp"
#include "../ops/products.hpp"

namespace reel::inline REEL_ABI {

namespace nn::functional {

template <TensorLike X> auto relu(const X& x) { return reel::relu(x); }

// Saturating bounds like clamp: uint8 [0, 5, 200] -> [0, 1, 1].
template <TensorLike X> auto hardtanh(const X& x, Bound min = -1.0, Bound max = 1.0) {
  using T = detail::value_t<X>;
  if constexpr (std::is_integral_v<T>) {
    // -1.0 / 1.0 defaults are integers for integer tensors
    auto as_int = [](const Bound& b) { return b.kind == Bound::Floating && b.d == std::floor(b.d) && std::abs(b.d) < 9e18 ? Bound(static_cast<int64_t>(b.d)) : b; };
    return make_expr(ClampOp<T>(as_int(min), as_int(max), "hardtanh"), x);
  } else {
    return make_expr(ClampOp<T>(min, max, "hardtanh"), x);
  }
}

// gelu(x) = x * Phi(x) (approximate = "none"), or the tanh approximation.
template <TensorLike X> auto gelu(const X& x, bool tanh_approximation = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::gelu: needs a floating point tensor");
  auto xt = detail::materialize(x);
  if (tanh_approximation) {
    constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
    return Tensor<T, detail::device_t<X>>(0.5 * xt * (1 + reel::tanh(k * (xt + 0.044715 * xt * xt * xt))));
  }
  return Tensor<T, detail::device_t<X>>(0.5 * xt * (1 + erf(xt * 0.7071067811865476)));
}

template <TensorLike X> auto softmax(const X& x, int64_t dim) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::softmax: needs a floating point tensor");
  auto xt = detail::materialize(x);
  Tensor<T, detail::device_t<X>> m = amax(xt.detach(), {dim}, true);  // a shift: no gradient
  Tensor<T, detail::device_t<X>> e = exp(xt - where(isinf(m), T(0), m));
  return Tensor<T, detail::device_t<X>>(e / sum(e, {dim}, true));
}

template <TensorLike X> auto log_softmax(const X& x, int64_t dim) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::log_softmax: needs a floating point tensor");
  auto xt = detail::materialize(x);
  return Tensor<T, detail::device_t<X>>(xt - logsumexp(xt, dim, true));
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

// y = x W^T + b
template <class T, class D>
Tensor<T, D> linear(const Tensor<T, D>& x, const Tensor<T, D>& w, const Tensor<T, D>& b = {}) {
  auto y = matmul(x, w.mT());
  if (b.defined()) return y + b;
  return y;
}

}  // namespace nn::functional
}  // namespace reel
