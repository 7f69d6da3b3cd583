#pragma once
// The bodies of ir's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "ir.hpp"

namespace reel::inline REEL_ABI {
namespace detail::ir {
REEL_INLINE int Builder::leaf(const TypeInfo* t) {
  IrNode n;
  n.kind = Kind::Leaf;
  n.type = t;
  n.leaf = static_cast<int>(g.leaves.size());
  g.leaves.push_back(t);
  int id = push(n);
  g.leaf_node.push_back(id);
  return id;
}
REEL_INLINE uint64_t hash_graph(const Graph& g) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&](uint64_t w) {
    h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  };
  auto word = [](const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  };
  for (const auto& n : g.nodes) {
    mix(uint64_t(n.kind) | uint64_t(n.nargs) << 8 | uint64_t(uint32_t(n.leaf)) << 32);
    mix(uint64_t(uint32_t(n.args[0])) | uint64_t(uint32_t(n.args[1])) << 32);
    mix(uint64_t(uint32_t(n.args[2])) ^ reinterpret_cast<uintptr_t>(n.type));
    mix(reinterpret_cast<uintptr_t>(n.op));
    for (size_t k = 0; k < sizeof n.data; k += 8) mix(word(n.data + k));
  }
  for (auto* t : g.leaves) mix(reinterpret_cast<uintptr_t>(t));
  return h;
}

REEL_INLINE bool same_graph(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size() || a.leaves != b.leaves) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const auto &x = a.nodes[i], &y = b.nodes[i];
    if (x.kind != y.kind || x.nargs != y.nargs || x.leaf != y.leaf || x.type != y.type || x.op != y.op ||
        std::memcmp(x.args, y.args, sizeof x.args) != 0 || std::memcmp(x.data, y.data, sizeof x.data) != 0)
      return false;
  }
  return true;
}

REEL_INLINE std::shared_ptr<const Graph> intern(const Graph& g) {
  thread_local std::shared_ptr<const Graph> last;  // a loop records the same graph again and again
  if (last && same_graph(*last, g)) return last;
  thread_local std::unordered_multimap<uint64_t, std::shared_ptr<const Graph>> table;
  uint64_t h = hash_graph(g);
  auto range = table.equal_range(h);
  for (auto it = range.first; it != range.second; ++it)
    if (same_graph(*it->second, g)) return last = it->second;
  if (table.size() >= 4096) table.clear();  // bounded: graphs with varying constants
  auto copy = std::make_shared<Graph>(g);
  copy->cache = std::make_shared<PlanCache>();
  std::shared_ptr<const Graph> p = std::move(copy);
  table.emplace(h, p);
  return last = p;
}

REEL_INLINE void eval_tile(const EvalState& s, const RowCtx& c, const int64_t* off, int64_t n, int64_t rows) {
  constexpr int64_t K = 256;
  const auto& nodes = s.g->nodes;
  thread_local std::vector<unsigned char> scratch;
  thread_local std::vector<const void*> ptr;
  thread_local std::vector<int64_t> stride;
  const size_t nn = nodes.size();
  if (scratch.size() < nn * K * 16) scratch.resize(nn * K * 16);
  if (ptr.size() < nn) {
    ptr.resize(nn);
    stride.resize(nn);
  }
  const int64_t m = n * rows;
  // One root computed last, into a tile that is one run of its output: written in place.
  int direct = -1;
  if (s.nout == 1 && nodes[s.roots[0]].kind == Kind::Op && s.roots[0] == s.order.back() && c.inner[0] == 1 &&
      (rows == 1 || c.outer[0] == n))
    direct = s.roots[0];
  for (int i : s.order) {
    const IrNode& nd = nodes[i];
    unsigned char* buf = i == direct ? static_cast<unsigned char*>(const_cast<void*>(c.base[0])) + off[0] * nd.type->size
                                     : scratch.data() + static_cast<size_t>(i) * K * 16;
    if (nd.kind == Kind::Leaf) {
      int q = s.leaf_op[nd.leaf];
      const int64_t in = c.inner[q], ou = c.outer[q];
      const unsigned char* base = static_cast<const unsigned char*>(c.base[q]) + off[q] * nd.type->size;
      const bool one_run = rows == 1 || ou == n * in;
      if ((in == 0 && (rows == 1 || ou == 0)) || (in == 1 && one_run)) {
        ptr[i] = base;
        stride[i] = in;
      } else {
        copy2d(buf, 1, n, base, in, ou, n, rows, nd.type->size);
        ptr[i] = buf;
        stride[i] = 1;
      }
    } else if (nd.kind == Kind::Const) {
      ptr[i] = nd.data;
      stride[i] = 0;
    } else {
      const void* in[3];
      int64_t st[3];
      for (int k = 0; k < nd.nargs; ++k) {
        in[k] = ptr[nd.args[k]];
        st[k] = stride[nd.args[k]];
      }
      nd.op->kernel(nd.data, in, st, buf, m);
      ptr[i] = buf;
      stride[i] = 1;
    }
  }
  for (int r = 0; r < s.nout && direct < 0; ++r) {
    int id = s.roots[r];
    int size = nodes[id].type->size;
    void* dst = static_cast<unsigned char*>(const_cast<void*>(c.base[r])) + off[r] * size;
    if (stride[id] == 0)  // a constant or broadcast root: every element the same
      copy2d(dst, c.inner[r], c.outer[r], ptr[id], 0, 0, n, rows, size);
    else
      copy2d(dst, c.inner[r], c.outer[r], ptr[id], 1, n, n, rows, size);
  }
}

