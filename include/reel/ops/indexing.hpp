#pragma once
// Elements picked along a dim: gather and its adjoint scatter_add (each the other's
// backward), and the (values, indices) pairs that max(dim), sort and topk return.
#include "../core/config.hpp"

#include "factories.hpp"
#include "../autograd/record.hpp"

namespace reel::inline REEL_ABI {

template <class T, class D>
struct ValuesIndices {
  Tensor<T, D> values;
  Tensor<int64_t, D> indices;
};

namespace detail {
// Elements of x picked along `dim` by idx (whose shape is x's except along dim): gather,
// and its adjoint scatter_add into zeros of x's shape. Each is the other's backward.
template <LineOp Op, class T, class D>
Tensor<T, D> gather_scatter_primal(const Tensor<T, D>& src, const Tensor<int64_t, D>& idx, int64_t d, const Shape& out_sizes) {
  auto out = empty<T, D>(out_sizes);
  if constexpr (Backend<D>::has_data) {
    out.fill_(T(0));
    if (out.numel() == 0 || idx.numel() == 0) return out;
    auto st = src.detach().transpose(d, -1).contiguous();
    auto it = idx.transpose(d, -1).contiguous();
    auto ot = Op != LineOp::Gather ? Tensor<T, D>(out.transpose(d, -1).contiguous()) : empty<T, D>(it.sizes());
    int64_t k = it.size(-1), lines = it.numel() / k, n = Op != LineOp::Gather ? ot.size(-1) : st.size(-1);
    if constexpr (device_memory_v<D>) {
      Backend<D>::template gather_lines<Op>(st.data_ptr(), it.data_ptr(), ot.mutable_data_ptr(), lines, k, n);
    } else {
      kernel_step({ot.impl().storage.get()}, {st.impl().storage.get(), it.impl().storage.get(), ot.impl().storage.get()},
                  [st, it, ot, lines, k, n] {
                    const T* s = st.data_ptr();
                    const int64_t* ip = it.data_ptr();
                    T* o = ot.mutable_data_ptr();
                    for (int64_t l = 0; l < lines; ++l)
                      for (int64_t j = 0; j < k; ++j) {
                        int64_t i = ip[l * k + j];
                        REEL_CHECK(i >= 0 && i < n, index_error, Op == LineOp::Gather ? "gather" : Op == LineOp::Scatter ? "scatter" : "scatter_add", ": index ", i, " is out of bounds for size ", n);
                        if constexpr (Op == LineOp::Scatter)
                          o[l * n + i] = s[l * k + j];
                        else if constexpr (Op == LineOp::ScatterAdd)
                          o[l * n + i] += s[l * k + j];
                        else
                          o[l * k + j] = s[l * n + i];
                      }
                  });
    }
    return ot.transpose(d, -1).contiguous();
  }
  return out;
}
template <class T, class D> Tensor<T, D> scatter_add_along(const Shape& sizes, const Tensor<int64_t, D>& idx, const Tensor<T, D>& src, int64_t d);
template <class T, class D>
Tensor<T, D> gather_along(const Tensor<T, D>& x, const Tensor<int64_t, D>& idx, int64_t d) {
  d = wrap_dim(d, x.dim(), "gather");
  auto out = gather_scatter_primal<LineOp::Gather>(x, idx, d, idx.sizes());
  if (!x.impl().autograd) return out;
  auto in = x.sizes();
  return record_fn(
      out, "GatherBackward", {x}, {},
      [idx, d, in](const Tensor<T, D>& g) { return std::vector{scatter_add_along(in, idx, g, d)}; },
      [idx, d](const std::vector<Tensor<T, D>>& t) { return gather_along(t[0], idx, d); });
}
// src's elements added (ScatterAdd) or stored (Scatter: scatter's values; where an index
// repeats, the CPU keeps the last) into zeros of `sizes` at idx along d. Either way the adjoint
// in src is gather: each src element receives the gradient of the position it went to,
// duplicates included (for Scatter, as PyTorch's formula gives).
template <LineOp Op, class T, class D>
Tensor<T, D> scatter_lines(const Shape& sizes, const Tensor<int64_t, D>& idx, const Tensor<T, D>& src, int64_t d) {
  auto out = gather_scatter_primal<Op>(src, idx, d, sizes);
  if (!src.impl().autograd) return out;
  return record_fn(
      out, Op == LineOp::Scatter ? "ScatterBackward" : "ScatterAddBackward", {src}, {},
      [idx, d](const Tensor<T, D>& g) { return std::vector{gather_along(g, idx, d)}; },
      [idx, d, sizes](const std::vector<Tensor<T, D>>& t) { return scatter_lines<Op>(sizes, idx, t[0], d); });
}
template <class T, class D>
Tensor<T, D> scatter_add_along(const Shape& sizes, const Tensor<int64_t, D>& idx, const Tensor<T, D>& src, int64_t d) {
  return scatter_lines<LineOp::ScatterAdd>(sizes, idx, src, d);
}
template <class T, class D>
ValuesIndices<T, D> select_along(const Tensor<T, D>& x, const Tensor<int64_t, D>& idx_keep, int64_t dim, bool keepdim) {
  int64_t d = x.dim() ? wrap_dim(dim, x.dim(), "max") : 0;
  if (x.dim() == 0) return {x.clone(), idx_keep};
  auto v = gather_along(x, idx_keep, d);
  if (keepdim) return {v, idx_keep};
  return {v.squeeze(d), idx_keep.squeeze(d)};
}
}  // namespace detail

}  // namespace reel
