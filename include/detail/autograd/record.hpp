#pragma once
// Recording ops on the tape, for both modes:
//   - fused expressions become an IrFunction node holding the expression's graph (ir.hpp);
//     its backward builds the adjoint graph from the ops' rules and evaluates it fused;
//   - other ops (reductions, matmul, cat, sort, ...) give a backward and a forward rule
//     written with reel ops (record_fn), so they too can be differentiated again;
//   - views, clone, sum and mean use type-erased nodes shared by every dtype.
// Forward mode: after an op runs, the tangent of each active level is computed from the
// inputs' tangents by the same rules, with that level masked (see graph.hpp).
#include <new>

#include "ir_program.hpp"
#include "structured.hpp"

namespace reel {
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
    autograd_enabled_v && (std::is_same_v<D, CPU> || std::is_same_v<D, CUDA>) && ir::device_grad_dtype_v<T, D>;

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
inline std::vector<char> live_nodes(const ir::Graph& g, std::span<const int> roots) {
  std::vector<char> live;
  ir::mark_live(g, roots, live);
  return live;
}
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

// ir::evaluate as a kept kernel of a capture (capture.hpp): the step owns a copy of the
// graph (g may be the per-thread scratch graph) and the tensors.
inline void capture_ir(CaptureTrace& t, const ir::Graph& g, const GradList& leaves, std::span<const int> roots,
                       std::span<const GradPtr> outs, const std::vector<char>& live) {
  auto gc = std::make_shared<ir::Graph>();
  gc->nodes = g.nodes;
  gc->leaves = g.leaves;
  gc->leaf_node = g.leaf_node;
  std::vector<GradPtr> in(leaves.begin(), leaves.end()), out(outs.begin(), outs.end());
  std::vector<int> rs(roots.begin(), roots.end());
  std::vector<const Storage*> writes, reads;
  for (const auto& o : out) writes.push_back(o->storage.get());
  for (const auto& i : in)
    if (i) reads.push_back(i->storage.get());
  t.record(writes, std::move(reads), [gc, in, out, rs, live] {
    ImplList lp(in.size());
    for (size_t k = 0; k < in.size(); ++k) lp.p[k] = in[k].get();
    TensorImpl* op[kMaxOperands];
    for (size_t r = 0; r < out.size(); ++r) op[r] = out[r].get();
    ir::evaluate(*gc, std::span<const TensorImpl* const>(lp.p, lp.n), rs, std::span<TensorImpl* const>(op, out.size()),
                 live);
  });
}

// Evaluates the roots of g (fused, one pass) and records the result for autograd.
// A root that is a leaf of the output's shape is returned as that tensor, unevaluated.
inline GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots,
                                     const std::vector<char>& live) {
  Shape S;
  bool first = true;
  for (size_t k = 0; k < g.leaves.size(); ++k) {
    if (!live[g.leaf_node[k]]) continue;
    const Shape& s = leaves[k]->sizes;
    S = first ? s : (S == s ? S : broadcast_shapes(S, s));
    first = false;
  }
  GradList res(roots.size());
  GraphRecord rec;
  for (size_t r = 0; r < roots.size(); ++r) {
    int id = roots[r];
    if (id < 0) continue;
    const ir::IrNode& n = g.nodes[id];
    if (n.kind == ir::Kind::Leaf && leaves[n.leaf]->sizes == S) {
      res[r] = leaves[n.leaf];
      continue;
    }
    res[r] = make_impl(*n.type, S);
    rec.roots.push_back(id);
    rec.outputs.push_back(res[r]);
  }
  if (rec.roots.empty()) return res;
  ImplList lp(leaves.size());
  for (size_t k = 0; k < leaves.size(); ++k) lp.p[k] = leaves[k].get();
  TensorImpl* op[kMaxOperands];
  for (size_t r = 0; r < rec.outputs.size(); ++r) op[r] = rec.outputs[r].get();
  const bool all = rec.roots.size() == roots.size();  // `live` is for all roots
  if (CaptureTrace* t = capturing())
    capture_ir(*t, g, leaves, rec.roots, rec.outputs, all ? live : live_nodes(g, rec.roots));
  else
    ir::evaluate(g, std::span<const TensorImpl* const>(lp.p, lp.n), rec.roots,
                 std::span<TensorImpl* const>(op, rec.outputs.size()), all ? live : live_nodes(g, rec.roots));
  if (autograd_needed(lp.p, lp.n)) {
    rec.inputs.reserve(leaves.size());
    for (auto& t : leaves) {
      uint64_t v = t ? version_of(*t) : 0;
      rec.inputs.push_back({std::move(t), v});
    }
    ir::Graph& sg = scratch_graph();
    sg.nodes = g.nodes;
    sg.leaves = g.leaves;
    sg.leaf_node = g.leaf_node;
    rec.graph = &sg;
    record_graph(std::move(rec));
  }
  return res;
}
inline GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots) {
  return ir_apply(g, std::move(leaves), roots, live_nodes(g, roots));
}

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
    plan->roots.assign(n_in, -1);
    for (size_t k = 0; k < n_in; ++k)
      if (next[k].fn) plan->roots[k] = adj[F.leaf_node[k]];
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
    for (size_t k = 0; k < n_in; ++k)
      if (res[k] && res[k]->sizes != input_sizes[k]) res[k] = F.leaves[k]->grad->reduce_to(res[k], input_sizes[k]);
    return res;
  }
};

