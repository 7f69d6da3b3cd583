#pragma once
// The autograd tape: nodes, edges, per-tensor autograd state, grad mode, forward-mode
// levels, and the backward engine. Nothing here depends on element types: the few
// operations the engine needs on gradients (add, zeros, detach) come from a per-dtype table.
//
// Every recorded op creates a Node stamped with a sequence number from a thread-local
// counter. A node's inputs were recorded before it, so running the reachable nodes in
// decreasing sequence number is a topological order: backward needs no recursion, and
// shared subexpressions are visited once. Nodes are owned by the tensors whose grad_fn they
// are (and by the nodes downstream of them), so a graph frees itself with its tensors.
#include "../core/config.hpp"
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "../core/recorder.hpp"

namespace reel::inline REEL_ABI::detail {

struct Node;
using GradPtr = std::shared_ptr<TensorImpl>;  // a gradient (or tangent); null means zero
using GradList = PoolVector<GradPtr>;

// What the engine does with gradients of one dtype (filled in by typed code, one per dtype).
struct GradType {
  ScalarType dtype;
  GradPtr (*add)(const GradPtr&, const GradPtr&);  // a + b, recorded when grad mode is on
  GradPtr (*zeros)(const Shape&);
  GradPtr (*clone)(const GradPtr&);             // a fresh copy without history
  void (*add_inplace)(const GradPtr& acc, const GradPtr& g);
  GradPtr (*reduce_to)(const GradPtr&, const Shape&);  // sums broadcast dims away
  GradPtr (*expand)(const GradPtr&, const Shape&);     // broadcasts (a recorded view)
  GradPtr (*sum)(const GradPtr&, const Shape& dims, bool keepdim);  // recorded
  GradPtr (*scale)(const GradPtr&, double);                        // recorded
  GradPtr (*contiguous)(const GradPtr&);                           // recorded
  void (*copy_into)(const GradPtr& dst, const GradPtr& src);       // not recorded
};

// Where a gradient goes: input slot `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
};

struct OutputInfo {
  const GradType* type = nullptr;
  Shape sizes;
};

// Tensor hooks, shared with the handles that can remove them.
using HookFn = std::function<GradPtr(const GradPtr&)>;
struct HookList {
  std::vector<std::pair<uint64_t, HookFn>> hooks;
  GradPtr run(GradPtr g) const {
    for (auto& [id, f] : hooks) {
      GradPtr r = f(g);
      if (r) g = std::move(r);
    }
    return g;
  }
};
inline uint64_t next_hook_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace reel::detail

namespace reel::inline REEL_ABI {
// Returned by Tensor::register_hook; remove() unregisters the hook.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<detail::HookList> l, uint64_t id) : list_(std::move(l)), id_(id) {}
  void remove() {
    if (auto l = list_.lock()) std::erase_if(l->hooks, [&](const auto& h) { return h.first == id_; });
    list_.reset();
  }

 private:
  std::weak_ptr<detail::HookList> list_;
  uint64_t id_ = 0;
};
}  // namespace reel

namespace reel::inline REEL_ABI::detail {

// Releases graph objects iteratively: destroying a long chain of nodes (each owning the
// previous one through its edges and saved tensors) must not recurse once per node.
REEL_INLINE void defer_release(std::shared_ptr<void> p);

struct Node {
  uint64_t seq = 0;
  PoolVector<Edge> next;           // one per input (fn null: that input needs no gradient)
  PoolVector<OutputInfo> outputs;  // dtype and shape of each output
  bool released = false;
  // Scratch of the backward pass that visits this node (see run_backward).
  uint64_t visit_mark = 0;
  int visit_index = -1;
  // Non-leaf tensors with retain_grad(): their grads are stored when this node runs.
  std::vector<std::pair<int, std::weak_ptr<TensorImpl>>> retained;
  // Hooks registered on non-leaf outputs of this node, run on the output's gradient.
  std::vector<std::pair<int, std::shared_ptr<HookList>>> pre_hooks;