REEL_INLINE void eval_rows(void* self, const RowCtx& c, int64_t cnt, int64_t rows, bool) {
  const EvalState& s = *static_cast<const EvalState*>(self);
  constexpr int64_t K = 256;
  int64_t off[kMaxOperands];
  const int nk = s.nops;
  if (cnt >= K / 2) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t start = 0; start < cnt; start += K) {
        for (int k = 0; k < nk; ++k) off[k] = c.off[k] + r * c.outer[k] + start * c.inner[k];
        eval_tile(s, c, off, std::min(K, cnt - start), 1);
      }
  } else {
    const int64_t per = K / cnt;
    for (int64_t r = 0; r < rows; r += per) {
      for (int k = 0; k < nk; ++k) off[k] = c.off[k] + r * c.outer[k];
      eval_tile(s, c, off, cnt, std::min(per, rows - r));
    }
  }
}

REEL_INLINE void mark_live(const Graph& g, std::span<const int> roots, std::vector<char>& live) {
  live.assign(g.nodes.size(), 0);
  for (int r : roots)
    if (r >= 0) live[r] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (int k = 0; k < g.nodes[i].nargs; ++k) live[g.nodes[i].args[k]] = 1;
}

REEL_INLINE void evaluate(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                     std::span<TensorImpl* const> outs, const std::vector<char>& live) {
  g.nodes[roots[0]].type->device->evaluate(g, leaves, roots, outs, live);
}

REEL_INLINE void live_operands(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                          std::span<TensorImpl* const> outs, const std::vector<char>& live, Operands& ops,
                          std::vector<int>& order, std::vector<int>& leaf_op) {
  order.clear();
  leaf_op.assign(g.leaves.size(), -1);
  for (auto* o : outs) ops.add(o->storage->data, o->sizes, o->strides);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (!live[i]) continue;
    order.push_back(i);
    const IrNode& n = g.nodes[i];
    if (n.kind == Kind::Leaf && leaf_op[n.leaf] < 0) {
      const TensorImpl* t = leaves[n.leaf];
      REEL_CHECK(t, error, "autograd: a saved tensor is missing");
      REEL_CHECK(t->device == outs[0]->device, error, "autograd: a graph's tensors are on different devices");
      REEL_CHECK(ops.n < kMaxOperands, not_implemented_error, "autograd: a derivative expression with more than ",
                 kMaxOperands - 1, " operands");
      leaf_op[n.leaf] = ops.n;
      ops.add(t->storage->data, t->sizes, t->strides);
    }
  }
  for (size_t r = 0; r < outs.size(); ++r)
    ops.base[r] = static_cast<const unsigned char*>(ops.base[r]) + outs[r]->offset * g.nodes[roots[r]].type->size;
  for (size_t k = 0; k < g.leaves.size(); ++k) {
    int q = leaf_op[k];
    if (q >= 0) ops.base[q] = static_cast<const unsigned char*>(ops.base[q]) + leaves[k]->offset * g.leaves[k]->size;
  }
}

REEL_INLINE void evaluate_cpu(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                         std::span<TensorImpl* const> outs, const std::vector<char>& live) {
  if (numel_of(outs[0]->sizes) == 0) return;
  thread_local std::vector<int> order, leaf_op;  // reused: no allocation per call
  Operands ops;
  live_operands(g, leaves, roots, outs, live, ops, order, leaf_op);
  EvalState s{&g, order, leaf_op, roots, static_cast<int>(roots.size()), ops.n};
  if (numel_of(outs[0]->sizes) == 1 && int64_t(outs[0]->sizes.size()) <= kMaxDims) {
    // one element (the nodes of scalar graphs): one tile, no iteration plan
    static constexpr int64_t zero[kMaxOperands] = {};
    eval_tile(s, RowCtx{ops.base, zero, zero, zero, zero, 1}, zero, 1, 1);
    return;
  }
  // every output has the same shape; operand 0 defines the iteration space
  run_rows(ops, &s, &eval_rows);
}

}  // namespace
}  // namespace