inline GradPtr align_batched(const GradPtr& t, size_t rank, const GradType* type);

// Vector mode: in a tangent graph, the parts that depend on no tangent (the derivative
// factors, pow(x, n - 1) and the like) are the same for every direction. Each such part that
// feeds the tangent computation is evaluated once, at its own (unbatched) shape, and becomes a
// leaf, so the fused pass over [batch, *sizes] does only the tangent arithmetic.
inline void hoist_primal_parts(ir::Graph& T, GradList& leaves, std::span<const int> roots, size_t first_tangent_slot) {
  const size_t n = T.nodes.size();
  std::vector<char> dep(n, 0), hoist(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto& nd = T.nodes[i];
    if (nd.kind == ir::Kind::Leaf) dep[i] = static_cast<size_t>(nd.leaf) >= first_tangent_slot;
    for (int k = 0; k < nd.nargs; ++k) dep[i] = dep[i] || dep[nd.args[k]];
  }
  auto live = live_nodes(T, roots);
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const auto& nd = T.nodes[i];
    if (!live[i] || !dep[i] || nd.kind != ir::Kind::Op) continue;
    for (int k = 0; k < nd.nargs; ++k) {
      int a = nd.args[k];
      if (!dep[a] && T.nodes[a].kind == ir::Kind::Op) {
        hoist[a] = 1;
        any = true;
      }
    }
  }
  if (!any) return;
  std::vector<std::pair<int, GradPtr>> values;
  for (size_t i = 0; i < n; ++i)
    if (hoist[i]) {
      int root[1] = {static_cast<int>(i)};
      values.push_back({root[0], ir_apply(T, leaves, root)[0]});
    }
  for (auto& [i, v] : values) {
    auto& nd = T.nodes[i];
    nd.kind = ir::Kind::Leaf;
    nd.nargs = 0;
    nd.op = nullptr;
    nd.args[0] = nd.args[1] = nd.args[2] = -1;
    std::memset(nd.data, 0, sizeof nd.data);
    nd.leaf = static_cast<int32_t>(T.leaves.size());
    T.leaves.push_back(nd.type);
    T.leaf_node.push_back(i);
    leaves.push_back(std::move(v));
  }
}

// The tangent graph of F for the input slots marked in `with`: F's nodes, one leaf per marked
// slot (its tangent; the caller appends their values in slot order after F's leaves), and
// each op's forward rule. Returns the roots' tangent nodes (-1: no tangent).
inline std::vector<int> build_tangent_graph(ir::Graph& T, const ir::Graph& F, const std::vector<char>& with,
                                            std::span<const int> roots) {
  ir::Builder tb{T};
  std::vector<int> tan(F.nodes.size(), -1);
  for (size_t k = 0; k < with.size(); ++k)
    if (with[k]) tan[F.leaf_node[k]] = tb.leaf(F.leaves[k]);
  for (size_t i = 0; i < F.nodes.size(); ++i) {
    const auto& n = F.nodes[i];
    if (n.kind != ir::Kind::Op || !n.op->jvp) continue;
    int ts[3] = {-1, -1, -1};
    bool any = false;
    for (int k = 0; k < n.nargs; ++k) {
      ts[k] = tan[n.args[k]];
      any = any || ts[k] >= 0;
    }
    if (any) tan[i] = n.op->jvp(tb, n, n.args, static_cast<int>(i), ts);
  }
  std::vector<int> troots(roots.size());
  for (size_t r = 0; r < roots.size(); ++r) troots[r] = tan[roots[r]];
  return troots;
}

// Vector mode with structure (structured.hpp): the tangent graph is linear in the tangents,
// so each input's tangent goes through it alone (the others zero), one term at a time, and
// each output term keeps its input term's pattern (dims shifted by broadcasting). Returns
// false (nothing done) when no input has a structured tangent.
inline bool record_struct_tangents(const std::shared_ptr<const ir::Graph>& F, const GraphRecord& rec, uint64_t level) {
  const size_t n_in = rec.inputs.size(), nr = rec.roots.size();
  StructPtr any;
  for (size_t k = 0; k < n_in && !any; ++k)
    if (rec.inputs[k].t) any = struct_tangent_of(*rec.inputs[k].t, level);
  if (!any) return false;
  const int64_t r_out = rec.outputs[0]->sizes.size();
  for (size_t r = 0; r < nr; ++r)
    if (rec.outputs[r]->sizes.size() != r_out) return false;
  std::vector<StructTangent> out(nr);
  for (size_t r = 0; r < nr; ++r) out[r] = {any->comps, rec.outputs[r]->sizes, F->nodes[rec.roots[r]].type->grad, {}};
  std::vector<char> done(n_in, 0);
  for (size_t k = 0; k < n_in; ++k) {
    if (done[k] || !rec.inputs[k].t) continue;
    const TensorImpl* x = rec.inputs[k].t.get();
    std::vector<char> with(n_in, 0);  // every slot that reads x: one tangent
    for (size_t j = k; j < n_in; ++j)
      if (rec.inputs[j].t.get() == x) with[j] = done[j] = 1;
    if (!has_tangent(*x, level)) continue;
    StructPtr st = struct_tangent_of(*x, level);
    if (!st) st = std::make_shared<const StructTangent>(as_struct(tangent_of(*x, level), any->comps, x->sizes, F->leaves[k]->grad));
    ir::Graph T = *F;
    T.cache.reset();
    auto troots = build_tangent_graph(T, *F, with, rec.roots);
    GradList leaves(F->leaves.size());
    for (size_t j = 0; j < n_in; ++j) leaves[j] = rec.inputs[j].t;
    const size_t first = leaves.size(), count = static_cast<size_t>(std::count(with.begin(), with.end(), 1));
    leaves.resize(first + count);
    hoist_primal_parts(T, leaves, troots, first);
    const int shift = static_cast<int>(r_out - x->sizes.size());
    for (const TanTerm& t : st->terms) {
      const int nf = free_count(t);
      Shape c(t.coef->sizes.begin(), t.coef->sizes.begin() + nf);
      for (int i = 0; i < shift; ++i) c.push_back(1);
      for (int64_t i = nf; i < t.coef->sizes.size(); ++i) c.push_back(t.coef->sizes[i]);
      GradPtr a = reshaped(t.coef, std::move(c), st->type);
      for (size_t i = first; i < first + count; ++i) leaves[i] = a;
      auto res = ir_apply(T, leaves, troots);
      for (size_t r = 0; r < nr; ++r) {
        if (!res[r]) continue;
        TanTerm u{t.dim_of, std::move(res[r])};
        for (int& d : u.dim_of)
          if (d >= 0) d += shift;
        add_term(out[r], std::move(u));
      }
    }
  }
  for (size_t r = 0; r < nr; ++r)
    if (!out[r].terms.empty()) set_tangent(*rec.outputs[r], level, nullptr, finish_struct(std::move(out[r])));
  return true;
}

