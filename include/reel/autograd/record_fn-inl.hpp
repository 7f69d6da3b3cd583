#pragma once
// The non-template part of record_fn.hpp (header-only mode: included at its end; reel::runtime:
// compiled in src/runtime.cpp).
#include "record_fn.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE void attach_fn(const std::shared_ptr<FnNodeBase>& node, const char* name, const FnPlan& p,
                      GradList inputs, GradList saved, const GradType* type, TensorImpl& out) {
  node->op_name = name;
  node->seq = next_sequence_nr();
  for (size_t k = 0; k < inputs.size(); ++k) {
    node->next.push_back(edge_of(inputs[k], type));
    node->input_sizes.push_back(p.ins[k] ? p.ins[k]->sizes : Shape{});
  }
  for (auto& t : saved) {
    uint64_t v = version_of(*t);
    node->saved.push_back({std::move(t), v});
  }
  node->outputs.push_back({type, out.sizes});
  set_history(out, node, 0);
}
}  // namespace detail
}  // namespace reel
