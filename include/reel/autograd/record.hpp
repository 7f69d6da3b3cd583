#pragma once
// Recording ops on the tape, for both modes:
//   - fused expressions become an IrFunction node holding the expression's graph (ir.hpp);
//     its backward builds the adjoint graph from the ops' rules and evaluates it fused;
//   - other ops (reductions, matmul, cat, sort, ...) give a backward and a forward rule
//     written with reel ops (record_fn), so they too can be differentiated again;
//   - views, clone, sum and mean use type-erased nodes shared by every dtype.
// Forward mode: after an op runs, the tangent of each active level is computed from the
// inputs' tangents by the same rules, with that level masked (see graph.hpp).
#include "../core/config.hpp"
#include <new>

#include "../core/tensor.hpp"
#include "describe.hpp"
#include "ir_program.hpp"
#include "structured.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// Defining REEL_NO_AUTOGRAD compiles recording out (nothing requires grad then): for
// translation units that never differentiate and want the shortest compile time.
#ifdef REEL_NO_AUTOGRAD
inline constexpr bool autograd_enabled_v = false;
#else
inline constexpr bool autograd_enabled_v = true;
#endif
// CPU: floating point and complex; CUDA: floating point (its kernels have no complex math yet).
template <class T, class D>
inline constexpr bool autograd_type_v =
    autograd_enabled_v && Backend<D>::has_data && ir::device_grad_dtype_v<T, D>;

// A fresh contiguous tensor of a graph node's type, on the graph's device.
inline GradPtr make_impl(const ir::TypeInfo& type, const Shape& sizes) {
  auto p = make_pooled<TensorImpl>();
  p->strides = contiguous_strides(sizes);
  p->sizes = sizes;
  p->storage = type.device->make_storage(static_cast<size_t>(numel_of(sizes)) * type.size);
  p->dtype = type.dtype;
  p->device = type.device->type;
  return p;
}
// The same view of the same storage, without autograd state.
inline GradPtr plain_alias(const TensorImpl& t) {
  auto p = make_pooled<TensorImpl>(t);
  p->autograd.reset();
  return p;
}

inline void set_history(TensorImpl& out, const std::shared_ptr<Node>& node, int nr) {
  auto& m = ensure_meta(out);
  m.requires_grad = true;
  m.grad_fn = node;
  m.output_nr = nr;
}

// Accumulates into a leaf's .grad. Without create_graph the stored gradient is a fresh
// tensor owned by the leaf (later backward calls add into it in place).
struct AccumulateGrad : Node {
  GradPtr leaf;
  const GradType* type = nullptr;
  const char* name() const override { return "AccumulateGrad"; }
  bool is_accumulator() const override { return true; }
  GradList apply(GradList& grads) override {
    capture_refuse("backward() accumulates into .grad (use autograd::grad inside a compiled function)");
    auto& m = ensure_meta(*leaf);
    GradPtr g = grads[0];
    if (m.hooks) g = m.hooks->run(g);
    if (grad_mode_flag()) {
      m.grad = m.grad ? type->add(m.grad, g) : g;
    } else if (!m.grad) {
      m.grad = type->clone(g);
    } else if (impl_requires_grad(*m.grad)) {
      m.grad = type->clone(type->add(m.grad, g));
    } else {
      type->add_inplace(m.grad, g);
    }
    if (m.post_accumulate_hooks) m.post_accumulate_hooks->run(leaf);
    return {};
  }
};

