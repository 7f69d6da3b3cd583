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

template <class T, class D, class E>
void describe_kernel(CaptureTrace& t, const Tensor<T, D>& out, const E& e, std::vector<int64_t> space,
                     std::vector<char> reduced, bool mean) {
  if constexpr (std::is_floating_point_v<T> && Backend<D>::host_memory) {
    if (!t.wants_descs()) return;
    auto d = std::make_shared<KernelDesc>();
    auto g = std::make_shared<ir::Graph>();
    ir::Builder b{*g};
    d->roots.push_back(ir::to_ir_as<T, D>(b, e));
    auto visit = [&](const auto& self, const auto& x) -> void {  // leaf slots: to_ir's order
      using X = std::decay_t<decltype(x)>;
      if constexpr (is_tensor_v<X>) {
        d->leaves.push_back(x.impl_ptr());
      } else if constexpr (requires { x.args; }) {
        std::apply([&](const auto&... a) { (self(self, a), ...); }, x.args);
      }
    };
    visit(visit, e);
    if (d->leaves.size() != g->leaves.size()) return;
    d->graph = std::move(g);
    d->outs.push_back(out.impl_ptr());
    d->space = std::move(space);
    d->reduced = std::move(reduced);
    d->mean = mean;
    t.describe(std::move(d));
  } else {
    (void)t, (void)out, (void)e, (void)space, (void)reduced, (void)mean;
  }
}

}  // namespace reel::detail
