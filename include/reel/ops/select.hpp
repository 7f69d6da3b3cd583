#pragma once
// PyTorch's selection ops, built on gather / scatter_add / scatter along a dim (indexing.hpp),
// so they are differentiable to any order: gather, scatter, scatter_add, index_select,
// index_add, flip, roll, masked_fill.
#include "../core/config.hpp"

#include "cat.hpp"
#include "indexing.hpp"

namespace reel::inline REEL_ABI {

namespace detail {
// idx as a tensor of x's rank whose sizes are x's except `size` along dim (a 1-d index list
// spread over the other dims, for index_select / index_add).
template <class D>
Tensor<int64_t, D> spread_index(const Tensor<int64_t, D>& idx, const Shape& like, int64_t dim, const char* fn) {
  REEL_CHECK(idx.dim() <= 1, index_error, fn, ": index should have at most one dimension, got ", idx.dim());
  Shape one(like.size(), 1), full = like;
  one[dim] = idx.numel();
  full[dim] = idx.numel();
  return idx.reshape(one).expand(full);
}
// Checks gather / scatter_add's index against x (and src): same rank, at most x's sizes in the
// other dims (src's in every dim).
template <class T, class D>
void check_gather_index(const Tensor<T, D>& x, const Tensor<int64_t, D>& idx, int64_t dim, const char* fn) {
  REEL_CHECK(idx.dim() == x.dim() || (idx.dim() <= 1 && x.dim() <= 1), index_error, fn,
             ": index tensor must have the same number of dimensions as input tensor");
  for (int64_t d = 0; d < idx.dim(); ++d)
    REEL_CHECK(d == dim || idx.size(d) <= x.size(d), index_error, fn, ": size of index (", idx.sizes(),
               ") must not exceed the input's (", x.sizes(), ") in dimension ", d, " (other than ", dim, ")");
}
// x's leading part of idx's sizes in the dims other than `dim`.
template <class T, class D>
Tensor<T, D> narrow_to(const Tensor<T, D>& x, const Shape& sizes, int64_t dim) {
  Tensor<T, D> r = x;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim && sizes[d] != x.size(d)) r = r.narrow(d, 0, sizes[d]);
  return r;
}
// part (sizes <= x's) zero-padded at the end of each dim to x's sizes.
template <class T, class D>
Tensor<T, D> pad_to(Tensor<T, D> part, const Shape& sizes) {
  for (int64_t d = 0; d < part.dim(); ++d) {
    if (part.size(d) == sizes[d]) continue;
    Shape z = part.sizes();
    z[d] = sizes[d] - part.size(d);
    part = cat(std::vector<Tensor<T, D>>{part, zeros<T, D>(z)}, d);
  }
  return part;
}
}  // namespace detail

// out[i][j] = x[idx[i][j]][j] (dim 0): out has idx's shape; idx may be smaller than x in the
// other dims.
template <class T, class D>
Tensor<T, D> gather(const Tensor<T, D>& x, int64_t dim, const Tensor<int64_t, D>& idx) {
  dim = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "gather");
  if (x.dim() == 0) return detail::gather_along(x.reshape({1}), idx.reshape({-1}), 0).reshape(idx.sizes());
  detail::check_gather_index(x, idx, dim, "gather");
  return detail::gather_along(detail::narrow_to(x, idx.sizes(), dim), idx, dim);
}

// x with src[i][j] added at x[idx[i][j]][j] (dim 0); src may be larger than idx (its leading
// part is used), duplicates accumulate.
template <class T, class D>
Tensor<T, D> scatter_add(const Tensor<T, D>& x, int64_t dim, const Tensor<int64_t, D>& idx, const Tensor<T, D>& src) {
  dim = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "scatter_add");
  detail::check_gather_index(x, idx, dim, "scatter_add");
  for (int64_t d = 0; d < idx.dim(); ++d)
    REEL_CHECK(idx.size(d) <= src.size(d), index_error, "scatter_add: size of index (", idx.sizes(),
               ") must not exceed src's (", src.sizes(), ") in dimension ", d);
  Shape part = x.sizes();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) part[d] = idx.size(d);
  Shape src_part = idx.sizes();
  Tensor<T, D> s = src;
  for (int64_t d = 0; d < src.dim(); ++d)
    if (src.size(d) != src_part[d]) s = s.narrow(d, 0, src_part[d]);
  return Tensor<T, D>(x + detail::pad_to(detail::scatter_add_along(part, idx, s, dim), x.sizes()));
}

// x with src[i][j] stored at x[idx[i][j]][j] (dim 0), or the number value there; src may be
// larger than idx (its leading part is used). Where an index repeats within a line the CPU
// keeps the last value (PyTorch leaves it unspecified). Gradients as PyTorch's: x's is zero
// at the written positions, src's is the output gradient gathered at idx (every duplicate).
template <class T, class D, class S>
  requires(std::is_same_v<S, Tensor<T, D>> || is_cpp_scalar_v<S>)