// The edge a gradient for tensor t should flow along (none if t does not require grad).
inline Edge edge_of(const GradPtr& t, const GradType* type) {
  if (!t || !type) return {};
  auto* m = meta_of(*t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  auto acc = m->accumulator.lock();
  if (!acc) {
    auto a = make_pooled<AccumulateGrad>();
    a->leaf = t;
    a->type = type;
    a->outputs.push_back({type, t->sizes});
    a->seq = 0;  // leaves run after every node that feeds them
    m->accumulator = a;
    acc = std::move(a);
  }
  return {acc, 0};
}

inline void check_version(const TensorImpl& t, uint64_t saved, const char* op) {
  uint64_t now = t.storage->version.load(std::memory_order_relaxed);
  REEL_CHECK(now == saved, error, "one of the variables needed for gradient computation has been modified by an ",
             "inplace operation: a tensor saved by ", op, " is at version ", now, "; expected version ", saved,
             " instead. Hint: clone the tensor before modifying it in place, or modify it after backward.");
}
inline uint64_t version_of(const TensorImpl& t) { return t.storage->version.load(std::memory_order_relaxed); }

// ------------------------------------------------------------------ graphs as ops
REEL_INLINE std::vector<char> live_nodes(const ir::Graph& g, std::span<const int> roots);
// Pointers to a few tensors, without a heap allocation in the common case.
struct ImplList {
  const TensorImpl* small[kMaxOperands];
  std::vector<const TensorImpl*> big;
  const TensorImpl** p;
  size_t n;
  explicit ImplList(size_t count) : p(small), n(count) {
    if (count > static_cast<size_t>(kMaxOperands)) {
      big.resize(count);
      p = big.data();
    }
  }
};

// The graph being recorded is built in a per-thread scratch graph (no allocation once warm),
// and interned when recorded.
inline ir::Graph& scratch_graph() {
  thread_local ir::Graph g;
  g.nodes.clear();
  g.leaves.clear();
  g.leaf_node.clear();
  g.cache.reset();
  return g;
}
// A list of at most kMaxOperands items, stored inline.
template <class T>
struct FixedList {
  alignas(T) unsigned char buf[sizeof(T) * kMaxOperands];
  size_t n = 0;
  FixedList() = default;
  FixedList(const FixedList&) = delete;
  FixedList& operator=(const FixedList&) = delete;
  FixedList(FixedList&& o) noexcept {
    for (size_t i = 0; i < o.n; ++i) push_back(std::move(o[i]));
  }
  ~FixedList() {
    for (size_t i = 0; i < n; ++i) (*this)[i].~T();
  }
  T* data() { return std::launder(reinterpret_cast<T*>(buf)); }
  const T* data() const { return std::launder(reinterpret_cast<const T*>(buf)); }
  void push_back(T v) {
    REEL_CHECK(n < static_cast<size_t>(kMaxOperands), not_implemented_error, "autograd: more than ", kMaxOperands - 1,
               " outputs of one expression");
    new (buf + n * sizeof(T)) T(std::move(v));
    ++n;
  }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  operator std::span<const T>() const { return {data(), n}; }
};
struct GraphRecord {
  ir::Graph* graph = nullptr;       // gets the output/gradient placeholder leaves
  PoolVector<SavedTensor> inputs;  // one per leaf slot of the graph as built
  FixedList<int> roots;
  FixedList<GradPtr> outputs;
};
void record_graph(GraphRecord rec);

// Records out = the expression `build` writes into a graph, with the leaves p took before
// (Recorder::finish's part that no expression type instantiates again).
REEL_INLINE void finish_record(PendingRecord& p, const GradPtr& out, BuildIr build, const void* e);

// ir::evaluate as a kept kernel of a capture (capture.hpp): the step owns a copy of the
// graph (g may be the per-thread scratch graph) and the tensors.
REEL_INLINE void capture_ir(CaptureTrace& t, const ir::Graph& g, const GradList& leaves, std::span<const int> roots,
                       std::span<const GradPtr> outs, const std::vector<char>& live);
// ir_apply reaches capture_ir through this pointer, which autograd::compile (the one maker of a
// capture) installs first: a header-only unit that never compiles a function does not compile it.
inline std::atomic<decltype(&capture_ir)> capture_ir_fn{nullptr};
inline void install_capture_ir() { capture_ir_fn.store(&capture_ir, std::memory_order_release); }

// Evaluates the roots of g (fused, one pass) and records the result for autograd.
// A root that is a leaf of the output's shape is returned as that tensor, unevaluated.
REEL_INLINE GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots,
                                     const std::vector<char>& live);
REEL_INLINE GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots);

