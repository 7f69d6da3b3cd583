#pragma once
// Activation checkpointing (torch.utils.checkpoint, with selective checkpointing's policies):
//
//   Tensor<float> y = reel::checkpoint([&](const std::vector<Tensor<float>>& in) {
//     return Tensor<float>(relu(matmul(in[0], w) + b));
//   }, {x});
//   auto policy = [](const reel::OpCall& op) {
//     return op.name() == "matmul" ? CheckpointPolicy::MUST_SAVE : CheckpointPolicy::PREFER_RECOMPUTE;
//   };
//   Tensor<float> z = reel::checkpoint(block, {x}, policy);   // matmuls kept, the rest recomputed
//
// The function runs once forward with its history recorded; that history (and every tensor it
// saved) is then dropped, and one node stands for the whole region: its edges go where the
// region's did (the inputs, parameters the function captured, any tensor from outside it).
// Backward runs the function again on the same inputs, differentiates that recomputation
// (a backward pass of its own, ending at those edges) and passes the gradients on. So
// parameters captured by the function get their gradients, higher-order gradients work (with
// create_graph the recomputation is recorded like any forward), forward-mode tangents pass
// through the forward, and checkpoints nest.
//
// Replays are faithful: the random generator is put back to its state at the forward (dropout
// masks match) and restored after; ops with a side effect (OpTag::side_effect) keep their
// result and are not run again, whatever the policy; in-place writes into tensors from outside
// the function are not made again (op_report.hpp). An input, or a tensor from outside the
// function that its ops saved, modified in place between the forward and backward raises
// reel::error, as does a recomputation that does not run the same ops.
//
// The policy sees the ops that report themselves (matrix products as "matmul", custom ops of
// reel::library by their names); everything else (elementwise expressions, reductions, views)
// is recomputed. Without grad mode the function just runs.
#include "../core/config.hpp"
#include <functional>
#include <optional>
#include <unordered_set>
#include <vector>

#include "../core/op_report.hpp"
#include "../random/philox.hpp"
#include "autograd.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// What a checkpointed region's history reaches: the nodes made after `first_seq` form the
// region; `ends` are its edges to older nodes (one per node and slot), `older_saved` the
// tensors made before the region (storages numbered up to `first_serial`) its nodes saved.
struct Region {
  std::vector<Edge> ends;
  std::vector<std::pair<std::weak_ptr<Storage>, uint64_t>> older_saved;
};
inline Region walk_region(Node* root, uint64_t first_seq, uint64_t first_serial) {
  Region r;
  std::vector<Node*> stack{root};
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<const TensorImpl*, uint64_t>> saved;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (first_serial) n->saved_versions(saved);
    for (const Edge& e : n->next) {
      if (!e.fn) continue;
      if (e.fn->seq > first_seq) {
        if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      } else if (std::none_of(r.ends.begin(), r.ends.end(),
                              [&](const Edge& x) { return x.fn == e.fn && x.input_nr == e.input_nr; })) {
        r.ends.push_back(e);
      }
    }
  }
  for (const auto& [t, v] : saved)
    if (t && t->storage && t->storage->serial <= first_serial) r.older_saved.push_back({t->storage, v});
  return r;
}

template <class T, class D, class F>
Tensor<T, D> call_region(F& fn, const std::vector<Tensor<T, D>>& inputs) {
  return Tensor<T, D>(fn(inputs));
}

template <class T, class D, class F>
struct CheckpointNode final : Node {
  std::optional<F> fn;
  std::vector<Tensor<T, D>> inputs;
  std::vector<uint64_t> versions;  // the inputs' after the forward
  std::vector<std::pair<std::weak_ptr<Storage>, uint64_t>> older_saved;
  std::shared_ptr<CheckpointFrame> frame;
  uint64_t rng_seed = 0, rng_offset = 0;

