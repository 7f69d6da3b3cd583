#pragma once
// The bodies of graph's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "graph.hpp"

namespace reel::inline REEL_ABI::detail {
REEL_INLINE void defer_release(std::shared_ptr<void> p) {
  if (!p) return;
  thread_local std::vector<std::shared_ptr<void>> pending;
  thread_local bool draining = false;
  pending.push_back(std::move(p));
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    auto last = std::move(pending.back());
    pending.pop_back();
    last.reset();  // may defer more
  }
  draining = false;
}

REEL_INLINE void set_tangent(TensorImpl& t, uint64_t level, GradPtr v, StructPtr st) {
  if (v) tangent_peak() = std::max(tangent_peak(), numel_of(v->sizes));
  auto& m = ensure_meta(t);
  std::erase_if(m.tangents, [&](const Tangent& x) { return x.level == level || !level_live(x.level); });
  if (v || st) m.tangents.push_back({level, std::move(v), std::move(st)});
}

REEL_INLINE void collect_levels(const TensorImpl* const* ins, size_t n, std::vector<uint64_t>& out) {
  for (uint64_t level : level_state().live) {
    if (!level_active(level)) continue;
    for (size_t i = 0; i < n; ++i)
      if (ins[i] && has_tangent(*ins[i], level)) {
        out.push_back(level);
        break;
      }
  }
}

REEL_INLINE void check_not_released(const Node& n) {
  REEL_CHECK(!n.released, error, "Trying to backward through the graph a second time (or to directly access saved ",
             "tensors after they have already been freed): saved intermediate values of the graph (in ", n.name(),
             ") are freed when you call backward() or autograd::grad(). Specify retain_graph = true if you need to ",
             "backward through the graph a second time.");
}