// Backward of a recorded graph: the adjoint graph, built from the ops' vjp rules (once per
// graph and set of inputs needing gradients) and evaluated fused.
struct IrFunction : Node {
  struct Out {
    int root, value_slot, grad_slot;
    SavedTensor value;  // the output, without history (no reference cycle)
  };
  std::shared_ptr<const ir::Graph> graph;
  PoolVector<SavedTensor> inputs;  // one per input leaf slot; null where backward needs no value
  PoolVector<Shape> input_sizes;
  PoolVector<Out> outs;
  std::weak_ptr<Node> self;
  ~IrFunction() override {
    for (auto& i : inputs) defer_release(std::move(i.t));
  }
  const char* name() const override { return "FusedExpressionBackward"; }
  void saved_versions(std::vector<std::pair<const TensorImpl*, uint64_t>>& out) const override {
    for (const auto& i : inputs)
      if (i.t) out.push_back({i.t.get(), i.version});
  }
  void release_saved() override {
    inputs.clear();
    outs.clear();
  }

  std::shared_ptr<const ir::BackwardPlan> build_plan(uint64_t mask, bool use_values) const {
    const ir::Graph& F = *graph;
    const size_t n_in = next.size();
    auto plan = std::make_shared<ir::BackwardPlan>();
    plan->needs = mask;
    plan->use_values = use_values;
    auto B = std::make_shared<ir::Graph>(F);
    B->cache.reset();
    ir::Builder b{*B};
    std::vector<int> self_id(F.nodes.size());
    for (size_t i = 0; i < self_id.size(); ++i) self_id[i] = static_cast<int>(i);
    std::vector<int> adj(F.nodes.size(), -1);
    for (const auto& o : outs) {
      // Rules use the saved outputs (exp, tanh, ...) unless a forward-mode level is active:
      // then they are recomputed, so their tangents propagate too.
      if (use_values) self_id[o.root] = F.leaf_node[o.value_slot];
      adj[o.root] = F.leaf_node[o.grad_slot];
    }
    std::vector<char> needs(F.nodes.size(), 0);
    for (size_t i = 0; i < F.nodes.size(); ++i) {
      const auto& n = F.nodes[i];
      if (n.kind == ir::Kind::Leaf)
        needs[i] = n.leaf < static_cast<int>(n_in) && next[n.leaf].fn != nullptr;
      else if (n.kind == ir::Kind::Op)
        for (int k = 0; k < n.nargs; ++k) needs[i] = needs[i] || needs[n.args[k]];
    }
    for (size_t i = F.nodes.size(); i-- > 0;) {
      const auto& n = F.nodes[i];
      if (adj[i] < 0 || n.kind != ir::Kind::Op || !needs[i] || !n.op->vjp) continue;
      int contrib[3] = {-1, -1, -1};
      bool need[3] = {false, false, false};
      for (int k = 0; k < n.nargs; ++k) need[k] = needs[n.args[k]];
      n.op->vjp(b, n, n.args, self_id[i], adj[i], contrib, need);
      for (int k = 0; k < n.nargs; ++k) {
        if (contrib[k] < 0) continue;
        int a = n.args[k];
        adj[a] = adj[a] < 0 ? contrib[k] : F.nodes[a].type->add(b, adj[a], contrib[k]);
      }
    }
    // An input the outputs depend on only through piecewise-constant ops (floor, sign, ...:
    // no rule, a floating result) gets a zero gradient, as in PyTorch; one they reach only
    // through a bool or integer result (x > 0, a cast to int) gets none.
    std::vector<char> reached(F.nodes.size(), 0);
    for (const auto& o : outs) reached[o.root] = 1;
    for (size_t i = F.nodes.size(); i-- > 0;) {
      const auto& n = F.nodes[i];
      if (!reached[i] || n.kind != ir::Kind::Op || !needs[i] || !n.type->grad) continue;
      for (int k = 0; k < n.nargs; ++k) reached[n.args[k]] = 1;
    }
    plan->roots.assign(n_in, -1);
    plan->zero.assign(n_in, 0);
    for (size_t k = 0; k < n_in; ++k)
      if (next[k].fn) {
        plan->roots[k] = adj[F.leaf_node[k]];
        plan->zero[k] = plan->roots[k] < 0 && reached[F.leaf_node[k]];
      }
    plan->live = live_nodes(*B, plan->roots);
    plan->graph = std::move(B);
    return plan;
  }
  std::shared_ptr<const ir::BackwardPlan> plan_for(bool use_values) const {
    const size_t n_in = next.size();
    if (n_in > 64 || !graph->cache) return build_plan(0, use_values);
    uint64_t mask = 0;
    for (size_t k = 0; k < n_in; ++k)
      if (next[k].fn) mask |= uint64_t(1) << k;
    // the plan this thread used last (a loop asks for the same one again and again)
    thread_local const ir::Graph* last_graph = nullptr;
    thread_local std::shared_ptr<const ir::BackwardPlan> last_plan;
    if (last_graph == graph.get() && last_plan->needs == mask && last_plan->use_values == use_values) return last_plan;
    auto remember = [&](std::shared_ptr<const ir::BackwardPlan> p) {
      last_graph = graph.get();
      last_plan = p;
      return p;
    };
    auto& c = *graph->cache;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      for (auto& p : c.plans)
        if (p->needs == mask && p->use_values == use_values) return remember(p);
    }
    auto p = build_plan(mask, use_values);
    std::lock_guard<std::mutex> lock(c.mu);
    c.plans.push_back(p);
    return remember(p);
  }

  GradList apply(GradList& grads) override {
    const ir::Graph& F = *graph;
    const size_t n_in = next.size();
    auto plan = plan_for(!any_level_active());
    for (size_t k = 0; k < n_in && !plan->use_values; ++k)
      if (plan->live[F.leaf_node[k]] && !inputs[k].t) plan = plan_for(true);  // recorded without its inputs
    const auto& live = plan->live;
    // saved tensors the adjoint graph reads must be unchanged
    GradList leaves(plan->graph->leaves.size());
    for (size_t k = 0; k < n_in; ++k) {
      if (!live[F.leaf_node[k]]) continue;
      check_version(*inputs[k].t, inputs[k].version, "a fused elementwise expression");
      leaves[k] = inputs[k].t;
    }
    for (size_t r = 0; r < outs.size(); ++r) {
      const Out& o = outs[r];
      if (live[F.leaf_node[o.value_slot]]) {
        REEL_CHECK(o.value.t, error, "autograd: internal error: an output needed by backward was not saved");
        check_version(*o.value.t, o.value.version, "a fused elementwise expression (its result)");
        auto v = plain_alias(*o.value.t);
        if (grad_mode_flag()) set_history(*v, self.lock(), static_cast<int>(r));
        leaves[o.value_slot] = v;
      }
      leaves[o.grad_slot] = grads[r];
    }
    auto res = ir_apply(*plan->graph, std::move(leaves), plan->roots, live);
    for (size_t k = 0; k < n_in; ++k) {
      if (res[k] && res[k]->sizes != input_sizes[k]) res[k] = F.leaves[k]->grad->reduce_to(res[k], input_sizes[k]);
      if (plan->zero[k]) res[k] = F.leaves[k]->grad->zeros(input_sizes[k]);
    }
    return res;
  }
};

