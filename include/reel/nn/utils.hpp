#pragma once
// nn::utils: clip_grad_norm_ over the gradients of a parameter list (foreach norms and one
// scaling).
#include "../core/config.hpp"
#include <cmath>
#include <limits>

#include "../foreach.hpp"

namespace reel::inline REEL_ABI::nn::utils {
// Scales the gradients so their total norm is at most max_norm; returns the total norm
// (of all gradients viewed as one vector). PyTorch's clip_grad_norm_: the coefficient is
// max_norm / (total + 1e-6), clamped at 1, and every gradient is multiplied by it.
template <class T, class D>
double clip_grad_norm_(foreach::TensorList<T, D> params, double max_norm, double norm_type = 2,
                       bool error_if_nonfinite = false) {
  autograd::no_grad ng;
  std::vector<Tensor<T, D>> grads;
  for (const auto& p : params)
    if (auto g = p.grad(); g.defined()) grads.push_back(g);
  if (grads.empty()) return 0;
  auto norms = foreach::norm(grads, norm_type);
  double total = 0;
  if (std::isinf(norm_type)) {
    total = norm_type > 0 ? 0 : std::numeric_limits<double>::infinity();
    for (const auto& n : norms) {
      double v = static_cast<double>(n.item());
      total = std::isnan(v) || std::isnan(total) ? std::numeric_limits<double>::quiet_NaN()
              : norm_type > 0                   ? std::max(total, v)
                                                : std::min(total, v);
    }
  } else {
    for (const auto& n : norms) total += std::pow(static_cast<double>(n.item()), norm_type);
    total = std::pow(total, 1 / norm_type);
  }
  using R = real_t<T>;
  total = static_cast<double>(static_cast<R>(total));  // the norm is a tensor of the gradients' dtype in PyTorch
  REEL_CHECK(!error_if_nonfinite || std::isfinite(total), error, "clip_grad_norm_: the total norm of order ", norm_type,
             " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and ",
             "scale the gradients by the non-finite norm anyway, set error_if_nonfinite = false");
  double coef = max_norm / (total + 1e-6);
  foreach::mul_(grads, std::isnan(coef) ? coef : std::min(coef, 1.0));
  return total;
}
template <class T, class D>
double clip_grad_norm_(const std::vector<Tensor<T, D>>& params, double max_norm, double norm_type = 2,
                       bool error_if_nonfinite = false) {
  return clip_grad_norm_(foreach::TensorList<T, D>(params), max_norm, norm_type, error_if_nonfinite);
}
template <class T, class D>
double clip_grad_norm_(std::initializer_list<Tensor<T, D>> params, double max_norm, double norm_type = 2,
                       bool error_if_nonfinite = false) {
  return clip_grad_norm_(foreach::TensorList<T, D>(params), max_norm, norm_type, error_if_nonfinite);
}
}  // namespace reel::nn::utils