inline void record_graph(GraphRecord rec) {
  const size_t n_in = rec.inputs.size();
  ImplList lp(n_in);
  for (size_t k = 0; k < n_in; ++k) lp.p[k] = rec.inputs[k].t.get();
  bool reverse = false;
  if (grad_mode_flag())
    for (size_t k = 0; k < n_in; ++k) reverse = reverse || (lp.p[k] && impl_requires_grad(*lp.p[k]));
  std::vector<uint64_t> levels;
  if (any_level_active()) collect_levels(lp.p, n_in, levels);
  if (!reverse && levels.empty()) return;

  const size_t nr = rec.roots.size();
  PoolVector<IrFunction::Out> outs(nr);
  {
    ir::Graph& g = *rec.graph;
    ir::Builder b{g};
    for (size_t r = 0; r < nr; ++r) {
      const ir::TypeInfo* t = g.nodes[rec.roots[r]].type;
      outs[r].root = rec.roots[r];
      outs[r].value_slot = g.nodes[b.leaf(t)].leaf;
      outs[r].grad_slot = g.nodes[b.leaf(t)].leaf;
    }
  }
  auto F = ir::intern(*rec.graph);
  if (reverse) {
    auto node = make_pooled<IrFunction>();
    node->seq = next_sequence_nr();
    node->graph = F;
    node->self = node;
    node->next.reserve(n_in);
    node->input_sizes.reserve(n_in);
    for (size_t k = 0; k < n_in; ++k) {
      node->next.push_back(edge_of(rec.inputs[k].t, F->leaves[k]->grad));
      node->input_sizes.push_back(rec.inputs[k].t ? rec.inputs[k].t->sizes : Shape{});
    }
    for (size_t r = 0; r < nr; ++r) node->outputs.push_back({F->nodes[rec.roots[r]].type->grad, rec.outputs[r]->sizes});
    node->outs = std::move(outs);
    // Keep only what backward reads (its plan is cached with the graph): a chain of ops whose
    // rules need no values does not hold every intermediate result. Under forward mode all
    // is kept, as backward may then recompute the outputs.
    auto plan = node->plan_for(true);
    const bool keep_all = !levels.empty() || any_level_active();
    node->inputs = keep_all ? rec.inputs : std::move(rec.inputs);
    for (size_t k = 0; k < n_in; ++k)
      if (!keep_all && !plan->live[F->leaf_node[k]]) node->inputs[k].t.reset();
    for (size_t r = 0; r < nr; ++r) {
      auto& o = node->outs[r];
      if (keep_all || plan->live[F->leaf_node[o.value_slot]])
        o.value = {plain_alias(*rec.outputs[r]), version_of(*rec.outputs[r])};
    }
    for (size_t r = 0; r < nr; ++r) set_history(*rec.outputs[r], node, static_cast<int>(r));
  }
  for (uint64_t level : levels) {
    const int64_t batch = level_batch(level);  // vector mode: tangents are [batch, *sizes]
    LevelMask mask(level);
    GradModeGuard history(grad_mode_flag() && !tangents_as_values(level));
    if (batch && structure_ok(level) && record_struct_tangents(F, rec, level)) continue;
    ir::Graph T = *F;
    T.cache.reset();
    GradList leaves(F->leaves.size());
    for (size_t k = 0; k < n_in; ++k) leaves[k] = rec.inputs[k].t;
    std::vector<char> with(n_in, 0);
    for (size_t k = 0; k < n_in; ++k) {
      if (!rec.inputs[k].t) continue;
      GradPtr t = tangent_of(*rec.inputs[k].t, level);
      if (!t) continue;
      if (batch) t = align_batched(t, rec.outputs[0]->sizes.size(), F->leaves[k]->grad);
      with[k] = 1;
      leaves.push_back(std::move(t));
    }
    auto troots = build_tangent_graph(T, *F, with, rec.roots);
    // (Only where the tangent is a plain value: no reverse recording, no other level. The
    // hoisted leaves' own histories gave wrong third derivatives through multi-output graphs.)
    if (batch > 1 && !grad_mode_flag() && level_state().live.size() == 1)
      hoist_primal_parts(T, leaves, troots, F->leaves.size());
    auto res = ir_apply(T, std::move(leaves), troots);
    for (size_t r = 0; r < nr; ++r) {
      if (!res[r]) continue;
      Shape want = rec.outputs[r]->sizes;
      if (batch) want.insert(0, batch);
      if (res[r]->sizes != want) {  // an in-place write broadcast its source (or a tangent was smaller)
        const GradType* gt = F->nodes[rec.roots[r]].type->grad;
        if (batch) res[r] = align_batched(res[r], want.size() - 1, gt);
        res[r] = gt->expand(res[r], want);
      }
      set_tangent(*rec.outputs[r], level, res[r]);
    }
  }
}

