#pragma once
// sort and topk: stable, NaN the largest value; the lines are ordered through one
// comparison function per element type (std::stable_sort compiled once).
#include "../core/config.hpp"
#include <algorithm>
#include <numeric>
#include <vector>

#include "indexing.hpp"

namespace reel::inline REEL_ABI {

namespace detail {

template <class T>
bool nan_greater(const T& a, const T& b) {  // strict "a > b" where NaN is the largest value
  if (is_nan(a)) return !is_nan(b);
  if (is_nan(b)) return false;
  return a > b;
}

// Orders indices of one line by value through a function pointer, so std::stable_sort
// and std::partial_sort are compiled once for every element type (compile time).
struct IndexOrder {
  const void* line;
  bool (*greater)(const void*, int64_t, int64_t);
  bool descending;
  bool operator()(int64_t i, int64_t j) const {  // i before j
    return descending ? greater(line, i, j) : greater(line, j, i);
  }
};
template <class T>
bool greater_at(const void* line, int64_t i, int64_t j) {
  const T* p = static_cast<const T*>(line);
  return nan_greater(convert<compute_t<T>>(p[i]), convert<compute_t<T>>(p[j]));
}
// Sorts perm (indices of a line) stably by value; `k < n`: only the first k, ties by index.
inline void order_line(std::vector<int64_t>& perm, IndexOrder ord, int64_t k) {
  std::iota(perm.begin(), perm.end(), 0);
  if (k >= static_cast<int64_t>(perm.size())) {
    std::stable_sort(perm.begin(), perm.end(), ord);
  } else {
    auto tie_break = [&](int64_t i, int64_t j) {
      if (ord(i, j)) return true;
      if (ord(j, i)) return false;
      return i < j;
    };
    std::partial_sort(perm.begin(), perm.begin() + k, perm.end(), tie_break);
  }
}
}  // namespace detail

namespace detail {
// The first k of every line along `dim` in value order (k = the line length: a full
// stable sort), with their indices.
template <class T, class Dv>
ValuesIndices<T, Dv> ordered_lines(const Tensor<T, Dv>& x, int64_t dim, int64_t k, bool descending, const char* fn) {
  int64_t d = wrap_dim(dim, x.dim(), fn);
  int64_t n = x.dim() ? x.size(d) : 1;
  REEL_CHECK(k >= 0 && k <= n, index_error, fn, ": k (", k, ") is out of range for dimension ", d, " of size ", n);
  auto xt = x.dim() ? x.transpose(d, -1).contiguous() : x.reshape({1});
  Shape os = xt.sizes();
  os.back() = k;
  auto vals = empty<T, Dv>(os);
  auto idx = empty<int64_t, Dv>(os);
  if constexpr (detail::device_memory_v<Dv>) {
    // the device: every line sorted stably (ties keep index order), then the first k of each
    auto fv = empty<T, Dv>(xt.sizes());
    auto fi = empty<int64_t, Dv>(xt.sizes());
    Backend<Dv>::sort_lines(xt.data_ptr(), fv.mutable_data_ptr(), fi.mutable_data_ptr(), n ? xt.numel() / n : 0,
                                  n, descending);
    vals = k == n ? fv : Tensor<T, Dv>(fv.slice(-1, 0, k).contiguous());
    idx = k == n ? fi : Tensor<int64_t, Dv>(fi.slice(-1, 0, k).contiguous());
  } else if constexpr (detail::Backend<Dv>::has_data) {
    int64_t lines = n ? xt.numel() / n : 0;
    kernel_step({vals.impl().storage.get(), idx.impl().storage.get()}, {xt.impl().storage.get()},
                [xt, vals, idx, lines, n, k, descending] {
                  const T* s = xt.data_ptr();
                  T* vo = vals.mutable_data_ptr();
                  int64_t* io = idx.mutable_data_ptr();
                  parallel_range(lines, [&](int64_t b, int64_t e) {
                    std::vector<int64_t> perm(n);
                    for (int64_t l = b; l < e; ++l) {
                      const T* line = s + l * n;
                      order_line(perm, {line, &greater_at<T>, descending}, k);
                      for (int64_t i = 0; i < k; ++i) {
                        vo[l * k + i] = line[perm[i]];
                        io[l * k + i] = perm[i];
                      }
                    }
                  }, 16);
                });
  }
  if (x.dim() == 0) return {vals.reshape({}), idx.reshape({})};
  return {vals.transpose(d, -1).contiguous(), idx.transpose(d, -1).contiguous()};
}
}  // namespace detail

// sort along dim: stable; NaN sorts as the largest value (last ascending, first descending).
template <TensorLike X>
  requires is_tensor_v<X>
ValuesIndices<detail::value_t<X>, detail::device_t<X>> sort(const X& xe, int64_t dim = -1, bool descending = false) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "sort");
  auto x = detail::materialize(xe);
  auto r = detail::ordered_lines(x.detach(), dim, x.dim() ? x.size(dim) : 1, descending, "sort");
  if (x.impl().autograd && x.dim()) r.values = detail::gather_along(x, r.indices, dim);
  return r;
}
template <class X>
  requires is_expr_v<X>
auto sort(const X& xe, int64_t dim = -1, bool descending = false) {
  return sort(detail::materialize(xe), dim, descending);
}

// The k largest (or smallest) along dim, always sorted (the `sorted` flag is accepted for
// PyTorch compatibility); ties keep index order.
template <TensorLike X>
  requires is_tensor_v<X>
auto topk(const X& xe, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "topk");
  (void)sorted;
  auto x = detail::materialize(xe);
  auto r = detail::ordered_lines(x.detach(), dim, k, largest, "topk");
  if (x.impl().autograd && x.dim()) r.values = detail::gather_along(x, r.indices, dim);
  return r;
}
template <class X>
  requires is_expr_v<X>
auto topk(const X& xe, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) {
  return topk(detail::materialize(xe), k, dim, largest, sorted);
}

}  // namespace reel