REEL_INLINE GradPtr align_batched(const GradPtr& t, size_t rank, const GradType* type);

// Vector mode: in a tangent graph, the parts that depend on no tangent (the derivative
// factors, pow(x, n - 1) and the like) are the same for every direction. Each such part that
// feeds the tangent computation is evaluated once, at its own (unbatched) shape, and becomes a
// leaf, so the fused pass over [batch, *sizes] does only the tangent arithmetic.
REEL_INLINE void hoist_primal_parts(ir::Graph& T, GradList& leaves, std::span<const int> roots, size_t first_tangent_slot);

// The tangent graph of F for the input slots marked in `with`: F's nodes, one leaf per marked
// slot (its tangent; the caller appends their values in slot order after F's leaves), and
// each op's forward rule. Returns the roots' tangent nodes (-1: no tangent).
REEL_INLINE std::vector<int> build_tangent_graph(ir::Graph& T, const ir::Graph& F, const std::vector<char>& with,
                                            std::span<const int> roots);

// Vector mode with structure (structured.hpp): the tangent graph is linear in the tangents,
// so each input's tangent goes through it alone (the others zero), one term at a time, and
// each output term keeps its input term's pattern (dims shifted by broadcasting). Returns
// false (nothing done) when no input has a structured tangent.
REEL_INLINE bool record_struct_tangents(const std::shared_ptr<const ir::Graph>& F, const GraphRecord& rec, uint64_t level);
// Installs struct_ops() (graph.hpp): before the first structured tangent is made.
REEL_INLINE void install_struct_ops();