// ------------------------------------------------------------------ typed entry points
template <class X> void collect_leaf_impls(const X&, const GradPtr**, size_t&) {}
template <class T, class D> void collect_leaf_impls(const Tensor<T, D>& t, const GradPtr** v, size_t& n) { v[n++] = &t.impl_ptr(); }
template <class Op, class... A> void collect_leaf_impls(const Expr<Op, A...>& e, const GradPtr** v, size_t& n) {
  std::apply([&](const auto&... a) { (collect_leaf_impls(a, v, n), ...); }, e.args);
}
template <class X> bool any_leaf_meta(const X&) { return false; }
template <class T, class D> bool any_leaf_meta(const Tensor<T, D>& t) { return t.impl().autograd != nullptr; }
template <class Op, class... A> bool any_leaf_meta(const Expr<Op, A...>& e) {
  return std::apply([&](const auto&... a) { return (false || ... || any_leaf_meta(a)); }, e.args);
}

template <class R, class D, class E>
PendingRecord begin_record(const E& e) {
  PendingRecord p;
  if constexpr (autograd_type_v<R, D>) {
    if (!any_leaf_meta(e)) return p;
    const GradPtr* leaves[kMaxOperands];
    const TensorImpl* lp[kMaxOperands];
    size_t n = 0;
    collect_leaf_impls(e, leaves, n);
    for (size_t k = 0; k < n; ++k) lp[k] = leaves[k]->get();
    if (!autograd_needed(lp, n)) return p;
    p.active = true;
    p.inputs.reserve(n);
    for (size_t k = 0; k < n; ++k) p.inputs.push_back({*leaves[k], version_of(*lp[k])});
  }
  return p;
}
template <class R, class D, class E>
void finish_record(PendingRecord& p, const Tensor<R, D>& out, const E& e) {
  if constexpr (autograd_type_v<R, D>) {
    if (!p.active) return;
    GraphRecord rec;
    rec.graph = &scratch_graph();
    ir::Builder b{*rec.graph};
    rec.roots.push_back(ir::to_ir_as<R, D>(b, e));
    rec.inputs = std::move(p.inputs);
    rec.outputs.push_back(out.impl_ptr());
    record_graph(std::move(rec));
  }
}
template <class R, class D, class E>
void record_expr(const Tensor<R, D>& out, const E& e) {
  if constexpr (autograd_type_v<R, D>) {
    auto p = begin_record<R, D>(e);
    finish_record(p, out, e);
  }
}

// ------------------------------------------------------------------ ops with reel-op rules
// Records `out = op(inputs...)`: `bw(grad_out)` returns the inputs' gradients (undefined:
// none), `fw(tangents)` the output's tangent from the inputs' tangents (undefined: zero).
// Both are written with reel ops, so they are recorded in turn (higher orders). Only the
// calls of bw and fw are typed; the bookkeeping is shared by every op.
struct FnNodeBase : Node {
  const char* op_name = "";
  std::vector<SavedTensor> saved;  // tensors bw reads (checked against in-place writes)
  std::vector<Shape> input_sizes;
  const char* name() const override { return op_name; }
  virtual GradList call(const GradPtr& g) = 0;
  GradList apply(GradList& grads) override {
    for (auto& s : saved) check_version(*s.t, s.version, op_name);
    auto res = call(grads[0]);
    for (size_t k = 0; k < res.size(); ++k)
      REEL_CHECK(!res[k] || res[k]->sizes == input_sizes[k], error, "autograd: ", op_name,
                 " returned a gradient of shape ", res[k]->sizes, " for an input of shape ", input_sizes[k]);
    return res;
  }
};
template <class T, class D, class Bw>
struct FnNode final : FnNodeBase {
  std::optional<Bw> bw;
  explicit FnNode(Bw f) : bw(std::move(f)) {}
  void release_saved() override { bw.reset(); }
  GradList call(const GradPtr& g) override {
    auto gs = (*bw)(Tensor<T, D>(g));
    GradList res(gs.size());
    for (size_t k = 0; k < gs.size(); ++k)
      if (gs[k].defined()) res[k] = gs[k].impl_ptr();
    return res;
  }
};