REEL_INLINE GradList run_backward(BackwardTask& task) {
  static std::atomic<uint64_t> epochs{0};
  const uint64_t epoch = ++epochs;
  // A pass run by a node of another pass on this thread keeps the marks it overwrites.
  int& depth = backward_depth();
  struct Mark {
    Node* n;
    uint64_t mark;
    int index;
  };
  struct Nesting {
    int& d;
    std::vector<Mark> marks;
    explicit Nesting(int& x) : d(x) { ++d; }
    ~Nesting() {
      if (--d == 0) final_callbacks().clear();  // (a pass that failed leaves none behind)
      for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
        it->n->visit_mark = it->mark;
        it->n->visit_index = it->index;
      }
    }
  } nesting(depth);
  const bool nested = depth > 1;
  std::vector<Node*> ends;  // prune_at_captures: the captured nodes, sorted
  if (task.prune_at_captures) {
    for (auto& c : task.capture) ends.push_back(c.fn.get());
    std::sort(ends.begin(), ends.end());
  }
  auto is_end = [&](Node* n) { return !ends.empty() && std::binary_search(ends.begin(), ends.end(), n); };
  // 1. The reachable nodes, in decreasing sequence number (a topological order).
  std::vector<Node*> nodes;
  std::vector<Node*> stack;
  auto visit = [&](Node* n) {
    if (n && n->visit_mark != epoch) {
      if (nested) nesting.marks.push_back({n, n->visit_mark, n->visit_index});
      n->visit_mark = epoch;
      stack.push_back(n);
    }
  };
  for (auto& r : task.roots) visit(r.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    if (!is_end(n))
      for (auto& e : n->next) visit(e.fn.get());
  }
  std::sort(nodes.begin(), nodes.end(), [](Node* a, Node* b) { return a->seq > b->seq; });
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->visit_index = static_cast<int>(i);
  auto index_of = [&](Node* n) { return n->visit_mark == epoch ? n->visit_index : -1; };

  // 2. With captures, only nodes leading to a captured slot need to run.
  std::vector<std::pair<int, int>> captures;  // (node index, capture index), by node
  for (size_t i = 0; i < task.capture.size(); ++i) {
    int at = task.capture[i].fn ? index_of(task.capture[i].fn.get()) : -1;
    if (at >= 0) captures.push_back({at, static_cast<int>(i)});  // else: unreachable
  }
  std::sort(captures.begin(), captures.end());
  std::vector<char> needed(nodes.size(), 1);
  if (!task.capture.empty()) {
    std::fill(needed.begin(), needed.end(), 0);
    for (auto& c : captures) needed[c.first] = 1;
    for (size_t i = nodes.size(); i-- > 0;) {  // inputs before consumers
      if (is_end(nodes[i])) continue;          // (its edges lead out of this pass)
      for (auto& e : nodes[i]->next)
        if (int j = e.fn ? index_of(e.fn.get()) : -1; j >= 0 && needed[j]) {
          needed[i] = 1;
          break;
        }
    }
  }

  // 3. Run.
  GradList captured(task.capture.size());
  std::vector<GradList> buffers(nodes.size());
  auto add_to = [&](const Edge& e, const GradPtr& g) {
    if (!e.fn || !g) return;
    int i = e.fn->visit_index;
    auto& buf = buffers[i];
    if (buf.empty()) buf.resize(std::max<size_t>(e.fn->outputs.size(), 1));
    GradPtr& acc = buf[e.input_nr];
    acc = acc ? e.fn->outputs[e.input_nr].type->add(acc, g) : g;
  };

  bool& mode = grad_mode_flag();
  const bool saved_mode = mode;
  struct Restore {
    bool& m;
    bool v;
    ~Restore() { m = v; }
  } restore{mode, saved_mode}, restore_acc{backward_accumulates_flag(), backward_accumulates_flag()};
  mode = task.create_graph;
  backward_accumulates_flag() = task.accumulate_into_leaves;

  for (size_t i = 0; i < task.roots.size(); ++i) add_to(task.roots[i], task.root_grads[i]);

  auto cap = captures.begin();
  auto run_node = [&](size_t i) {
    Node* n = nodes[i];
    if (!needed[i] || buffers[i].empty()) return;
    GradList grads = std::move(buffers[i]);
    for (auto& [slot, hooks] : n->pre_hooks)
      if (grads[slot]) grads[slot] = hooks->run(grads[slot]);
    for (auto& [slot, weak] : n->retained) {
      auto t = weak.lock();
      if (!t || !grads[slot]) continue;
      capture_refuse("backward() sets the .grad of a tensor that retains it (use autograd::grad inside a compiled function)");
      auto& m = ensure_meta(*t);
      m.grad = task.create_graph ? grads[slot] : n->outputs[slot].type->clone(grads[slot]);
    }
    while (cap != captures.end() && cap->first < static_cast<int>(i)) ++cap;
    for (auto c = cap; c != captures.end() && c->first == static_cast<int>(i); ++c)
      captured[c->second] = grads[task.capture[c->second].input_nr];
    if (is_end(n)) return;
    if (n->is_accumulator()) {
      if (task.accumulate_into_leaves) n->apply(grads);
      return;
    }
    check_not_released(*n);
    if (std::all_of(grads.begin(), grads.end(), [](const GradPtr& g) { return !g; })) return;
    for (size_t s = 0; s < grads.size(); ++s)
      if (!grads[s]) grads[s] = n->outputs[s].type->zeros(n->outputs[s].sizes);
    auto in = n->apply(grads);
    for (size_t k = 0; k < n->next.size() && k < in.size(); ++k) add_to(n->next[k], in[k]);
    if (!task.keep_graph) {
      n->release_saved();
      n->released = true;
    }
  };
  // A leaf's accumulator (sequence number 0: last in the order) runs as soon as the last node
  // with an edge to it has run, so backward() holds no parameter's gradient until its end.
  const bool early = task.capture.empty() && task.accumulate_into_leaves;
  std::vector<int> feeds;  // per accumulator: edges to it from nodes that have not run yet
  if (early) {
    feeds.assign(nodes.size(), 0);
    for (Node* n : nodes)
      for (auto& e : n->next)
        if (e.fn && e.fn->is_accumulator()) ++feeds[e.fn->visit_index];
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    run_node(i);  // (an accumulator run early has an empty buffer now)
    if (early)
      for (auto& e : nodes[i]->next)
        if (e.fn && e.fn->is_accumulator() && --feeds[e.fn->visit_index] == 0) run_node(e.fn->visit_index);
  }
  if (!nested)
    while (!final_callbacks().empty()) {
      auto cbs = std::move(final_callbacks());
      final_callbacks().clear();
      for (auto& f : cbs) f();
    }
  return captured;
}

}  // namespace