REEL_INLINE void record_graph(GraphRecord rec);

// ------------------------------------------------------------------ typed entry points
template <class X> bool any_leaf_meta(const X&) { return false; }
template <class T, class D> bool any_leaf_meta(const Tensor<T, D>& t) { return t.impl().autograd != nullptr; }
template <class Op, class... A> bool any_leaf_meta(const Expr<Op, A...>& e) {
  return std::apply([&](const auto&... a) { return (false || ... || any_leaf_meta(a)); }, e.args);
}
// An expression's tensor leaves, and whether evaluating it records (a leaf needs a gradient
// or carries a tangent).
struct ExprLeaves {
  const GradPtr* ptr[kMaxOperands];
  const TensorImpl* impl[kMaxOperands];
  size_t n = 0;
};
template <class E> bool expr_records(const E& e, ExprLeaves& l) {
  if (!any_leaf_meta(e)) return false;
  collect_leaf_impls(e, l.ptr, l.n);
  for (size_t k = 0; k < l.n; ++k) l.impl[k] = l.ptr[k]->get();
  return autograd_needed(l.impl, l.n);
}
template <class E> bool expr_records(const E& e) {
  ExprLeaves l;
  return expr_records(e, l);
}
// The leaves' versions before an expression that records is evaluated (Recorder::begin).
REEL_INLINE PendingRecord pending_record(const ExprLeaves& l);

// Sums a gradient over the dimensions that broadcasting added or expanded.
template <class T, class D>
Tensor<T, D> reduce_to(const Tensor<T, D>& g, const Shape& sizes) {
  if (g.sizes() == sizes) return g;
  Shape dims;
  int64_t off = g.dim() - static_cast<int64_t>(sizes.size());
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < off || (sizes[d - off] == 1 && g.size(d) != 1)) dims.push_back(d);
  if (dims.empty()) return g.reshape(sizes);
  return sum(g, dims, true).reshape(sizes);
}

// ------------------------------------------------------------------ type-erased ops
// Views, clone, sum and mean are recorded by non-template nodes that reach the element type
// only through the GradType table: one copy of this code serves every dtype, which keeps
// the compile time of programs that use several dtypes down.
struct ErasedNode : Node {
  const GradType* type = nullptr;
  const char* op_name = "";
  const char* name() const override { return op_name; }
  virtual GradPtr backward(const GradPtr& g) const = 0;
  // The output's tangent; batch > 0: t holds that many directions (a leading dim).
  virtual GradPtr forward(const GradPtr& t, int64_t batch) const = 0;
  // The output's structured tangent (structured.hpp); null: the op needs the dense one.
  virtual StructPtr forward_struct(const StructTangent&, const Shape& /*out_sizes*/) const { return nullptr; }
  GradList apply(GradList& grads) override { return {backward(grads[0])}; }
};

// Records out = op(in) (one input, one output) for both modes.
REEL_INLINE GradPtr record_unary(const GradPtr& in, GradPtr out, std::shared_ptr<ErasedNode> node);

GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type);
GradPtr embed(const GradPtr& g, const Shape& in_sizes, const ViewSpec& v, const GradType* type);