struct FnPlan {
  std::vector<const TensorImpl*> ins;
  bool reverse = false;
  std::vector<uint64_t> levels;
  bool any() const { return reverse || !levels.empty(); }
};
inline void plan_fn(FnPlan& p) {
  if (!autograd_needed(p.ins.data(), p.ins.size())) return;
  if (grad_mode_flag())
    for (auto* t : p.ins) p.reverse = p.reverse || (t && impl_requires_grad(*t));
  if (any_level_active()) collect_levels(p.ins.data(), p.ins.size(), p.levels);
}
inline void attach_fn(const std::shared_ptr<FnNodeBase>& node, const char* name, const FnPlan& p,
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

// A forward rule written for one direction, applied to each of a batched level's `batch`
// directions (the fallback of vector mode: elementwise ops, views and sums have batched rules
// of their own; these ops loop).
template <class T, class D, class Fw>
Tensor<T, D> batched_rule(Fw& fw, const std::vector<Tensor<T, D>>& ts, const Tensor<T, D>& out, int64_t batch) {
  std::vector<Tensor<T, D>> parts;
  bool any = false;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor<T, D>> tb(ts.size());
    for (size_t k = 0; k < ts.size(); ++k)
      if (ts[k].defined()) tb[k] = ts[k].select(0, b);
    Tensor<T, D> r = fw(tb);
    any = any || r.defined();
    parts.push_back(r);
  }
  if (!any) return {};
  for (auto& r : parts)
    if (!r.defined()) r = Tensor<T, D>(ir::grad_type_of<T, D>()->zeros(out.sizes()));
  return stack(parts, 0);
}

template <class T, class D, class Bw, class Fw>
Tensor<T, D> record_fn(Tensor<T, D> out, const char* name, std::span<const Tensor<T, D>> inputs,
                       std::initializer_list<Tensor<T, D>> saved, Bw&& bw, Fw&& fw) {
  if constexpr (autograd_type_v<T, D>) {
    FnPlan p;
    p.ins.reserve(inputs.size());
    for (const auto& t : inputs) p.ins.push_back(t.defined() ? &t.impl() : nullptr);
    plan_fn(p);
    if (!p.any()) return out;
    if (out.impl().autograd) out = Tensor<T, D>(plain_alias(out.impl()));  // a fresh handle for the new history
    if (p.reverse) {
      GradList in, sv;
      for (const auto& t : inputs) in.push_back(t.defined() ? t.impl_ptr() : nullptr);
      for (const auto& t : saved) sv.push_back(t.impl_ptr());
      attach_fn(std::make_shared<FnNode<T, D, std::decay_t<Bw>>>(std::forward<Bw>(bw)), name, p, std::move(in),
                std::move(sv), ir::grad_type_of<T, D>(), out.impl());
    }
    for (uint64_t level : p.levels) {
      std::vector<Tensor<T, D>> ts(inputs.size());
      for (size_t k = 0; k < inputs.size(); ++k)
        if (p.ins[k])
          if (GradPtr t = tangent_of(*p.ins[k], level)) ts[k] = Tensor<T, D>(t);
      LevelMask mask(level);
      GradModeGuard history(grad_mode_flag() && !tangents_as_values(level));
      Tensor<T, D> t = level_batch(level) ? batched_rule(fw, ts, out, level_batch(level)) : fw(ts);
      if (t.defined()) set_tangent(out.impl(), level, t.impl_ptr());
    }
  }
  return out;
}
template <class T, class D, class Bw, class Fw>
Tensor<T, D> record_fn(Tensor<T, D> out, const char* name, std::initializer_list<Tensor<T, D>> inputs,
                       std::initializer_list<Tensor<T, D>> saved, Bw&& bw, Fw&& fw) {
  return record_fn(std::move(out), name, std::span<const Tensor<T, D>>(inputs.begin(), inputs.size()), saved,
                   std::forward<Bw>(bw), std::forward<Fw>(fw));
}

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
inline GradPtr record_unary(const GradPtr& in, GradPtr out, std::shared_ptr<ErasedNode> node) {
  const TensorImpl* ip = in.get();
  if (!autograd_needed(&ip, 1)) return out;
  if (out->autograd) out = plain_alias(*out);  // a fresh handle for the new history
  std::vector<uint64_t> levels;
  if (any_level_active()) collect_levels(&ip, 1, levels);
  for (uint64_t level : levels) {
    LevelMask mask(level);
    GradModeGuard history(grad_mode_flag() && !tangents_as_values(level));
    if (level_batch(level) && structure_ok(level))
      if (StructPtr s = struct_tangent_of(*in, level))
        if (StructPtr r = node->forward_struct(*s, out->sizes)) {
          set_tangent(*out, level, nullptr, std::move(r));
          continue;
        }
    if (GradPtr t = node->forward(tangent_of(*in, level), level_batch(level))) set_tangent(*out, level, std::move(t));
  }
  if (grad_mode_flag() && impl_requires_grad(*in)) {
    node->seq = next_sequence_nr();
    node->next.push_back(edge_of(in, node->type));
    node->outputs.push_back({node->type, out->sizes});
    set_history(*out, node, 0);
  }
  return out;
}

GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type);
GradPtr embed(const GradPtr& g, const Shape& in_sizes, const ViewSpec& v, const GradType* type);

