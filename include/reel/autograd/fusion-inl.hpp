#pragma once
// The bodies of fusion.hpp's functions (header-only mode: included by it; compiled mode: by
// src/runtime.cpp). The compiler driver is in fusion_jit-inl.hpp.
#include "fusion.hpp"
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

namespace reel::inline REEL_ABI::detail::fusion {

namespace gen {
// Where a kernel reads or writes a buffer: element offset + sum of index * stride over the
// kernel's space (0 along broadcast dims and dims of size 1).
struct Access {
  int buf = -1;
  int64_t off = 0;
  std::vector<int64_t> st;
  bool operator==(const Access& o) const { return buf == o.buf && off == o.off && st == o.st; }
};
struct Kernel {
  size_t step = 0;
  ir::Graph g;
  std::vector<int> roots;
  std::vector<int64_t> space;
  std::vector<char> red;  // per dim of space (all 0: elementwise)
  bool reduce = false, mean = false, alive = true;
  std::vector<Access> outs;  // per root
  std::vector<Access> leaf;  // per leaf slot of g (buf -1: a slot no root reads)
};
struct Buffers {
  std::vector<const Storage*> id;
  std::vector<std::shared_ptr<TensorImpl>> impl;
  std::vector<ScalarType> dtype;
  int of(const std::shared_ptr<TensorImpl>& t) {
    const Storage* s = t->storage.get();
    for (size_t i = 0; i < id.size(); ++i)
      if (id[i] == s) return dtype[i] == t->dtype ? static_cast<int>(i) : -2;  // -2: read as two types
    id.push_back(s);
    impl.push_back(t);
    dtype.push_back(t->dtype);
    return static_cast<int>(id.size()) - 1;
  }
};

// The C++ type of a dtype generated code handles ("" for the others).
inline const char* c_type(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return "bool";
    case ScalarType::Int8: return "std::int8_t";
    case ScalarType::Int16: return "std::int16_t";
    case ScalarType::Int32: return "std::int32_t";
    case ScalarType::Int64: return "std::int64_t";
    case ScalarType::UInt8: return "std::uint8_t";
    case ScalarType::UInt16: return "std::uint16_t";
    case ScalarType::UInt32: return "std::uint32_t";
    case ScalarType::UInt64: return "std::uint64_t";
    case ScalarType::Float: return "float";
    case ScalarType::Double: return "double";
    default: return "";
  }
}

// The op's C++ type from its table's name (__PRETTY_FUNCTION__ of op_name<Op>: "... [with
// Op = reel::cfg_ag_omp_hdr::PowOp]"), without the configuration's inline namespace; ""
// where generated code cannot name it (an op defined in a function, a lambda).
inline std::string op_type(const char* pretty) {
  std::string s(pretty);
  size_t b = s.find("Op = ");
  if (b == std::string::npos) return {};
  s = s.substr(b + 5);
  if (!s.empty() && s.back() == ']') s.pop_back();
  for (size_t c; (c = s.find("cfg_")) != std::string::npos;) {
    size_t e = s.find("::", c);
    if (e == std::string::npos || (c >= 2 && s.compare(c - 2, 2, "::") != 0)) return {};
    s.erase(c, e + 2 - c);
  }
  for (const char* bad : {"lambda", "anonymous", "unnamed", "{", "(", ";", "["})
    if (s.find(bad) != std::string::npos) return {};
  if (s.rfind("ConvertOp<", 0) == 0 || s.rfind("reel::detail::ir::ConvertOp<", 0) == 0) return "convert";
  return s.rfind("reel::", 0) == 0 ? s : std::string();
}
// ir::ConvertOp (GCC names it relative to op_name's namespace): generated as reel::convert.
inline bool is_convert(const std::string& op) { return op == "convert"; }

// Right-aligned broadcast of t to space.
inline Access access_of(int buf, const TensorImpl& t, const std::vector<int64_t>& space) {
  Access a;
  a.buf = buf;
  a.off = t.offset;
  const int64_t nd = static_cast<int64_t>(space.size()), td = t.sizes.size();
  a.st.assign(space.size(), 0);
  for (int64_t d = 0; d < nd; ++d) {
    int64_t k = d - (nd - td);
    if (k >= 0 && t.sizes[k] != 1 && space[d] != 1) a.st[d] = t.strides[k];
  }
  return a;
}

inline bool emittable(const ir::Graph& g) {
  for (const ir::IrNode& n : g.nodes) {
    if (!*c_type(n.type->dtype)) return false;
    if (n.kind == ir::Kind::Op && (n.nargs == 0 || op_type(n.op->name).empty())) return false;
  }
  return true;
}

// The kernel of description d, or none (-> false) where generated code cannot run it.
inline bool make_kernel(const KernelDesc& d, size_t step, Buffers& bufs, Kernel& k) {
  if (!d.graph || !emittable(*d.graph) || d.outs.empty() || d.outs.size() != d.roots.size()) return false;
  for (const auto& o : d.outs)
    if (!o || o->device != DeviceType::CPU) return false;
  int64_t numel = 1;
  for (int64_t x : d.space) numel *= x;
  if (num_threads_for(numel) > 1) return false;  // (generated loops run on one thread: big ones stay eager's)
  k.step = step;
  k.g = *d.graph;
  k.roots = d.roots;
  k.space = d.space;
  k.reduce = d.reduced.size() == d.space.size() && std::find(d.reduced.begin(), d.reduced.end(), 1) != d.reduced.end();
  k.red = k.reduce ? d.reduced : std::vector<char>(d.space.size(), 0);
  k.mean = k.reduce && d.mean;
  if (d.reduced.size() == d.space.size() && !d.space.empty()) {
    if (d.outs.size() != 1) return false;
    const int ob = bufs.of(d.outs[0]);
    if (ob < 0) return false;
    const auto& out = d.outs[0];
    Access a;
    // the output of a reduction: a fresh contiguous tensor over the kept dims
    int64_t s = 1, out_numel = 1;
    for (int64_t x : out->sizes) out_numel *= x;
    for (int64_t i = out->sizes.size() - 1; i >= 0; --i) {
      if (out->sizes[i] != 1 && out->strides[i] != s) return false;
      s *= out->sizes[i];
    }
    a.buf = ob;
    a.off = out->offset;
    a.st.assign(d.space.size(), 0);
    s = 1;
    for (int64_t i = static_cast<int64_t>(d.space.size()) - 1; i >= 0; --i) {
      if (k.red[i]) continue;
      if (d.space[i] != 1) a.st[i] = s;
      s *= d.space[i];
    }
    if (s != out_numel) return false;
    k.outs.push_back(std::move(a));
  } else {
    for (const auto& out : d.outs) {  // an output is the space, each element written once
      if (out->sizes != Shape(d.space)) return false;
      const int ob = bufs.of(out);
      if (ob < 0) return false;
      k.outs.push_back(access_of(ob, *out, d.space));
      for (size_t i = 0; i < d.space.size(); ++i)
        if (d.space[i] != 1 && k.outs.back().st[i] == 0) return false;
    }
  }
  for (const auto& t : d.leaves) {
    if (!t) {
      k.leaf.push_back(Access{});
      continue;
    }
    if (t->device != DeviceType::CPU || t->sizes.size() > static_cast<int64_t>(d.space.size())) return false;
    int b = bufs.of(t);
    if (b < 0) return false;
    k.leaf.push_back(access_of(b, *t, d.space));
    // a leaf in an output's buffer must be read where it is written (elementwise in place)
    for (const Access& o : k.outs)
      if (b == o.buf && !(k.leaf.back() == o && !k.reduce)) return false;
  }
  for (size_t r = 0; r < d.roots.size(); ++r)  // every root of a slot no one fills: none
    if (k.g.nodes[d.roots[r]].kind == ir::Kind::Leaf && k.leaf[k.g.nodes[d.roots[r]].leaf].buf < 0) return false;
  return true;
}

// Copies the nodes of `from` into `to`; leaf slots for which sub(slot) >= 0 become that
// node, the others new leaf slots (their accesses appended to `acc`). Returns the id map.
template <class Sub>
std::vector<int> append_graph(ir::Graph& to, const ir::Graph& from, const std::vector<Access>& from_acc,
                              std::vector<Access>& acc, Sub&& sub) {
  std::vector<int> id(from.nodes.size(), -1);
  for (size_t i = 0; i < from.nodes.size(); ++i) {
    ir::IrNode n = from.nodes[i];
    if (n.kind == ir::Kind::Leaf) {
      int s = sub(n.leaf);
      if (s >= 0) {
        id[i] = s;
        continue;
      }
      acc.push_back(from_acc[n.leaf]);
      n.leaf = static_cast<int32_t>(to.leaves.size());
      to.leaves.push_back(n.type);
      to.leaf_node.push_back(static_cast<int>(to.nodes.size()));
    } else {
      for (int a = 0; a < n.nargs; ++a) n.args[a] = id[n.args[a]];
    }
    id[i] = static_cast<int>(to.nodes.size());
    to.nodes.push_back(n);
  }
  return id;
}

// Inlines producer k into consumer l (whose leaf slots reading k's output become its root).
inline void inline_into(Kernel& l, const Kernel& k) {
  ir::Graph g;
  std::vector<Access> acc;
  auto idk = append_graph(g, k.g, k.leaf, acc, [](int) { return -1; });
  const int kroot = idk[k.roots[0]];
  auto idl = append_graph(g, l.g, l.leaf, acc, [&](int slot) { return l.leaf[slot].buf == k.outs[0].buf ? kroot : -1; });
  for (int& r : l.roots) r = idl[r];
  l.g = std::move(g);
  l.leaf = std::move(acc);
}

// ------------------------------------------------------------------ C++ source
inline void literal(std::ostream& os, const ir::IrNode& n) {
  uint64_t bits = 0;
  std::memcpy(&bits, n.data, std::min<size_t>(sizeof bits, static_cast<size_t>(n.type->size)));
  os << "reel_jit::val<" << c_type(n.type->dtype) << ">(0x" << std::hex << bits << std::dec << "ull)";
}
// a's element at loop indices i0, i1, ... (a's strides over the loop dims)
inline std::string index_of(const Access& a) {
  std::string s = std::to_string(a.off);
  for (size_t d = 0; d < a.st.size(); ++d)
    if (a.st[d] != 0) s += " + i" + std::to_string(d) + " * " + std::to_string(a.st[d]);
  return s;
}

// One kernel's loop nest. p[b] is buffer b's data.
inline void emit_kernel(std::ostream& os, const Kernel& k, const Buffers& bufs) {
  const ir::Graph& g = k.g;
  std::vector<char> live;
  ir::mark_live(g, k.roots, live);
  // dims: size-1 dropped, neighbours every access walks as one merged, kept dims outermost
  std::vector<const Access*> accs;
  for (const Access& o : k.outs) accs.push_back(&o);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i] && g.nodes[i].kind == ir::Kind::Leaf) accs.push_back(&k.leaf[g.nodes[i].leaf]);
  struct Dim {
    int64_t n;
    bool red;
    std::vector<int64_t> st;
  };
  std::vector<Dim> dims;
  for (size_t d = 0; d < k.space.size(); ++d) {
    if (k.space[d] == 1) continue;
    Dim x{k.space[d], k.red[d] != 0, {}};
    for (const Access* a : accs) x.st.push_back(a->st[d]);
    if (!dims.empty() && dims.back().red == x.red) {
      Dim& p = dims.back();
      bool merge = true;
      for (size_t a = 0; a < accs.size(); ++a) merge = merge && p.st[a] == x.st[a] * x.n;
      if (merge) {
        p.n *= x.n;
        p.st = x.st;
        continue;
      }
    }
    dims.push_back(std::move(x));
  }
  std::stable_partition(dims.begin(), dims.end(), [](const Dim& d) { return !d.red; });
  // accesses over the loop dims: i<j> is loop j
  auto over = [&](size_t a) {
    Access r;
    r.off = accs[a]->off;
    for (const Dim& d : dims) r.st.push_back(d.st[a]);
    return r;
  };
  int64_t red_n = 1, kept_loops = 0, red_total = 1;
  for (const Dim& d : dims) {
    if (d.red)
      red_n *= d.n;
    else
      ++kept_loops;
  }
  for (size_t d = 0; d < k.space.size(); ++d)
    if (k.red[d]) red_total *= k.space[d];
  os << "  {  // kernel " << k.step << "\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::IrNode& n = g.nodes[i];
    if (!live[i]) continue;
    if (n.kind == ir::Kind::Const) {
      os << "    const " << c_type(n.type->dtype) << " v" << i << " = ";
      literal(os, n);
      os << ";\n";
    } else if (n.kind == ir::Kind::Op && !is_convert(op_type(n.op->name))) {
      os << "    const auto op" << i << " = reel_jit::op<" << op_type(n.op->name) << ">({";
      for (int b = 0; b < n.op->state_bytes; ++b) os << (b ? "," : "") << static_cast<int>(n.data[b]);
      os << "});\n";
    }
  }
  const bool simd_kept = red_n <= 16;
  size_t j = 0;
  for (; j < dims.size() && !dims[j].red; ++j) {
    if (simd_kept && static_cast<int64_t>(j) + 1 == kept_loops) os << "#pragma omp simd\n";
    os << "    for (std::int64_t i" << j << " = 0; i" << j << " < " << dims[j].n << "; ++i" << j << ") {\n";
  }
  if (k.reduce) os << "    double acc = 0;\n";
  for (size_t r = j; r < dims.size(); ++r) {
    if (!simd_kept && r + 1 == dims.size()) os << "#pragma omp simd reduction(+ : acc)\n";
    os << "    for (std::int64_t i" << r << " = 0; i" << r << " < " << dims[r].n << "; ++i" << r << ") {\n";
  }
  std::map<std::pair<int, std::string>, int> loaded;  // one load per distinct element
  size_t a = k.outs.size();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::IrNode& n = g.nodes[i];
    if (!live[i] || n.kind == ir::Kind::Const) continue;
    const char* t = c_type(n.type->dtype);
    if (n.kind == ir::Kind::Leaf) {
      Access x = over(a++);
      std::string idx = index_of(x);
      int b = k.leaf[n.leaf].buf;
      auto it = loaded.find({b, idx});
      if (it != loaded.end()) {
        os << "      const " << t << " v" << i << " = v" << it->second << ";\n";
      } else {
        loaded[{b, idx}] = static_cast<int>(i);
        os << "      const " << t << " v" << i << " = static_cast<const " << c_type(bufs.dtype[b]) << "*>(p[" << b
           << "])[" << idx << "];\n";
      }
      continue;
    }
    std::string op = op_type(n.op->name);
    const char* c = c_type(g.nodes[n.args[0]].type->dtype);
    os << "      const " << t << " v" << i << " = ";
    if (is_convert(op))
      os << "reel::convert<" << t << ">(v" << n.args[0] << ");\n";
    else {
      os << "op" << i << ".template apply<" << c << ">(";
      for (int q = 0; q < n.nargs; ++q) os << (q ? ", v" : "v") << n.args[q];
      os << ");\n";
    }
  }
  auto out = [&](size_t r) {
    return std::string("static_cast<") + c_type(bufs.dtype[k.outs[r].buf]) + "*>(p[" + std::to_string(k.outs[r].buf) +
           "])[" + index_of(over(r)) + "]";
  };
  if (k.reduce) {
    os << "      acc += v" << k.roots[0] << ";\n";
    for (size_t r = j; r < dims.size(); ++r) os << "    }\n";
    os << "    " << out(0) << " = static_cast<" << c_type(bufs.dtype[k.outs[0].buf]) << ">(acc"
       << (k.mean ? " / " + std::to_string(red_total) + ".0" : "") << ");\n";
  } else {
    for (size_t r = 0; r < k.outs.size(); ++r) os << "      " << out(r) << " = v" << k.roots[r] << ";\n";
  }
  for (size_t q = 0; q < j; ++q) os << "    }\n";
  os << "  }\n";
}
}  // namespace gen