// A view's gradient: scattered into zeros shaped like its input (select, slice), reshaped or
// permuted back, or summed over the expanded dims.
REEL_INLINE GradPtr view_backward(const GradPtr& g, const ViewSpec& v, const Shape& in_sizes, const GradType* type);
// Vector mode: view v applied to each direction of a batched tangent (dims shift by one).
REEL_INLINE ViewSpec batched_spec(ViewSpec v, int64_t batch);
struct ViewNode final : ErasedNode {
  ViewSpec spec;
  Shape in_sizes;
  GradPtr backward(const GradPtr& g) const override { return view_backward(g, spec, in_sizes, type); }
  GradPtr forward(const GradPtr& t, int64_t batch) const override {
    if (!t) return nullptr;
    if (!batch) return apply_view(t, spec, type);
    if (spec.kind == ViewSpec::Expand)  // new leading dims go after the directions
      return apply_view(align_batched(t, spec.shape.size(), type), batched_spec(spec, batch), type);
    return apply_view(t, batched_spec(spec, batch), type);
  }
  StructPtr forward_struct(const StructTangent& s, const Shape& out) const override {
    return struct_ops()->view(s, spec, out);
  }
};
struct EmbedNode final : ErasedNode {
  ViewSpec spec;
  Shape out_sizes;
  GradPtr backward(const GradPtr& g) const override { return apply_view(g, spec, type); }
  GradPtr forward(const GradPtr& t, int64_t batch) const override {
    if (!t) return nullptr;
    if (!batch) return embed(t, out_sizes, spec, type);
    Shape s = out_sizes;
    s.insert(0, batch);
    return embed(t, s, batched_spec(spec, batch), type);
  }
};
struct CloneNode final : ErasedNode {
  GradPtr backward(const GradPtr& g) const override { return g; }
  GradPtr forward(const GradPtr& t, int64_t) const override { return t; }
  StructPtr forward_struct(const StructTangent& s, const Shape&) const override {
    return std::make_shared<const StructTangent>(s);
  }
};

REEL_INLINE GradPtr view_with(const TensorImpl& t, Geometry g);
// Records `out` (already made) as view `spec` of `in`.
REEL_INLINE GradPtr record_view_erased(const GradPtr& in, GradPtr out, ViewSpec spec, const GradType* type);
REEL_INLINE GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type);
// A batched tangent [B, *S] viewed as [B, 1, ..., 1, *S] with `rank` dims after B, so the
// directions stay first when it broadcasts against tensors of a higher rank.
REEL_INLINE GradPtr align_batched(const GradPtr& t, size_t rank, const GradType* type);
REEL_INLINE GradPtr embed(const GradPtr& g, const Shape& in_sizes, const ViewSpec& v, const GradType* type);
REEL_INLINE GradPtr record_clone_erased(const GradPtr& in, GradPtr out, const GradType* type);

// sum (scale 1) and mean (scale 1/n) over dims: the gradient is broadcast back.
struct SumNode final : ErasedNode {
  Shape dims, in_sizes, keep_sizes;
  bool keepdim = false;
  double scale = 1;
  GradPtr backward(const GradPtr& g) const override {
    GradPtr s = scale == 1 ? g : type->scale(g, scale);
    GradPtr k = apply_view(s, {ViewSpec::Reshape, 0, 0, 0, 0, keep_sizes}, type);
    return apply_view(k, {ViewSpec::Expand, 0, 0, 0, 0, in_sizes}, type);
  }
  GradPtr forward(const GradPtr& t, int64_t batch) const override {
    if (!t) return nullptr;
    GradPtr s;
    if (batch && in_sizes.size() == 0) {  // a 0-d input: nothing to sum in any direction
      s = t;
    } else if (batch) {  // the same dims of every direction
      const int64_t nd = in_sizes.size();
      Shape d;
      if (dims.empty())
        for (int64_t i = 0; i < nd; ++i) d.push_back(i + 1);
      else
        for (int64_t i : dims) d.push_back(wrap_dim(i, nd, "sum") + 1);
      s = type->sum(t, d, keepdim);
    } else {
      s = type->sum(t, dims, keepdim);
    }
    return scale == 1 ? s : type->scale(s, scale);
  }
  StructPtr forward_struct(const StructTangent& s, const Shape& out) const override {
    return struct_ops()->sum(s, dims, keepdim, scale, out);
  }
};
REEL_INLINE GradPtr record_sum(const GradPtr& in, GradPtr out, const Shape& dims, const Shape& keep_sizes, bool keepdim,
                          double scale, const GradType* type);