// A view's gradient: scattered into zeros shaped like its input (select, slice), reshaped or
// permuted back, or summed over the expanded dims.
inline GradPtr view_backward(const GradPtr& g, const ViewSpec& v, const Shape& in_sizes, const GradType* type) {
  switch (v.kind) {
    case ViewSpec::Select:
    case ViewSpec::Slice: return embed(g, in_sizes, v, type);
    case ViewSpec::Reshape: return apply_view(g, {ViewSpec::Reshape, 0, 0, 0, 0, in_sizes}, type);
    case ViewSpec::Permute: {
      Shape inv(v.shape.size());
      for (int64_t i = 0; i < static_cast<int64_t>(v.shape.size()); ++i) inv[v.shape[i]] = i;
      return apply_view(g, {ViewSpec::Permute, 0, 0, 0, 0, std::move(inv)}, type);
    }
    case ViewSpec::Expand: return type->reduce_to(g, in_sizes);
  }
  return g;
}
// Vector mode: view v applied to each direction of a batched tangent (dims shift by one).
inline ViewSpec batched_spec(ViewSpec v, int64_t batch) {
  switch (v.kind) {
    case ViewSpec::Select:
    case ViewSpec::Slice:
      if (v.a >= 0) ++v.a;
      break;
    case ViewSpec::Reshape:
    case ViewSpec::Expand: v.shape.insert(0, batch); break;
    case ViewSpec::Permute: {
      Shape p{0};
      for (int64_t o : v.shape) p.push_back(o + 1);
      v.shape = std::move(p);
      break;
    }
  }
  return v;
}
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
  StructPtr forward_struct(const StructTangent& s, const Shape& out) const override { return view_struct(s, spec, out); }
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

inline GradPtr view_with(const TensorImpl& t, Geometry g) {
  auto p = make_pooled<TensorImpl>();
  p->storage = t.storage;
  p->sizes = std::move(g.sizes);
  p->strides = std::move(g.strides);
  p->offset = g.offset;
  p->dtype = t.dtype;
  p->device = t.device;
  return p;
}
// Records `out` (already made) as view `spec` of `in`.
inline GradPtr record_view_erased(const GradPtr& in, GradPtr out, ViewSpec spec, const GradType* type) {
  if (!type) return out;
  auto node = make_pooled<ViewNode>();
  node->type = type;
  node->op_name = "ViewBackward";
  node->in_sizes = in->sizes;
  node->spec = std::move(spec);
  out = record_unary(in, std::move(out), std::move(node));
  if (auto* m = meta_of(*out); m && m->grad_fn) m->is_view = true;
  return out;
}
inline GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type) {
  Geometry g;
  switch (v.kind) {
    case ViewSpec::Select: g = select_geometry(*t, v.a, v.b); break;
    case ViewSpec::Slice: g = slice_geometry(*t, v.a, v.b, v.c, v.d); break;
    case ViewSpec::Reshape:
      g = view_geometry(*t, v.shape, "reshape", false);
      if (!g.viewable) return apply_view(type->contiguous(t), v, type);
      break;
    case ViewSpec::Permute: g = permute_geometry(*t, v.shape); break;
    case ViewSpec::Expand: g = expand_geometry(*t, v.shape); break;
  }
  GradPtr out = view_with(*t, std::move(g));
  return t->autograd ? record_view_erased(t, std::move(out), v, type) : out;
}
// A batched tangent [B, *S] viewed as [B, 1, ..., 1, *S] with `rank` dims after B, so the
// directions stay first when it broadcasts against tensors of a higher rank.
inline GradPtr align_batched(const GradPtr& t, size_t rank, const GradType* type) {
  const size_t r = t->sizes.size() - 1;
  if (r >= rank) return t;
  Shape s{t->sizes[0]};
  for (size_t i = r; i < rank; ++i) s.push_back(1);
  for (size_t i = 1; i <= r; ++i) s.push_back(t->sizes[i]);
  return apply_view(t, {ViewSpec::Reshape, 0, 0, 0, 0, std::move(s)}, type);
}
inline GradPtr embed(const GradPtr& g, const Shape& in_sizes, const ViewSpec& v, const GradType* type) {
  GradPtr z = type->zeros(in_sizes);
  type->copy_into(apply_view(z, v, type), g);
  auto node = make_pooled<EmbedNode>();
  node->type = type;
  node->op_name = "EmbedBackward";
  node->spec = v;
  node->out_sizes = in_sizes;
  return record_unary(g, std::move(z), std::move(node));
}
inline GradPtr record_clone_erased(const GradPtr& in, GradPtr out, const GradType* type) {
  if (!type) return out;
  auto node = make_pooled<CloneNode>();
  node->type = type;
  node->op_name = "CloneBackward";
  return record_unary(in, std::move(out), std::move(node));
}

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
    return sum_struct(s, dims, keepdim, scale, out);
  }
};
inline GradPtr record_sum(const GradPtr& in, GradPtr out, const Shape& dims, const Shape& keep_sizes, bool keepdim,
                          double scale, const GradType* type) {
  if (!type) return out;
  auto node = make_pooled<SumNode>();
  node->type = type;
  node->op_name = scale == 1 ? "SumBackward" : "MeanBackward";
  node->dims = dims;
  node->in_sizes = in->sizes;
  node->keep_sizes = keep_sizes;
  node->keepdim = keepdim;
  node->scale = scale;
  return record_unary(in, std::move(out), std::move(node));
}