  const char* name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    fn.reset();
    inputs.clear();
    older_saved.clear();
    frame.reset();
  }
  GradList apply(GradList& grads) override {
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k].defined()) check_version(inputs[k].impl(), versions[k], "checkpoint (an input of the function)");
    for (const auto& [w, v] : older_saved)
      if (auto s = w.lock()) {
        const uint64_t now = s->version.load(std::memory_order_relaxed);
        REEL_CHECK(now == v, error, "checkpoint: a tensor from outside the checkpointed function that its ops saved ",
                   "(a parameter it captured?) was modified in place after the forward (version ", now, "; expected ",
                   v, "): recomputing the function would give another result. Modify it after backward.");
      }
    const bool create = grad_mode_flag();
    // 1. The function again, with the forward's random numbers and kept results.
    Generator& gen = default_generator();
    struct RngRestore {
      Generator& g;
      uint64_t seed, offset;
      ~RngRestore() {
        g.manual_seed(seed);
        g.set_offset(offset);
      }
    } restore{gen, gen.seed(), gen.offset()};
    gen.manual_seed(rng_seed);
    gen.set_offset(rng_offset);
    frame->seen.clear();
    frame->first_serial = storage_serials().load(std::memory_order_relaxed);
    const uint64_t first_seq = next_sequence_nr();
    Tensor<T, D> out;
    {
      struct Replay {
        CheckpointFrame& f;
        explicit Replay(CheckpointFrame& x) : f(x) { f.replaying = true; }
        ~Replay() { f.replaying = false; }
      } replay(*frame);
      FrameScope scope(frame.get());
      GradModeGuard on(true);
      out = call_region(*fn, inputs);
    }
    for (const auto& [op, calls] : frame->calls)
      REEL_CHECK(frame->seen[op] == calls.size(), error, "checkpoint: recomputing the checkpointed function called ", op,
                 " ", frame->seen[op], " times, its forward ", calls.size(),
                 ": a checkpointed function must run the same ops each time");
    REEL_CHECK(out.sizes() == outputs[0].sizes, error, "checkpoint: recomputing the checkpointed function gave shape ",
               out.sizes(), ", its forward ", outputs[0].sizes);
    auto* m = meta_of(out.impl());
    REEL_CHECK(m && m->grad_fn && m->grad_fn->seq > first_seq, error,
               "checkpoint: recomputing the checkpointed function gave a result without the history its forward had");
    // 2. Its backward, ending where the forward's region did.
    Region r = walk_region(m->grad_fn.get(), first_seq, 0);
    bool same = r.ends.size() == next.size();
    for (size_t k = 0; k < r.ends.size() && same; ++k)
      same = std::any_of(next.begin(), next.end(),
                         [&](const Edge& e) { return e.fn == r.ends[k].fn && e.input_nr == r.ends[k].input_nr; });
    REEL_CHECK(same, error, "checkpoint: recomputing the checkpointed function used other tensors from outside it ",
               "than its forward did (", r.ends.size(), " against ", next.size(),
               "): a checkpointed function must compute the same thing each time");
    BackwardTask task;
    task.roots.push_back({m->grad_fn, m->output_nr});
    task.root_grads.push_back(grads[0]);
    task.capture.assign(next.begin(), next.end());
    task.prune_at_captures = true;
    task.keep_graph = create;
    task.create_graph = create;
    task.accumulate_into_leaves = false;
    return run_backward(task);
  }
};