template <class T, class D> const GradType* grad_type_ptr() {
  if constexpr (autograd_type_v<T, D>)
    return ir::grad_type_of<T, D>();
  else
    return nullptr;
}
#if !defined(REEL_NO_AUTOGRAD)
// Autograd installed in the core (core/recorder.hpp): what views, clones, evaluated
// expressions and in-place writes record (nothing for element types without gradients).
template <class T, class D>
struct Recorder {
  static Tensor<T, D> view(const Tensor<T, D>& in, Tensor<T, D> out, const ViewSpec& spec) {
    if constexpr (autograd_type_v<T, D>)
      return Tensor<T, D>(record_view_erased(in.impl_ptr(), out.impl_ptr(), spec, grad_type_ptr<T, D>()));
    return out;
  }
  static Tensor<T, D> as_strided(const Tensor<T, D>& in, Tensor<T, D> out) {
    REEL_CHECK(!(grad_mode_flag() && impl_requires_grad(in.impl())), not_implemented_error,
               "as_strided: autograd through as_strided is not supported; use the named views (select, slice, view, ",
               "permute, expand, ...) or detach() first");
    return out;
  }
  static Tensor<T, D> clone(const Tensor<T, D>& in, Tensor<T, D> out) {
    if constexpr (autograd_type_v<T, D>)
      return Tensor<T, D>(record_clone_erased(in.impl_ptr(), out.impl_ptr(), grad_type_ptr<T, D>()));
    return out;
  }
  template <class E>
  static PendingRecord begin(const E& e) {
    if constexpr (autograd_type_v<T, D>) {
      ExprLeaves l;
      if (expr_records(e, l)) return pending_record(l);
    }
    return {};
  }
  template <class E>
  static void finish(PendingRecord& p, const Tensor<T, D>& out, const E& e) {
    if constexpr (autograd_type_v<T, D>) {
      if (p.active) finish_record(p, out.impl_ptr(), &build_ir<T, D, E>, &e);
    }
  }
  template <class E>
  static void record(const Tensor<T, D>& out, const E& e) {
    if constexpr (autograd_type_v<T, D>) {
      auto p = begin(e);
      finish(p, out, e);
    }
  }
  template <class E>  // a kept kernel's description for fusion (describe.hpp)
  static void describe(CaptureTrace& t, const Tensor<T, D>& out, const E& e, const Shape& s, std::vector<char> r,
                       bool mean) { describe_kernel(t, out, e, s, std::move(r), mean); }
  // In-place writes: refused where the result would silently lose gradient.
  static void check_inplace(const Tensor<T, D>& out, bool records) {
    if constexpr (autograd_type_v<T, D>) {
      auto* m = meta_of(out.impl());
      if (grad_mode_flag() && m && m->requires_grad && !m->grad_fn)
        raise<error>("a leaf tensor that requires grad is being used in an in-place operation; do it under ",
                     "autograd::no_grad, or on a clone");
      if (!records && !(m && m->grad_fn)) return;
      bool partial = out.storage_offset() != 0 || !out.is_contiguous() ||
                     static_cast<size_t>(out.numel()) * sizeof(T) < out.impl().storage->nbytes;
      REEL_CHECK(!(m && m->is_view) && !(records && partial), not_implemented_error,
                 "autograd: an in-place write into a view (part of another tensor's storage) is not supported when ",
                 "either side requires grad or has a tangent; build the result out of place (cat, stack, where) instead");
      if (!records && m) {  // overwritten by a constant: no history any more
        m->grad_fn.reset();
        m->requires_grad = false;
        m->tangents.clear();
      }
    }
  }
};
#endif

// ------------------------------------------------------------------ the engine's entry point
struct GradRequest {
  GradList outputs, grad_outputs, inputs;
  std::vector<const GradType*> output_types, input_types;
  bool retain_graph = false, create_graph = false, allow_unused = false, accumulate = true;
};
REEL_INLINE GradList run_grad(GradRequest& q);

}  // namespace detail
}  // namespace reel

#include "grad_type.hpp"
#include "record_fn.hpp"
#include "tensor_members.hpp"

#ifndef REEL_COMPILED_LIB
#include "record-inl.hpp"
#endif
