#pragma once
// What compile's fusion knows of a kept kernel (core/capture.hpp's KernelDesc): the IR graph
// of the expression it evaluates, its leaf tensors in the graph's slot order, its output.
// Recorder<T, D>::describe (record.hpp) calls this; real floating outputs on the host only.
#include "../core/config.hpp"
#include <memory>
#include <vector>

#include "../core/capture.hpp"
#include "ir.hpp"

namespace reel::inline REEL_ABI::detail {

// Pointers to the tensors of an expression's leaves, in to_ir's slot order (also what
// autograd saves of an expression it records).
template <class X> void collect_leaf_impls(const X&, const GradPtr**, size_t&) {}
template <class T, class D> void collect_leaf_impls(const Tensor<T, D>& t, const GradPtr** v, size_t& n) { v[n++] = &t.impl_ptr(); }
template <class Op, class... A> void collect_leaf_impls(const Expr<Op, A...>& e, const GradPtr** v, size_t& n) {
  std::apply([&](const auto&... a) { (collect_leaf_impls(a, v, n), ...); }, e.args);
}

// An expression's graph built through a plain function pointer: the one line per expression
// type that description and recording need (to_ir_as, the instantiation both share).
using BuildIr = int (*)(ir::Builder&, const void* e);
template <class T, class D, class E> int build_ir(ir::Builder& b, const void* e) {
  return ir::to_ir_as<T, D>(b, *static_cast<const E*>(e));
}

// The part of a description no expression type instantiates again.
REEL_INLINE void describe_graph(CaptureTrace& t, BuildIr build, const void* e, const GradPtr* const* leaves, size_t n,
                                GradPtr out, const Shape& space, std::vector<char> reduced, bool mean);

template <class T, class D, class E>
void describe_kernel(CaptureTrace& t, const Tensor<T, D>& out, const E& e, const Shape& space,
                     std::vector<char> reduced, bool mean) {
  if constexpr (std::is_floating_point_v<T> && Backend<D>::host_memory) {
    if (!t.wants_descs()) return;
    const GradPtr* leaves[kMaxOperands];
    size_t n = 0;
    collect_leaf_impls(e, leaves, n);
    describe_graph(t, &build_ir<T, D, E>, &e, leaves, n, out.impl_ptr(), space, std::move(reduced), mean);
  } else {
    (void)t, (void)out, (void)e, (void)space, (void)reduced, (void)mean;
  }
}

}  // namespace reel::detail