REEL_INLINE Fused fuse(const Program& p) {
  using namespace gen;
  Fused f;
  Buffers bufs;
  const size_t n = p.descs.size();
  std::vector<Kernel> ks;
  std::vector<int> kernel_of(n, -1);
  for (size_t s = 0; s < n; ++s) {
    if (p.skip[s] || !p.descs[s]) continue;
    Kernel k;
    if (!make_kernel(*p.descs[s], s, bufs, k)) continue;
    kernel_of[s] = static_cast<int>(ks.size());
    ks.push_back(std::move(k));
  }
  if (ks.empty()) return f;
  // who writes and reads each storage, by kernel (the fused ones move their reads)
  std::vector<std::vector<const Storage*>> reads = p.reads, writes = p.writes;
  std::vector<char> gone(n, 0);
  auto count = [&](const std::vector<std::vector<const Storage*>>& v, const Storage* s, size_t& which) {
    int c = 0;
    for (size_t i = 0; i < n; ++i)
      if (!gone[i] && std::find(v[i].begin(), v[i].end(), s) != v[i].end()) ++c, which = i;
    return c;
  };
  for (Kernel& l : ks) {
    for (bool again = true; again;) {
      again = false;
      for (size_t slot = 0; slot < l.leaf.size() && !again; ++slot) {
        const int b = l.leaf[slot].buf;
        if (b < 0) continue;
        const Storage* s = bufs.id[b];
        if (std::find(p.pinned.begin(), p.pinned.end(), s) != p.pinned.end() ||
            std::find(p.fresh.begin(), p.fresh.end(), s) == p.fresh.end())
          continue;  // the caller's, or a tensor from outside the function (written for its owner)
        size_t w = 0, r = 0;
        if (count(writes, s, w) != 1 || count(reads, s, r) != 1 || r != l.step || w >= l.step || p.skip[w]) continue;
        if (kernel_of[w] < 0) continue;
        Kernel& k = ks[kernel_of[w]];
        if (!k.alive || k.reduce || k.outs.size() != 1 || k.outs[0].buf != b || k.space != l.space) continue;
        bool same = true;  // every read of the buffer is of the element written there
        for (const Access& x : l.leaf)
          if (x.buf == b) same = same && x == k.outs[0];
        for (size_t i = w + 1; i < l.step && same; ++i)  // nothing in between overwrites k's inputs
          for (const Access& x : k.leaf)
            if (x.buf >= 0 && !gone[i] &&
                std::find(writes[i].begin(), writes[i].end(), bufs.id[x.buf]) != writes[i].end())
              same = false;
        for (const Access& x : k.leaf)  // nor does l, except where it reads them
          for (const Access& o : l.outs)
            if (x.buf >= 0 && x.buf == o.buf && !(x == o && !l.reduce)) same = false;
        if (!same) continue;
        inline_into(l, k);
        k.alive = false;
        gone[k.step] = 1;
        std::erase(reads[l.step], s);
        for (const Access& x : k.leaf) {
          if (x.buf < 0) continue;
          reads[l.step].push_back(bufs.id[x.buf]);
          f.moved_reads.emplace_back(l.step, bufs.id[x.buf]);
        }
        again = true;
      }
    }
  }
  // the parts: kept kernels as captured, runs of consecutive kernels as one function
  std::ostringstream os;
  os << "// generated by reel's autograd::compile (fuse): the capture's loop nests\n"
     << "#include <reel/core/tensor.hpp>\n#include <reel/expr/functions.hpp>\n#include <array>\n#include <bit>\n"
     << "#include <cstdint>\n#include <cstring>\n"
     << "namespace reel_jit {\n"
     << "template <class Op> Op op(const std::array<unsigned char, 32>& b) {\n"
     << "  std::array<unsigned char, sizeof(Op)> a{};\n"
     << "  for (std::size_t i = 0; i < sizeof(Op); ++i) a[i] = b[i];\n"
     << "  return std::bit_cast<Op>(a);\n}\n"
     << "template <class T> T val(std::uint64_t bits) {\n"
     << "  T v;\n  std::memcpy(&v, &bits, sizeof v);\n  return v;\n}\n}  // namespace reel_jit\n";
  bool open = false;
  for (size_t s = 0; s < n; ++s) {
    if (p.skip[s] || gone[s]) continue;
    if (kernel_of[s] < 0) {
      if (open) os << "}\n";
      open = false;
      f.parts.push_back(Part{static_cast<int>(s), -1, {}});
      continue;
    }
    if (!open) {
      os << "extern \"C\" void reel_fused_" << f.functions << "(void* const* p) {\n";
      f.parts.push_back(Part{-1, f.functions++, bufs.impl});
      open = true;
    }
    emit_kernel(os, ks[kernel_of[s]], bufs);
    ++f.kept;
  }
  if (open) os << "}\n";
  f.source = f.functions ? os.str() : std::string();
  return f;
}

}  // namespace reel::detail::fusion

#include "fusion_jit-inl.hpp"
