#pragma once
// The bodies of record's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "record.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE void describe_graph(CaptureTrace& t, BuildIr build, const void* e, const GradPtr* const* leaves, size_t n,
                                GradPtr out, const Shape& space, std::vector<char> reduced, bool mean) {
  auto g = std::make_shared<ir::Graph>();
  ir::Builder b{*g};
  const int root = build(b, e);
  if (n != g->leaves.size()) return;
  auto d = std::make_shared<KernelDesc>();
  d->graph = std::move(g);
  d->roots.push_back(root);
  for (size_t k = 0; k < n; ++k) d->leaves.push_back(*leaves[k]);
  d->outs.push_back(std::move(out));
  d->space.assign(space.begin(), space.end());
  d->reduced = std::move(reduced);
  d->mean = mean;
  t.describe(std::move(d));
}
REEL_INLINE std::vector<char> live_nodes(const ir::Graph& g, std::span<const int> roots) {
  std::vector<char> live;
  ir::mark_live(g, roots, live);
  return live;
}

REEL_INLINE PendingRecord pending_record(const ExprLeaves& l) {
  PendingRecord p;
  p.active = true;
  p.inputs.reserve(l.n);
  for (size_t k = 0; k < l.n; ++k) p.inputs.push_back({*l.ptr[k], version_of(*l.impl[k])});
  return p;
}

REEL_INLINE void finish_record(PendingRecord& p, const GradPtr& out, BuildIr build, const void* e) {
  GraphRecord rec;
  rec.graph = &scratch_graph();
  ir::Builder b{*rec.graph};
  rec.roots.push_back(build(b, e));
  rec.inputs = std::move(p.inputs);
  rec.outputs.push_back(out);
  record_graph(std::move(rec));
}

REEL_INLINE void capture_ir(CaptureTrace& t, const ir::Graph& g, const GradList& leaves, std::span<const int> roots,
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
  if (t.wants_descs() && out[0]->device == DeviceType::CPU) {  // for compile's fusion
    auto d = std::make_shared<KernelDesc>();
    d->graph = gc;
    d->roots = rs;
    d->outs = out;
    for (size_t k = 0; k < in.size(); ++k) d->leaves.push_back(live[g.leaf_node[k]] ? in[k] : nullptr);
    d->space.assign(out[0]->sizes.begin(), out[0]->sizes.end());
    t.describe(std::move(d));
  }
}

REEL_INLINE GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots,
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
    capture_ir_fn.load(std::memory_order_acquire)(*t, g, leaves, rec.roots, rec.outputs,
                                                  all ? live : live_nodes(g, rec.roots));
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

REEL_INLINE GradList ir_apply(const ir::Graph& g, GradList leaves, std::span<const int> roots) {
  return ir_apply(g, std::move(leaves), roots, live_nodes(g, roots));
}