template <class T, class D, class F>
Tensor<T, D> checkpoint_region(F fn, const std::vector<Tensor<T, D>>& inputs,
                               std::function<CheckpointPolicy(const OpCall&)> policy) {
  if constexpr (!autograd_type_v<T, D>) {
    return call_region(fn, inputs);
  } else {
    if (!grad_mode_flag()) return call_region(fn, inputs);
    auto frame = std::make_shared<CheckpointFrame>();
    frame->policy = std::move(policy);
    Generator& gen = default_generator();
    const uint64_t seed = gen.seed(), offset = gen.offset();
    const uint64_t first_serial = storage_serials().load(std::memory_order_relaxed);
    const uint64_t first_seq = next_sequence_nr();
    Tensor<T, D> out;
    {
      FrameScope scope(frame.get());
      out = call_region(fn, inputs);
    }
    auto* m = meta_of(out.impl());
    if (!m || !m->grad_fn || m->grad_fn->seq <= first_seq) return out;  // nothing recorded inside it
    // Kept results the function itself went on to modify in place are recomputed instead.
    for (auto& [op, calls] : frame->calls)
      for (auto& c : calls)
        if (c.tensor && c.tensor->storage->version.load(std::memory_order_relaxed) != c.version) {
          REEL_CHECK(!c.side_effect, error, "checkpoint: the result of ", op,
                     " (an op with a side effect, kept to be reused) was modified in place inside the checkpointed ",
                     "function; modify a clone of it");
          c = KeptResult{};
        }
    Region r = walk_region(m->grad_fn.get(), first_seq, first_serial);
    auto node = std::make_shared<CheckpointNode<T, D, F>>();
    node->fn.emplace(std::move(fn));
    node->inputs = inputs;
    for (const auto& t : inputs) node->versions.push_back(t.defined() ? t.version() : 0);
    node->older_saved = std::move(r.older_saved);
    node->frame = std::move(frame);
    node->rng_seed = seed;
    node->rng_offset = offset;
    node->next.assign(r.ends.begin(), r.ends.end());
    node->outputs.push_back({ir::grad_type_of<T, D>(), out.sizes()});
    node->seq = next_sequence_nr();
    GradPtr res = plain_alias(out.impl());
    ensure_meta(*res).tangents = m->tangents;  // forward mode went through the forward
    set_history(*res, node, 0);
    return Tensor<T, D>(std::move(res));
  }
}

template <class P>
std::function<CheckpointPolicy(const OpCall&)> checkpoint_policy(P&& p) {
  static_assert(std::is_invocable_r_v<CheckpointPolicy, P&, const OpCall&>,
                "reel::checkpoint: the policy must be callable as policy(const OpCall&) -> CheckpointPolicy");
  return std::forward<P>(p);
}
}  // namespace detail

// Runs fn(inputs) keeping only what backward needs to run it again (see above).
template <class T, class D, class F>
  requires std::is_invocable_v<F&, const std::vector<Tensor<T, D>>&>
Tensor<T, D> checkpoint(F fn, const std::vector<Tensor<T, D>>& inputs) {
  return detail::checkpoint_region(std::move(fn), inputs, {});
}
template <class T, class D, class F>
  requires std::is_invocable_v<F&, const std::vector<Tensor<T, D>>&>
Tensor<T, D> checkpoint(F fn, std::initializer_list<Tensor<T, D>> inputs) {
  return detail::checkpoint_region(std::move(fn), std::vector<Tensor<T, D>>(inputs), {});
}
// Selective checkpointing: policy(op) says per reported op call whether its result is kept.
template <class T, class D, class F, class P>
  requires std::is_invocable_v<F&, const std::vector<Tensor<T, D>>&>
Tensor<T, D> checkpoint(F fn, const std::vector<Tensor<T, D>>& inputs, P&& policy) {
  return detail::checkpoint_region(std::move(fn), inputs, detail::checkpoint_policy(std::forward<P>(policy)));
}
template <class T, class D, class F, class P>
  requires std::is_invocable_v<F&, const std::vector<Tensor<T, D>>&>
Tensor<T, D> checkpoint(F fn, std::initializer_list<Tensor<T, D>> inputs, P&& policy) {
  return detail::checkpoint_region(std::move(fn), std::vector<Tensor<T, D>>(inputs),
                                   detail::checkpoint_policy(std::forward<P>(policy)));
}

}  // namespace reel