template <class T, class D> const GradType* grad_type_ptr() {
  if constexpr (autograd_type_v<T, D>)
    return ir::grad_type_of<T, D>();
  else
    return nullptr;
}
template <class T, class D>
Tensor<T, D> record_view(const Tensor<T, D>& in, Tensor<T, D> out, ViewSpec spec) {
  if constexpr (autograd_type_v<T, D>)
    return Tensor<T, D>(record_view_erased(in.impl_ptr(), out.impl_ptr(), std::move(spec), grad_type_ptr<T, D>()));
  return out;
}
template <class T, class D>
Tensor<T, D> record_clone(const Tensor<T, D>& in, Tensor<T, D> out) {
  if constexpr (autograd_type_v<T, D>)
    return Tensor<T, D>(record_clone_erased(in.impl_ptr(), out.impl_ptr(), grad_type_ptr<T, D>()));
  return out;
}

// In-place writes: refused where the result would silently lose gradient.
template <class T, class D>
void check_inplace(const Tensor<T, D>& out, bool records) {
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

// ------------------------------------------------------------------ the engine's entry point
struct GradRequest {
  GradList outputs, grad_outputs, inputs;
  std::vector<const GradType*> output_types, input_types;
  bool retain_graph = false, create_graph = false, allow_unused = false, accumulate = true;
};
inline GradList run_grad(GradRequest& q) {
  BackwardTask task;
  task.keep_graph = q.retain_graph;
  task.create_graph = q.create_graph;
  task.accumulate_into_leaves = q.accumulate;
  REEL_CHECK(q.grad_outputs.size() == q.outputs.size(), value_error, "grad: got ", q.grad_outputs.size(),
             " grad_outputs for ", q.outputs.size(), " outputs");
  for (size_t k = 0; k < q.outputs.size(); ++k) {
    const auto& o = q.outputs[k];
    auto* m = meta_of(*o);
    REEL_CHECK(m && m->requires_grad, error, "element ", k, " of tensors does not require grad and does not have a grad_fn");
    const auto& g = q.grad_outputs[k];
    REEL_CHECK(g->sizes == o->sizes, value_error, "Mismatch in shape: grad_output[", k, "] has a shape of ", g->sizes,
               " and output[", k, "] has a shape of ", o->sizes);
    REEL_CHECK(g->dtype == o->dtype, type_error, "grad: grad_output[", k, "] has a different dtype than output[", k, "]");
    Edge e = edge_of(o, q.output_types[k]);
    task.roots.push_back(e);
    task.root_grads.push_back(g);
  }
  for (size_t k = 0; k < q.inputs.size(); ++k) {
    const auto& t = q.inputs[k];
    auto* m = meta_of(*t);
    REEL_CHECK(m && m->requires_grad, error, "One of the differentiated Tensors (input ", k, ") does not require grad");
    task.capture.push_back(edge_of(t, q.input_types[k]));
  }
  auto res = run_backward(task);
  for (size_t k = 0; k < res.size(); ++k)
    REEL_CHECK(res[k] || q.allow_unused, error, "One of the differentiated Tensors (input ", k, ") appears to not have ",
               "been used in the graph. Set allow_unused = true if this is the desired behavior.");
  return res;
}

}  // namespace detail

namespace detail::ir {
// The GradType of (T, D): gradient arithmetic written with reel ops on D's tensors.
template <class T, class D> GradPtr grad_add(const GradPtr& a, const GradPtr& b) {
  return Tensor<T, D>(Tensor<T, D>(a) + Tensor<T, D>(b)).impl_ptr();
}
template <class T, class D> GradPtr grad_zeros(const Shape& s) {
  auto t = make_tensor<T, D>(s);
  GradModeGuard ng(false);
  t.fill_(T(0));
  return t.impl_ptr();
}
template <class T, class D> GradPtr grad_clone(const GradPtr& g) {
  GradModeGuard ng(false);
  return Tensor<T, D>(plain_alias(*g)).clone().impl_ptr();
}
template <class T, class D> void grad_add_inplace(const GradPtr& acc, const GradPtr& g) {
  GradModeGuard ng(false);
  Tensor<T, D>(acc).add_(Tensor<T, D>(plain_alias(*g)));
}
template <class T, class D> GradPtr grad_reduce_to(const GradPtr& g, const Shape& s) {
  return reduce_to(Tensor<T, D>(g), s).impl_ptr();
}
template <class T, class D> GradPtr grad_expand(const GradPtr& g, const Shape& s) {
  return Tensor<T, D>(g).expand(s).impl_ptr();
}
template <class T, class D> GradPtr grad_sum(const GradPtr& g, const Shape& dims, bool keepdim) {
  return sum(Tensor<T, D>(g), dims, keepdim).impl_ptr();
}
template <class T, class D> GradPtr grad_scale(const GradPtr& g, double s) {
  return Tensor<T, D>(Tensor<T, D>(g) * s).impl_ptr();
}
template <class T, class D> GradPtr grad_contiguous(const GradPtr& g) { return Tensor<T, D>(g).contiguous().impl_ptr(); }
template <class T, class D> void grad_copy_into(const GradPtr& dst, const GradPtr& src) {
  GradModeGuard ng(false);
  Tensor<T, D>(dst).copy_(Tensor<T, D>(plain_alias(*src)));
}
template <class T, class D> const GradType* grad_type_of() {
  static const GradType t{scalar_type_v<T>,        &grad_add<T, D>,       &grad_zeros<T, D>,  &grad_clone<T, D>,
                          &grad_add_inplace<T, D>, &grad_reduce_to<T, D>, &grad_expand<T, D>, &grad_sum<T, D>,
                          &grad_scale<T, D>,       &grad_contiguous<T, D>, &grad_copy_into<T, D>};
  return &t;
}
}  // namespace detail::ir

}  // namespace reel