REEL_INLINE void hoist_primal_parts(ir::Graph& T, GradList& leaves, std::span<const int> roots, size_t first_tangent_slot) {
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

REEL_INLINE std::vector<int> build_tangent_graph(ir::Graph& T, const ir::Graph& F, const std::vector<char>& with,
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

REEL_INLINE void install_struct_ops() {
  static const StructOps ops{&densify, &record_struct_tangents, &view_struct, &sum_struct};
  struct_ops_table.store(&ops, std::memory_order_release);
}

REEL_INLINE bool record_struct_tangents(const std::shared_ptr<const ir::Graph>& F, const GraphRecord& rec, uint64_t level) {
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

REEL_INLINE void record_graph(GraphRecord rec) {
  const size_t n_in = rec.inputs.size();
  ImplList lp(n_in);
  for (size_t k = 0; k < n_in; ++k) lp.p[k] = rec.inputs[k].t.get();
  bool reverse = false;
  if (grad_mode_flag())
    for (size_t k = 0; k < n_in; ++k) reverse = reverse || (lp.p[k] && impl_requires_grad(*lp.p[k]));
  std::vector<uint64_t> levels;
  if (any_level_active()) collect_levels(lp.p, n_in, levels);
  if (!reverse && levels.empty()) return;
  // Outputs that depend on the inputs needing gradients only through bool or integer values
  // (x > 0, a cast to int) get no history, as in PyTorch.
  std::vector<char> reached;
  if (reverse) {
    bool cuts = false;
    for (const auto& n : rec.graph->nodes) cuts = cuts || (n.kind == ir::Kind::Op && !n.type->grad);
    if (cuts) {
      std::vector<char> from(n_in, 0);
      for (size_t k = 0; k < n_in; ++k) from[k] = lp.p[k] && impl_requires_grad(*lp.p[k]);
      reached = ir::reached_from(*rec.graph, from);
      reverse = false;
      for (size_t r = 0; r < rec.roots.size(); ++r) reverse = reverse || reached[rec.roots[r]];
      if (!reverse && levels.empty()) return;
    }
  }

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
    for (size_t r = 0; r < nr; ++r)
      if (reached.empty() || reached[rec.roots[r]]) set_history(*rec.outputs[r], node, static_cast<int>(r));
  }
  for (uint64_t level : levels) {
    const int64_t batch = level_batch(level);  // vector mode: tangents are [batch, *sizes]
    LevelMask mask(level);
    GradModeGuard history(grad_mode_flag() && !tangents_as_values(level));
    if (batch && structure_ok(level))
      if (const StructOps* ops = struct_ops(); ops && ops->record(F, rec, level)) continue;
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
    std::vector<char> reach;  // (computed when first needed)
    for (size_t r = 0; r < nr; ++r) {
      if (!res[r]) {
        // reached only through piecewise-constant ops (floor, sign, ...): a zero tangent, as
        // in PyTorch (not in vector mode, where a missing tangent already means zero)
        if (batch || !F->nodes[rec.roots[r]].type->grad) continue;
        if (reach.empty()) reach = ir::reached_from(*F, with);
        if (reach[rec.roots[r]]) set_tangent(*rec.outputs[r], level, F->nodes[rec.roots[r]].type->grad->zeros(rec.outputs[r]->sizes));
        continue;
      }
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

REEL_INLINE GradPtr record_unary(const GradPtr& in, GradPtr out, std::shared_ptr<ErasedNode> node) {
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

REEL_INLINE GradPtr view_backward(const GradPtr& g, const ViewSpec& v, const Shape& in_sizes, const GradType* type) {
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

REEL_INLINE ViewSpec batched_spec(ViewSpec v, int64_t batch) {
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

REEL_INLINE GradPtr view_with(const TensorImpl& t, Geometry g) {
  auto p = make_pooled<TensorImpl>();
  p->storage = t.storage;
  p->sizes = std::move(g.sizes);
  p->strides = std::move(g.strides);
  p->offset = g.offset;
  p->dtype = t.dtype;
  p->device = t.device;
  return p;
}

REEL_INLINE GradPtr record_view_erased(const GradPtr& in, GradPtr out, ViewSpec spec, const GradType* type) {
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

REEL_INLINE GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type) {
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

REEL_INLINE GradPtr align_batched(const GradPtr& t, size_t rank, const GradType* type) {
  const size_t r = t->sizes.size() - 1;
  if (r >= rank) return t;
  Shape s{t->sizes[0]};
  for (size_t i = r; i < rank; ++i) s.push_back(1);
  for (size_t i = 1; i <= r; ++i) s.push_back(t->sizes[i]);
  return apply_view(t, {ViewSpec::Reshape, 0, 0, 0, 0, std::move(s)}, type);
}

REEL_INLINE GradPtr embed(const GradPtr& g, const Shape& in_sizes, const ViewSpec& v, const GradType* type) {
  GradPtr z = type->zeros(in_sizes);
  type->copy_into(apply_view(z, v, type), g);
  auto node = make_pooled<EmbedNode>();
  node->type = type;
  node->op_name = "EmbedBackward";
  node->spec = v;
  node->out_sizes = in_sizes;
  return record_unary(g, std::move(z), std::move(node));
}

REEL_INLINE GradPtr record_clone_erased(const GradPtr& in, GradPtr out, const GradType* type) {
  if (!type) return out;
  auto node = make_pooled<CloneNode>();
  node->type = type;
  node->op_name = "CloneBackward";
  return record_unary(in, std::move(out), std::move(node));
}

REEL_INLINE GradPtr record_sum(const GradPtr& in, GradPtr out, const Shape& dims, const Shape& keep_sizes, bool keepdim,
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

REEL_INLINE GradList run_grad(GradRequest& q) {
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

}  // namespace
}  // namespace