Tensor<T, D> scatter(const Tensor<T, D>& x, int64_t dim, const Tensor<int64_t, D>& idx, const S& src) {
  dim = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "scatter");
  detail::check_gather_index(x, idx, dim, "scatter");
  Tensor<T, D> s;
  if constexpr (is_cpp_scalar_v<S>) {
    s = full<T, D>(idx.sizes(), convert<T>(src));
  } else {
    for (int64_t d = 0; d < idx.dim(); ++d)
      REEL_CHECK(idx.size(d) <= src.size(d), index_error, "scatter: size of index (", idx.sizes(),
                 ") must not exceed src's (", src.sizes(), ") in dimension ", d);
    s = src;
    for (int64_t d = 0; d < src.dim(); ++d)
      if (src.size(d) != idx.size(d)) s = s.narrow(d, 0, idx.size(d));
  }
  if (x.dim() == 0) return scatter(x.reshape({1}), 0, idx.reshape({-1}), Tensor<T, D>(s.reshape({-1}))).reshape({});
  Shape part = x.sizes();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) part[d] = idx.size(d);
  auto written = detail::pad_to(detail::gather_scatter_primal<detail::LineOp::ScatterAdd>(
                                    ones<T, D>(idx.sizes()), idx, dim, part), x.sizes());
  auto values = detail::pad_to(detail::scatter_lines<detail::LineOp::Scatter>(part, idx, s, dim), x.sizes());
  return Tensor<T, D>(where(ne(written, T(0)), values, x));
}

// The entries idx (a 1-d list) of x along dim.
template <class T, class D>
Tensor<T, D> index_select(const Tensor<T, D>& x, int64_t dim, const Tensor<int64_t, D>& idx) {
  if (x.dim() == 0) return gather(x, 0, idx.reshape({-1})).reshape(idx.dim() == 0 ? Shape{} : Shape{idx.numel()});
  dim = detail::wrap_dim(dim, x.dim(), "index_select");
  Shape like = x.sizes();
  return detail::gather_along(x, detail::spread_index(idx, like, dim, "index_select"), dim);
}

// x with alpha * src's slice k added at x's slice idx[k] along dim (duplicates accumulate).
template <class T, class D>
Tensor<T, D> index_add(const Tensor<T, D>& x, int64_t dim, const Tensor<int64_t, D>& idx, const Tensor<T, D>& src,
                       double alpha = 1) {
  dim = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "index_add");
  Shape want = x.sizes();
  if (x.dim() > 0) want[dim] = idx.numel();
  REEL_CHECK(src.sizes() == want || (x.dim() == 0 && src.numel() == idx.numel()), index_error,
             "index_add: source has shape ", src.sizes(), ", expected ", want);
  if (x.dim() == 0) return scatter_add(x.reshape({1}), 0, idx.reshape({-1}), Tensor<T, D>(src.reshape({-1}) * alpha)).reshape({});
  auto s = alpha == 1 ? src : Tensor<T, D>(src * alpha);
  return Tensor<T, D>(x + detail::scatter_add_along(x.sizes(), detail::spread_index(idx, src.sizes(), dim, "index_add"), s, dim));
}

// x reversed along each of dims.
template <class T, class D>
Tensor<T, D> flip(const Tensor<T, D>& x, Shape dims) {
  Tensor<T, D> r = x;
  std::vector<char> seen(std::max<int64_t>(x.dim(), 1), 0);
  for (int64_t d : dims) {
    d = detail::wrap_dim(d, std::max<int64_t>(x.dim(), 1), "flip");
    REEL_CHECK(!seen[d], value_error, "flip: dim ", d, " appears multiple times in the list of dims");
    seen[d] = 1;
    if (x.dim() == 0) continue;
    const int64_t n = x.size(d);
    r = index_select(r, d, arange<int64_t, D>(n - 1, int64_t(-1), int64_t(-1)));
  }
  return r;
}

// x rotated by shifts[k] along dims[k] (elements leaving one end come back at the other);
// without dims, over the flattened tensor, keeping its shape.
template <class T, class D>
Tensor<T, D> roll(const Tensor<T, D>& x, std::vector<int64_t> shifts, Shape dims = {}) {
  if (dims.size() == 0) {
    REEL_CHECK(shifts.size() == 1, value_error, "roll: shifts and dimensions must align. shifts: ", shifts.size(),
               ", dims: 0");
    return roll(x.reshape({-1}), shifts, {0}).reshape(x.sizes());
  }
  REEL_CHECK(static_cast<int64_t>(shifts.size()) == static_cast<int64_t>(dims.size()), value_error, "roll: shifts and dimensions must align. shifts: ",
             shifts.size(), ", dims: ", dims.size());
  Tensor<T, D> r = x;
  for (size_t k = 0; k < shifts.size(); ++k) {
    int64_t d = detail::wrap_dim(dims[k], std::max<int64_t>(x.dim(), 1), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    // out[i] = x[(i - s) mod n]
    r = index_select(r, d, Tensor<int64_t, D>(remainder(arange<int64_t, D>(-s, n - s), n)));
  }
  return r;
}
template <class T, class D>
Tensor<T, D> roll(const Tensor<T, D>& x, int64_t shift, std::optional<int64_t> dim = {}) {
  return dim ? roll(x, std::vector<int64_t>{shift}, Shape{*dim}) : roll(x, std::vector<int64_t>{shift});
}

// x with value where mask is true (mask broadcasts to x; value a number or a 0-d tensor).
template <class T, class D, class M, class V>
  requires(TensorLike<M> && (is_cpp_scalar_v<V> || TensorLike<V>))
Tensor<T, D> masked_fill(const Tensor<T, D>& x, const M& mask, const V& value) {
  static_assert(std::is_same_v<detail::value_t<M>, bool>, "reel::masked_fill: the mask must be a bool tensor");
  if constexpr (TensorLike<V>) {
    Tensor<detail::value_t<V>, detail::device_t<V>> v = value;
    REEL_CHECK(v.dim() == 0, value_error, "masked_fill only supports a 0-dimensional value tensor, but got tensor with ",
               v.dim(), " dimension(s).");
    return Tensor<T, D>(where(mask, cast<T>(v), x));
  } else {
    return Tensor<T, D>(where(mask, value, x));
  }
}

}  // namespace reel
