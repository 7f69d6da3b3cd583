#pragma once
// cat and stack.
#include "../core/config.hpp"
#include <span>

#include "factories.hpp"
#include "../autograd/record.hpp"

namespace reel::inline REEL_ABI {

// ------------------------------------------------------------------ cat / stack
namespace detail {
template <class T, class D>
Tensor<T, D> cat_impl(std::span<const Tensor<T, D>> ts, int64_t dim) {
  REEL_CHECK(!ts.empty(), value_error, "cat: expected a non-empty list of tensors");
  // PyTorch skips 1-d empty tensors (legacy behaviour that users rely on).
  const Tensor<T, D>* ref = nullptr;
  for (const auto& t : ts)
    if (!(t.dim() == 1 && t.size(0) == 0)) {
      ref = &t;
      break;
    }
  if (!ref) return empty<T, D>({0});
  REEL_CHECK(ref->dim() > 0, value_error, "cat: zero-dimensional tensor cannot be concatenated");
  int64_t d = wrap_dim(dim, ref->dim(), "cat");
  Shape os = ref->sizes();
  int64_t total = 0;
  for (size_t k = 0; k < ts.size(); ++k) {
    const auto& t = ts[k];
    if (t.dim() == 1 && t.size(0) == 0) continue;
    REEL_CHECK(t.dim() == ref->dim(), value_error, "cat: tensors must have the same number of dimensions: got ",
               ref->dim(), " and ", t.dim(), " (tensor ", k, ")");
    for (int64_t i = 0; i < t.dim(); ++i)
      REEL_CHECK(i == d || t.size(i) == os[i], value_error, "cat: sizes of tensors must match except in dimension ", d,
                 ": expected size ", os[i], " but got size ", t.size(i), " for tensor number ", k, " in the list");
    total += t.size(d);
  }
  os[d] = total;
  auto out = empty<T, D>(os);
  int64_t at = 0;
  for (const auto& t : ts) {
    if (t.dim() == 1 && t.size(0) == 0) continue;
    if (t.size(d)) out.narrow(d, at, t.size(d)).copy_(t);
    at += t.size(d);
  }
  return out;
}
}  // namespace detail

template <class T, class D> Tensor<T, D> cat(std::span<const Tensor<T, D>> ts, int64_t dim = 0) {
  bool any = std::any_of(ts.begin(), ts.end(), [](const Tensor<T, D>& t) { return t.defined() && t.impl().autograd; });
  if (!any) return detail::cat_impl(ts, dim);
  std::vector<Tensor<T, D>> plain;
  for (const auto& t : ts) plain.push_back(t.detach());
  auto out = detail::cat_impl(std::span<const Tensor<T, D>>(plain), dim);
  // where each input landed (1-d empty inputs are skipped, as in the forward)
  std::vector<std::pair<int64_t, int64_t>> at;
  int64_t d = out.dim() ? detail::wrap_dim(dim, out.dim(), "cat") : 0, pos = 0;
  for (const auto& t : ts) {
    bool skip = t.dim() == 1 && t.size(0) == 0;
    int64_t len = skip ? 0 : t.size(d);
    at.push_back({skip ? -1 : pos, len});
    pos += len;
  }
  std::vector<Shape> shapes;
  for (const auto& t : ts) shapes.push_back(t.sizes());
  return detail::record_fn(
      out, "CatBackward", ts, {},
      [at, d](const Tensor<T, D>& g) {
        std::vector<Tensor<T, D>> gs;
        for (auto [p, len] : at) gs.push_back(p < 0 ? zeros<T, D>({0}) : g.narrow(d, p, len));
        return gs;
      },
      [shapes, dim](const std::vector<Tensor<T, D>>& t) {
        std::vector<Tensor<T, D>> parts;
        for (size_t k = 0; k < t.size(); ++k) parts.push_back(t[k].defined() ? t[k] : zeros<T, D>(shapes[k]));
        return cat(std::span<const Tensor<T, D>>(parts), dim);
      });
}
template <class T, class D> Tensor<T, D> cat(const std::vector<Tensor<T, D>>& ts, int64_t dim = 0) {
  return cat(std::span<const Tensor<T, D>>(ts), dim);
}
template <class T, class D> Tensor<T, D> cat(std::initializer_list<Tensor<T, D>> ts, int64_t dim = 0) {
  return cat(std::span<const Tensor<T, D>>(ts.begin(), ts.size()), dim);
}
template <class T, class D> Tensor<T, D> stack(std::span<const Tensor<T, D>> ts, int64_t dim = 0) {
  REEL_CHECK(!ts.empty(), value_error, "stack: expected a non-empty list of tensors");
  int64_t d = detail::wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor<T, D>> u;
  u.reserve(ts.size());
  for (size_t k = 0; k < ts.size(); ++k) {
    REEL_CHECK(ts[k].sizes() == ts[0].sizes(), value_error, "stack: expects each tensor to be equal size, but got ",
               ts[0].sizes(), " at entry 0 and ", ts[k].sizes(), " at entry ", k);
    u.push_back(ts[k].unsqueeze(d));
  }
  return cat(std::span<const Tensor<T, D>>(u), d);
}
template <class T, class D> Tensor<T, D> stack(const std::vector<Tensor<T, D>>& ts, int64_t dim = 0) {
  return stack(std::span<const Tensor<T, D>>(ts), dim);
}
template <class T, class D> Tensor<T, D> stack(std::initializer_list<Tensor<T, D>> ts, int64_t dim = 0) {
  return stack(std::span<const Tensor<T, D>>(ts.begin(), ts.size()), dim);
}

}  // namespace reel