  virtual ~Node() {
    for (auto& e : next) defer_release(std::move(e.fn));
  }
  virtual const char* name() const = 0;
  // Gradients of the inputs (one per `next` edge) from the gradients of the outputs.
  virtual GradList apply(GradList& grads) = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  virtual bool is_accumulator() const { return false; }
  // The tensors backward will read, with the versions it expects (checkpoint checks those
  // that live on outside its region).
  virtual void saved_versions(std::vector<std::pair<const TensorImpl*, uint64_t>>&) const {}
};

// Vector mode with structure: the tangents of a level whose directions are the unit vectors
// of one input (hessian, jacfwd) are mostly zeros, in a pattern that follows the input's
// dims. A structured tangent keeps that pattern instead of the [batch, *sizes] zeros: the
// directions are a multi-index k = (k_0, ..., k_m) over `comps` (the seed input's sizes), and
// the tangent is a sum of terms, each
//   t[k, s] = coef[k_free..., s] * prod over aligned q of [k_q == s_{dim_of[q]}]
// where dim_of[q] is the tangent's dim that component q equals (-1: a free component, which
// indexes the coefficient). The identity seed is one term with every component aligned and
// a coefficient of ones; elementwise ops, views and sums keep the pattern (a sum over an
// aligned dim frees its component), so a pair potential's Hessian costs about its gradient
// times the components freed, not times the directions. Each coefficient has the free
// components' sizes, then one dim per tangent dim; any of them may be 1 (a broadcast).
// Built only where the tangents are plain values (no history) and no other level is live.
struct TanTerm {
  std::vector<int> dim_of;  // per component: the tangent dim it equals, or -1 (free)
  GradPtr coef;
};
struct StructTangent {
  Shape comps;  // the directions as a multi-index (their product is the level's batch)
  Shape sizes;  // the primal's sizes
  const GradType* type = nullptr;
  std::vector<TanTerm> terms;
};
using StructPtr = std::shared_ptr<const StructTangent>;
namespace ir {
struct Graph;
}
struct GraphRecord;
// What structured tangents need (structured.hpp; record_struct_tangents in record.hpp),
// reached through this table: identity_dual (functional.hpp), the one place that makes a
// structured tangent, installs it first, so a header-only unit that never asks for one does
// not compile them. Null until then (and then no structured tangent exists).
struct StructOps {
  GradPtr (*densify)(const StructTangent&);  // the dense [batch, *sizes] form
  bool (*record)(const std::shared_ptr<const ir::Graph>&, const GraphRecord&, uint64_t level);
  StructPtr (*view)(const StructTangent&, const ViewSpec&, const Shape& out);
  StructPtr (*sum)(const StructTangent&, Shape dims, bool keepdim, double scale, const Shape& out);
};
inline std::atomic<const StructOps*> struct_ops_table{nullptr};
inline const StructOps* struct_ops() { return struct_ops_table.load(std::memory_order_acquire); }

// A tangent of one forward-mode level: a value, or a structured tangent whose value is made
// on first use.
struct Tangent {
  uint64_t level;
  GradPtr value;
  StructPtr st;
};

struct AutogradMeta : AutogradMetaBase {
  bool requires_grad = false;
  GradPtr grad;
  std::shared_ptr<Node> grad_fn;
  int output_nr = 0;
  std::weak_ptr<Node> accumulator;  // leaves: the node that accumulates into .grad
  bool retains_grad = false;
  bool is_view = false;  // a differentiable view: in-place writes to it are refused
  std::shared_ptr<HookList> hooks;  // leaves: run before accumulation
  std::shared_ptr<HookList> post_accumulate_hooks;  // leaves: run on the leaf after accumulation
  std::vector<Tangent> tangents;
};

inline AutogradMeta* meta_of(const TensorImpl& t) { return static_cast<AutogradMeta*>(t.autograd.get()); }
inline AutogradMeta& ensure_meta(TensorImpl& t) {
  if (!t.autograd) t.autograd = make_pooled<AutogradMeta>();
  return *static_cast<AutogradMeta*>(t.autograd.get());
}
inline bool impl_requires_grad(const TensorImpl& t) {
  auto* m = meta_of(t);
  return m && m->requires_grad;
}

// ------------------------------------------------------------------ grad mode
// Thread-local: two threads differentiating independent graphs do not interfere.
inline bool& grad_mode_flag() {
  thread_local bool enabled = true;
  return enabled;
}
// Whether the backward pass running on this thread accumulates into the leaves' .grad
// (backward(); autograd::grad does not).
inline bool& backward_accumulates_flag() {
  thread_local bool on = false;
  return on;
}
// The .grad of leaf t when the running backward pass will accumulate into it and nothing
// stands between (no hooks, a .grad outside any graph): a custom op may then add its
// gradient for t into it in place and return none (nn::Float8Linear's weight gradient,
// fused into a scaled_addmm_). Otherwise null.
inline GradPtr accumulable_grad(const TensorImpl& t) {
  auto* m = meta_of(t);
  if (!backward_accumulates_flag() || grad_mode_flag() || !m || !m->requires_grad || m->grad_fn || m->hooks ||
      !m->grad || impl_requires_grad(*m->grad))
    return nullptr;
  return m->grad;
}
struct GradModeGuard {
  bool prev;
  explicit GradModeGuard(bool on) : prev(grad_mode_flag()) { grad_mode_flag() = on; }
  ~GradModeGuard() { grad_mode_flag() = prev; }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
};

inline uint64_t next_sequence_nr() {
  thread_local uint64_t counter = 0;
  return ++counter;
}

// ------------------------------------------------------------------ forward-mode levels
// Levels are identified by process-unique ids, so a tangent left on a tensor by a level
// that has exited is simply ignored. While the tangent of level L is computed, level L is
// masked: the rule sees primals without their level-L tangents (no perturbation confusion),
// while tangents of the other levels propagate through it (jvp of jvp).
// A level may be batched ("vector mode"): its tangents then carry a leading dimension of
// `batch` directions, [batch, *primal sizes], and every rule propagates all of them at once.
struct LevelState {
  std::vector<uint64_t> live;    // innermost last
  std::vector<int64_t> batch;    // per live level: directions (0: an ordinary level)
  std::vector<uint64_t> masked;
};
inline LevelState& level_state() {
  thread_local LevelState s;
  return s;
}
inline bool level_active(uint64_t level) {
  auto& s = level_state();
  return std::find(s.live.begin(), s.live.end(), level) != s.live.end() &&
         std::find(s.masked.begin(), s.masked.end(), level) == s.masked.end();
}
inline bool level_live(uint64_t level) {
  auto& l = level_state().live;
  return std::find(l.begin(), l.end(), level) != l.end();
}
inline bool any_level_active() { return !level_state().live.empty(); }
// The level whose tangents a functional transform wants as plain values (hessian, jacfwd,
// hvp without create_graph): their computations record no reverse-mode history. 0: none.
inline uint64_t& plain_tangent_level() {
  thread_local uint64_t level = 0;
  return level;
}
inline bool tangents_as_values(uint64_t level) { return level == plain_tangent_level(); }
struct TangentsAsValues {
  uint64_t prev;
  TangentsAsValues(uint64_t level, bool on) : prev(plain_tangent_level()) {
    if (on) plain_tangent_level() = level;
  }
  ~TangentsAsValues() { plain_tangent_level() = prev; }
  TangentsAsValues(const TangentsAsValues&) = delete;
  TangentsAsValues& operator=(const TangentsAsValues&) = delete;
};
// Directions of a batched level (0 when unbatched or not live).
inline int64_t level_batch(uint64_t level) {
  auto& s = level_state();
  for (size_t i = 0; i < s.live.size(); ++i)
    if (s.live[i] == level) return s.batch[i];
  return 0;
}
struct LevelMask {
  explicit LevelMask(uint64_t level) { level_state().masked.push_back(level); }
  ~LevelMask() { level_state().masked.pop_back(); }
  LevelMask(const LevelMask&) = delete;
  LevelMask& operator=(const LevelMask&) = delete;
};
inline Tangent* tangent_entry(const TensorImpl& t, uint64_t level) {
  auto* m = meta_of(t);
  if (!m) return nullptr;
  for (auto& tg : m->tangents)
    if (tg.level == level && (tg.value || tg.st)) return &tg;
  return nullptr;
}
inline bool has_tangent(const TensorImpl& t, uint64_t level) { return tangent_entry(t, level) != nullptr; }
// The tangent's value (a structured tangent is made dense once, on this first use).
inline GradPtr tangent_of(const TensorImpl& t, uint64_t level) {
  Tangent* e = tangent_entry(t, level);
  if (!e) return nullptr;
  if (!e->value) e->value = struct_ops()->densify(*e->st);
  return e->value;
}
// The structured tangent, when the tangent is one and has not been made dense.
inline StructPtr struct_tangent_of(const TensorImpl& t, uint64_t level) {
  Tangent* e = tangent_entry(t, level);
  return e && !e->value ? e->st : nullptr;
}
// The largest tangent (elements) set on this thread since the last reset: how vector mode
// sizes its chunks (functional::jacfwd / hessian).
inline int64_t& tangent_peak() {
  thread_local int64_t peak = 0;
  return peak;
}
REEL_INLINE void set_tangent(TensorImpl& t, uint64_t level, GradPtr v, StructPtr st = nullptr);
inline void set_tangent(TensorImpl& t, const Tangent& x) { set_tangent(t, x.level, x.value, x.st); }
// The active levels at which any of `ins` has a tangent, outermost first.
REEL_INLINE void collect_levels(const TensorImpl* const* ins, size_t n, std::vector<uint64_t>& out);

// Does an op over these inputs need recording (reverse) or tangents (forward)?
inline bool autograd_needed(const TensorImpl* const* ins, size_t n) {
  bool any_meta = false;
  for (size_t i = 0; i < n && !any_meta; ++i) any_meta = ins[i] && ins[i]->autograd;
  if (!any_meta) return false;
  if (grad_mode_flag())
    for (size_t i = 0; i < n; ++i)
      if (ins[i] && impl_requires_grad(*ins[i])) return true;
  if (!any_level_active()) return false;
  std::vector<uint64_t> levels;
  collect_levels(ins, n, levels);
  return !levels.empty();
}

// ------------------------------------------------------------------ the engine
// Callbacks queued while a backward pass runs on this thread (queue_callback), run in order
// when the outermost pass ends (PyTorch's Variable._execution_engine.queue_callback).
inline std::vector<std::function<void()>>& final_callbacks() {
  thread_local std::vector<std::function<void()>> cbs;
  return cbs;
}
// Backward passes running on this thread (a node may run one of its own: checkpoint).
inline int& backward_depth() {
  thread_local int d = 0;
  return d;
}

struct BackwardTask {
  std::vector<Edge> roots;
  GradList root_grads;
  bool keep_graph = false;
  bool create_graph = false;
  bool accumulate_into_leaves = true;
  std::vector<Edge> capture;  // autograd::grad: gradients arriving at these slots are returned
  // The captured nodes are where the graph ends: they are neither run nor looked past (a
  // checkpointed region's backward, run inside the backward pass that reached it).
  bool prune_at_captures = false;
};

REEL_INLINE void check_not_released(const Node& n);

// Nodes carry a mark of the backward pass visiting them, so collecting and indexing the
// graph needs no hash table (one allocation per node would dominate small graphs' cost).
// Two threads may differentiate independent graphs at once; one graph is differentiated by
// one thread at a time. A node may run a backward pass of its own (checkpoint recomputes its
// region and differentiates it): the nested pass puts back the marks it changed.
REEL_INLINE GradList run_backward(BackwardTask& task);

}  // namespace reel::detail

#ifndef REEL_COMPILED_LIB
#include "graph-inl.hpp"
#endif
