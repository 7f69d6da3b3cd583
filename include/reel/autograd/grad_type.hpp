#pragma once
// The GradType table of each (element type, device): the few operations the type-erased
// backward engine (graph.hpp) needs on gradients, written with reel ops.
#include "../core/config.hpp"

#include "record.hpp"

namespace reel::inline REEL_ABI {
namespace detail::ir {
// The GradType of (T, D): gradient arithmetic written with reel ops on D's tensors.
template <class T, class D> GradPtr grad_add(const GradPtr& a, const GradPtr& b) {
  return Tensor<T, D>(Tensor<T, D>(a) + Tensor<T, D>(b)).impl_ptr();
}
template <class T, class D> GradPtr grad_zeros(const Shape& s) {
  auto t = make_tensor<T, D>(s);
  GradModeGuard ng(false);
  t.fill_(T(0));
  return t.impl_ptr();
}
template <class T, class D> GradPtr grad_clone(const GradPtr& g) {
  GradModeGuard ng(false);
  return Tensor<T, D>(plain_alias(*g)).clone().impl_ptr();
}
template <class T, class D> void grad_add_inplace(const GradPtr& acc, const GradPtr& g) {
  GradModeGuard ng(false);
  Tensor<T, D>(acc).add_(Tensor<T, D>(plain_alias(*g)));
}
template <class T, class D> GradPtr grad_reduce_to(const GradPtr& g, const Shape& s) {
  return reduce_to(Tensor<T, D>(g), s).impl_ptr();
}
template <class T, class D> GradPtr grad_expand(const GradPtr& g, const Shape& s) {
  return Tensor<T, D>(g).expand(s).impl_ptr();
}
template <class T, class D> GradPtr grad_sum(const GradPtr& g, const Shape& dims, bool keepdim) {
  return sum(Tensor<T, D>(g), dims, keepdim).impl_ptr();
}
template <class T, class D> GradPtr grad_scale(const GradPtr& g, double s) {
  return Tensor<T, D>(Tensor<T, D>(g) * s).impl_ptr();
}
template <class T, class D> GradPtr grad_contiguous(const GradPtr& g) { return Tensor<T, D>(g).contiguous().impl_ptr(); }
template <class T, class D> void grad_copy_into(const GradPtr& dst, const GradPtr& src) {
  GradModeGuard ng(false);
  Tensor<T, D>(dst).copy_(Tensor<T, D>(plain_alias(*src)));
}
template <class T, class D> const GradType* grad_type_of() {
  static const GradType t{scalar_type_v<T>,        &grad_add<T, D>,       &grad_zeros<T, D>,  &grad_clone<T, D>,
                          &grad_add_inplace<T, D>, &grad_reduce_to<T, D>, &grad_expand<T, D>, &grad_sum<T, D>,
                          &grad_scale<T, D>,       &grad_contiguous<T, D>, &grad_copy_into<T, D>};
  return &t;
}
}  // namespace detail::ir

}  // namespace reel