namespace reel {
// ------------------------------------------------------------------ Tensor members
template <class T, class D>
Tensor<T, D>& Tensor<T, D>::requires_grad_(bool on) {
  if (on)
    REEL_CHECK((detail::autograd_type_v<T, D>), type_error, "requires_grad_: only floating point and complex CPU ",
               "tensors and floating point CUDA tensors can require gradients, got ", scalar_type_of<T>::name, " on ",
               D::name);
  auto& m = detail::ensure_meta(impl());
  REEL_CHECK(on || !m.grad_fn, error, "requires_grad_: you can only change requires_grad flags of leaf tensors");
  m.requires_grad = on;
  return *this;
}
template <class T, class D>
bool Tensor<T, D>::requires_grad() const {
  return detail::impl_requires_grad(impl());
}
template <class T, class D>
bool Tensor<T, D>::is_leaf() const {
  auto* m = detail::meta_of(impl());
  return !m || !m->grad_fn;
}
template <class T, class D>
Tensor<T, D> Tensor<T, D>::grad() const {
  auto* m = detail::meta_of(impl());
  return m && m->grad ? Tensor<T, D>(m->grad) : Tensor<T, D>();
}
template <class T, class D>
void Tensor<T, D>::set_grad(const Tensor& g) const {
  REEL_CHECK(!g.defined() || g.sizes() == sizes(), value_error, "set_grad: assigned grad has shape ", g.sizes(),
             " but the tensor has shape ", sizes());
  detail::ensure_meta(impl()).grad = g.defined() ? g.impl_ptr() : nullptr;
}
template <class T, class D>
void Tensor<T, D>::retain_grad() const {
  auto* m = detail::meta_of(impl());
  REEL_CHECK(m && m->requires_grad, error, "retain_grad: can't retain_grad on a tensor that has requires_grad = false");
  if (!m->grad_fn || m->retains_grad) return;
  m->retains_grad = true;
  m->grad_fn->retained.push_back({m->output_nr, impl_ptr()});
}
template <class T, class D>
bool Tensor<T, D>::retains_grad() const {
  auto* m = detail::meta_of(impl());
  return m && m->retains_grad;
}
template <class T, class D>
template <class F>
RemovableHandle Tensor<T, D>::register_hook(F&& f) const {
  auto* m = detail::meta_of(impl());
  REEL_CHECK(m && m->requires_grad, error, "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  detail::HookFn fn = [f = std::forward<F>(f)](const detail::GradPtr& g) -> detail::GradPtr {
    using R = std::invoke_result_t<F&, const Tensor<T, D>&>;
    if constexpr (std::is_void_v<R>) {
      f(Tensor<T, D>(g));
      return nullptr;
    } else {
      Tensor<T, D> r = f(Tensor<T, D>(g));
      if (r.defined())
        REEL_CHECK(r.sizes() == Shape(g->sizes), value_error, "register_hook: a hook returned a gradient of shape ",
                   r.sizes(), " for a tensor of shape ", g->sizes);
      return r.defined() ? r.impl_ptr() : nullptr;
    }
  };
  uint64_t id = detail::next_hook_id();
  std::shared_ptr<detail::HookList> list;
  if (!m->grad_fn) {
    if (!m->hooks) m->hooks = std::make_shared<detail::HookList>();
    list = m->hooks;
  } else {
    for (auto& [slot, l] : m->grad_fn->pre_hooks)
      if (slot == m->output_nr) list = l;
    if (!list) {
      list = std::make_shared<detail::HookList>();
      m->grad_fn->pre_hooks.push_back({m->output_nr, list});
    }
  }
  list->hooks.push_back({id, std::move(fn)});
  return RemovableHandle(list, id);
}
template <class T, class D>
void Tensor<T, D>::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  if constexpr (detail::autograd_type_v<T, D>) {
    detail::GradRequest q;
    q.outputs.push_back(impl_ptr());
    q.output_types.push_back(detail::ir::grad_type_of<T, D>());
    if (grad.defined()) {
      q.grad_outputs.push_back(grad.impl_ptr());
    } else {
      REEL_CHECK(numel() == 1, value_error, "backward: grad can be implicitly created only for scalar outputs (this ",
                 "tensor has shape ", sizes(), "); pass a gradient of the same shape");
      q.grad_outputs.push_back(detail::ir::grad_zeros<T, D>(sizes()));
      Tensor<T, D>(q.grad_outputs[0]).fill_(T(1));
    }
    q.create_graph = create_graph;
    q.retain_graph = retain_graph || q.create_graph;
    detail::run_grad(q);
  } else {
    raise<error>("backward: element 0 of tensors does not require grad and does not have a grad_fn (dtype ",
                 scalar_type_of<T>::name, " cannot require grad)");
  }
}
}  // namespace reel
