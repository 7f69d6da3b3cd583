#pragma once
// Expressions at run time. When a fused expression is recorded for autograd, its typed tree
// is turned into a Graph: a list of nodes (leaf tensors, constants, ops) in topological
// order. Each op node points at a static table for its (op, compute type) holding
//   - kernel: the op's scalar form over a chunk of elements,
//   - vjp / jvp: builders that append the op's derivative rules (from its single definition
//     in ops.hpp) to another graph, instantiated by calling the rules on symbolic operands.
// Backward and forward mode then build new graphs (adjoints, tangents) by walking a graph
// at run time, and one non-template evaluator runs any graph as a fused pass over chunks.
// Graphs are built per device (the Dev parameter of every builder): a CUDA graph's tables
// carry the device's storage, its evaluator (one fused kernel, ir_program.hpp) and each
// op's device function.
// So differentiating an expression, and differentiating that derivative again, costs no
// new template instantiations per expression type: only one table per (op, type) pair.
#include "../core/config.hpp"
#include <cstring>
#include <mutex>
#include <span>
#include <unordered_map>

#include "../expr/functions.hpp"
#include "graph.hpp"

namespace reel::inline REEL_ABI {
namespace detail::ir {

// A device tag for symbolic operands: expressions over them are built, never evaluated.
struct SymDevice {};

template <class T>
struct Sym : ExprBase {
  using value_type = T;
  using device_type = SymDevice;
  int id;
  explicit Sym(int i) : id(i) {}
};

enum class Kind : uint8_t { Leaf, Const, Op };
struct Builder;
struct IrNode;

using KernelFn = void (*)(const void* op, const void* const* in, const int64_t* stride, void* out, int64_t n);
// Appends the contributions `adj * conj(d op / d arg_k)` for every k with need[k]; contrib[k]
// gets the node id (or -1 when the contribution is zero).
using VjpFn = void (*)(Builder&, const IrNode&, const int* args, int self, int adj, int* contrib, const bool* need);
// Appends sum_k (d op / d arg_k) * tangent_k and returns its id (-1 when zero).
using JvpFn = int (*)(Builder&, const IrNode&, const int* args, int self, const int* tangents);

// An op's per-element form, `out = op.apply<C>(in...)` on raw bytes (the form a device
// kernel calls through a pointer; see ir_program.hpp).
using ElemFn = void (*)(const unsigned char* op, const unsigned char* const* in, unsigned char* out);

struct OpInfo {
  const char* name;
  KernelFn kernel;
  VjpFn vjp;  // null: not differentiable
  JvpFn jvp;
  ElemFn elem;  // (host address)
  // Graphs on an accelerator: the op's device function (a pointer in device memory's address
  // space, fetched once per device). Null for the CPU's ops.
  const void* (*device_fn)();
  // The bytes of the op's state in a node's data (0 for an op without state: its one byte
  // is indeterminate).
  int state_bytes;
};

struct Graph;
// Where a graph's values live: how to allocate its results and how to evaluate it there.
// Graphs are built per device (every node's TypeInfo / OpInfo is the device's), so a graph
// never mixes devices.
struct IrDevice {
  DeviceType type;
  std::shared_ptr<Storage> (*make_storage)(size_t nbytes);
  void (*evaluate)(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                   std::span<TensorImpl* const> outs, const std::vector<char>& live);
};

struct TypeInfo {
  ScalarType dtype;
  int size;
  const GradType* grad;          // null for dtypes without gradients
  int (*add)(Builder&, int, int);  // null for dtypes without gradients
  const IrDevice* device;
};

struct IrNode {
  Kind kind = Kind::Leaf;
  uint8_t nargs = 0;
  int32_t args[3] = {-1, -1, -1};
  int32_t leaf = -1;  // Kind::Leaf: the leaf slot
  const TypeInfo* type = nullptr;
  const OpInfo* op = nullptr;
  alignas(16) unsigned char data[32] = {};  // the op object (Op) or the value (Const)
  template <class O> const O& as() const { return *reinterpret_cast<const O*>(data); }
};

// A graph's backward, built once per (graph, inputs that need gradients, use of saved outputs)
// and reused: recording the same expression again finds the same interned graph.
struct BackwardPlan {
  uint64_t needs = 0;
  bool use_values = false;
  std::shared_ptr<const Graph> graph;  // the forward graph plus the adjoint nodes
  std::vector<int> roots;              // adjoint of each input leaf slot (-1: none)
  std::vector<char> zero;              // input slots whose gradient is zeros (no adjoint node)
  std::vector<char> live;              // nodes of `graph` the roots depend on
};
struct PlanCache {
  std::mutex mu;
  std::vector<std::shared_ptr<const BackwardPlan>> plans;
};

struct Graph {
  std::vector<IrNode> nodes;
  std::vector<const TypeInfo*> leaves;  // dtype of each leaf slot
  std::vector<int> leaf_node;           // the node of each leaf slot
  std::shared_ptr<PlanCache> cache;     // set on interned graphs
};

REEL_INLINE uint64_t hash_graph(const Graph& g);
REEL_INLINE bool same_graph(const Graph& a, const Graph& b);
// The one shared copy of g (per thread), so work derived from it can be cached with it.
REEL_INLINE std::shared_ptr<const Graph> intern(const Graph& g);

struct Builder {
  Graph& g;
  int push(const IrNode& n) {
    g.nodes.push_back(n);
    return static_cast<int>(g.nodes.size()) - 1;
  }
  REEL_INLINE int leaf(const TypeInfo* t);
  template <class T> int constant(const TypeInfo* t, const T& v) {
    static_assert(sizeof(T) <= sizeof(IrNode::data));
    IrNode n;
    n.kind = Kind::Const;
    n.type = t;
    std::memcpy(n.data, &v, sizeof(T));
    return push(n);
  }
  template <class Op> int op(const OpInfo* info, const TypeInfo* t, const Op& o, const int* args, int nargs) {
    static_assert(sizeof(Op) <= sizeof(IrNode::data) && std::is_trivially_copyable_v<Op>,
                  "reel: an op's state must be small and trivially copyable to be recorded");
    // An op of constants is a constant (the exponent b - 1 in pow's derivative, ...): folded
    // here, so the evaluator sees a repeated value (and a vector form that needs one) rather
    // than a chunk it computes again for every element.
    // where(c, x, y) with c a constant is x or y (pow's derivative tests its exponent).
    if constexpr (std::is_same_v<Op, WhereOp>) {
      const IrNode& c = g.nodes[args[0]];
      if (c.kind == Kind::Const && t == g.nodes[args[1]].type && t == g.nodes[args[2]].type) {
        bool nonzero = false;  // the condition, converted from bool: 0 or 1 in t's type
        for (int k = 0; k < t->size; ++k) nonzero = nonzero || c.data[k] != 0;
        return args[nonzero ? 1 : 2];
      }
    }
    bool folds = nargs > 0;
    for (int k = 0; k < nargs; ++k) folds = folds && g.nodes[args[k]].kind == Kind::Const;
    if (folds) {
      IrNode c;
      c.kind = Kind::Const;
      c.type = t;
      const unsigned char* in[3] = {};
      for (int k = 0; k < nargs; ++k) in[k] = g.nodes[args[k]].data;
      info->elem(reinterpret_cast<const unsigned char*>(&o), in, c.data);
      return push(c);
    }
    IrNode n;
    n.kind = Kind::Op;
    n.type = t;
    n.op = info;
    n.nargs = static_cast<uint8_t>(nargs);
    for (int k = 0; k < nargs; ++k) n.args[k] = args[k];
    std::memcpy(n.data, &o, sizeof(Op));
    return push(n);
  }
};

// The nodes of g that depend on a leaf slot marked in `from` through floating-point values
// (a bool or integer result, as of x > 0, cuts the dependence).
inline std::vector<char> reached_from(const Graph& g, const std::vector<char>& from) {
  std::vector<char> r(g.nodes.size(), 0);
  for (size_t k = 0; k < from.size(); ++k) r[g.leaf_node[k]] = from[k];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const IrNode& n = g.nodes[i];
    if (n.kind != Kind::Op || !n.type->grad) continue;
    for (int k = 0; k < n.nargs; ++k) r[i] = r[i] || r[n.args[k]];
  }
  return r;
}

// Converts between element types inside a graph (IR only; the typed engine converts inline).
template <class U>
struct ConvertOp {
  template <class A> using result = U;
  template <class A> using compute = A;
  template <class C> REEL_HD U apply(C x) const { return convert<U>(x); }
  template <class O, class X> auto d0(const O&, const X&) const { return 1; }
};

}  // namespace detail::ir

namespace detail {
template <class T> struct leaf_traits<ir::Sym<T>> {
  using value_type = T;
  using device_type = ir::SymDevice;
};
}  // namespace detail

namespace detail::ir {

// Element types autograd works in. Reduced floats (half, bfloat16) are storage types here:
// instantiating the machinery for them would cost every program that merely stores them.
template <class T> inline constexpr bool grad_dtype_v = std::is_floating_point_v<T> || is_complex_v<T>;
// ... on device Dev (a device's kernels have no complex arithmetic yet; the host's have).
template <class T, class Dev>
inline constexpr bool device_grad_dtype_v = grad_dtype_v<T> && (Backend<Dev>::host_memory || !is_complex_v<T>);

template <class Op, class C, class Seq> struct apply_result;
template <class Op, class C, size_t... K> struct apply_result<Op, C, std::index_sequence<K...>> {
  template <size_t> using Same = C;
  using type = decltype(std::declval<const Op&>().template apply<C>(std::declval<Same<K>>()...));
};
// The type op.apply<C>(C...) returns: what the node for the op holds.
template <class Op, class C, size_t N> using apply_t = typename apply_result<Op, C, std::make_index_sequence<N>>::type;

// Ops whose derivative is 0 almost everywhere say `differentiable = false`; one that is
// differentiable for complex numbers only (sgn) adds `complex_differentiable = true`.
template <class Op, class C> constexpr bool differentiable_op() {
  if constexpr (is_complex_v<C> && requires { Op::complex_differentiable; })
    return Op::complex_differentiable;
  else if constexpr (requires { Op::differentiable; })
    return Op::differentiable;
  else
    return true;
}
template <class Op> constexpr bool holomorphic_op() {
  if constexpr (requires { Op::holomorphic; })
    return Op::holomorphic;
  else
    return true;
}

// Every graph-building function takes the device Dev its graph is for (see IrDevice).
template <class T, class Dev = CPU> const TypeInfo& type_info();
template <class T, class Dev = CPU> const GradType* grad_type_of();  // defined with the typed autograd code

// The type of the values the graph node for X holds.
template <class X> struct ir_value;
template <class T, class D> struct ir_value<Tensor<T, D>> { using type = T; };
template <class T> struct ir_value<Sym<T>> { using type = T; };
template <class T> struct ir_value<Scalar<T>> { using type = T; };
template <class Op, class... A> struct ir_value<Expr<Op, A...>> {
  using type = apply_t<Op, typename Expr<Op, A...>::compute_type, sizeof...(A)>;
};
template <class X> using ir_value_t = typename ir_value<std::decay_t<X>>::type;

template <class Op, class C, size_t N, class Dev = CPU> const OpInfo* op_info();

// An upper bound of the nodes a typed tree becomes (each operand may need a conversion).
template <class X> inline constexpr int node_bound_v = 1;
template <class Op, class... A> inline constexpr int node_bound_v<Expr<Op, A...>> = 1 + (0 + ... + (node_bound_v<A> + 1));

// ------------------------------------------------------------------ typed trees -> graph
template <class Dev, class T, class D> int to_ir(Builder& b, const Tensor<T, D>&) { return b.leaf(&type_info<T, Dev>()); }
template <class Dev, class T> int to_ir(Builder&, const Sym<T>& s) { return s.id; }
template <class Dev, class T> int to_ir(Builder& b, const Scalar<T>& s) { return b.constant(&type_info<T, Dev>(), convert<T>(s.value)); }
template <class To, class From, class Dev> int convert_node(Builder& b, int id) {
  if constexpr (std::is_same_v<To, From>) {
    return id;
  } else {
    int a[1] = {id};
    return b.op(op_info<ConvertOp<To>, From, 1, Dev>(), &type_info<To, Dev>(), ConvertOp<To>{}, a, 1);
  }
}
template <class C, class Dev, class X> int arg_to_ir(Builder& b, const X& x) {
  if constexpr (requires { x.value; }) {  // a number: store it in the compute type
    return b.constant(&type_info<C, Dev>(), convert<C>(x.value));
  } else {
    return convert_node<C, ir_value_t<X>, Dev>(b, to_ir<Dev>(b, x));
  }
}
template <class Dev, class Op, class... A> int to_ir(Builder& b, const Expr<Op, A...>& e) {
  using C = typename Expr<Op, A...>::compute_type;
  using V = ir_value_t<Expr<Op, A...>>;
  return [&]<size_t... K>(std::index_sequence<K...>) {
    int ids[] = {arg_to_ir<C, Dev>(b, std::get<K>(e.args))...};
    return b.op(op_info<Op, C, sizeof...(A), Dev>(), &type_info<V, Dev>(), e.op, ids, static_cast<int>(sizeof...(A)));
  }(std::index_sequence_for<A...>{});
}
// X as a node of type To; a C++ number becomes a constant.
template <class To, class Dev, class X> int to_ir_as(Builder& b, const X& x) {
  if constexpr (is_cpp_scalar_v<X>)
    return b.constant(&type_info<To, Dev>(), convert<To>(x));
  else
    return convert_node<To, ir_value_t<X>, Dev>(b, to_ir<Dev>(b, x));
}

// ------------------------------------------------------------------ per-(op, type) tables
// Operands of an op's Eigen vector form inside a graph's chunk: a run, or one value repeated.
template <class C> using RunMap = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
template <class C> using RunConst = decltype(Eigen::Array<C, Eigen::Dynamic, 1>::Constant(1, C()));
template <class C> RunMap<C> run_map(const C* p, int64_t n) { return RunMap<C>(p, n); }
template <class C> RunConst<C> run_const(const C* p, int64_t n) { return Eigen::Array<C, Eigen::Dynamic, 1>::Constant(n, *p); }

// The op over a chunk of n elements. Where the op has an Eigen vector form for the operands'
// layout (runs, or a run and a repeated value), it is used, as the typed engine does on
// unit-stride rows (vectorized exp, tanh, pow(x, c), ...); otherwise the scalar form.
template <class Op, class C, size_t N>
void kernel(const void* opp, const void* const* in, const int64_t* st, void* out, int64_t n) {
  const Op& op = *static_cast<const Op*>(opp);
  using V = apply_t<Op, C, N>;
  V* o = static_cast<V*>(out);
  using OutMap = Eigen::Map<Eigen::Array<V, Eigen::Dynamic, 1>>;
  if constexpr (!std::is_same_v<V, bool> && (std::is_floating_point_v<C> || is_complex_v<C>)) {
    const C* p0 = static_cast<const C*>(in[0]);
    if constexpr (N == 1 && reel::detail::HasVec<Op, C, RunMap<C>>) {
      if (st[0] == 1) {
        OutMap(o, n) = reel::detail::cast_eigen<V>(op.template vec<C>(run_map(p0, n)));
        return;
      }
    }
    if constexpr (N == 2) {
      const C* p1 = static_cast<const C*>(in[1]);
      if constexpr (reel::detail::HasVec<Op, C, RunMap<C>, RunMap<C>>) {
        if (st[0] == 1 && st[1] == 1) {
          OutMap(o, n) = reel::detail::cast_eigen<V>(op.template vec<C>(run_map(p0, n), run_map(p1, n)));
          return;
        }
      }
      if constexpr (reel::detail::HasVec<Op, C, RunMap<C>, RunConst<C>>) {
        if (st[0] == 1 && st[1] == 0) {
          OutMap(o, n) = reel::detail::cast_eigen<V>(op.template vec<C>(run_map(p0, n), run_const(p1, n)));
          return;
        }
      }
      if constexpr (reel::detail::HasVec<Op, C, RunConst<C>, RunMap<C>>) {
        if (st[0] == 0 && st[1] == 1) {
          OutMap(o, n) = reel::detail::cast_eigen<V>(op.template vec<C>(run_const(p0, n), run_map(p1, n)));
          return;
        }
      }
    }
  }
  [&]<size_t... K>(std::index_sequence<K...>) {
    const C* p[] = {static_cast<const C*>(in[K])...};
    if (((st[K] == 1) && ...)) {
      for (int64_t i = 0; i < n; ++i) o[i] = op.template apply<C>(p[K][i]...);
    } else if constexpr (N == 2) {  // a run and a broadcast value: vectorizable loops
      if (st[0] == 1 && st[1] == 0) {
        const C b = p[1][0];
        for (int64_t i = 0; i < n; ++i) o[i] = op.template apply<C>(p[0][i], b);
        return;
      }
      if (st[0] == 0 && st[1] == 1) {
        const C a = p[0][0];
        for (int64_t i = 0; i < n; ++i) o[i] = op.template apply<C>(a, p[1][i]);
        return;
      }
      for (int64_t i = 0; i < n; ++i) o[i] = op.template apply<C>(p[K][i * st[K]]...);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = op.template apply<C>(p[K][i * st[K]]...);
    }
  }(std::make_index_sequence<N>{});
}

template <class Op, class C, size_t... K>
REEL_HD void apply_elem_impl(const Op& op, const unsigned char* const* in, unsigned char* out, std::index_sequence<K...>) {
  using V = apply_t<Op, C, sizeof...(K)>;
  *reinterpret_cast<V*>(out) = op.template apply<C>(*reinterpret_cast<const C*>(in[K])...);
}
template <class Op, class C, size_t N>
REEL_HD void apply_elem(const unsigned char* op, const unsigned char* const* in, unsigned char* out) {
  apply_elem_impl<Op, C>(*reinterpret_cast<const Op*>(op), in, out, std::make_index_sequence<N>{});
}

template <size_t K, class Op, class O, class... A>
auto rule(const Op& op, const O& out, const A&... a) {
  if constexpr (K == 0)
    return op.d0(out, a...);
  else if constexpr (K == 1)
    return op.d1(out, a...);
  else
    return op.d2(out, a...);
}

// g * conj(d) (reverse) or d * t (forward) as a node of type To; -1 when d is the number 0.
template <class To, bool Conj, class Dev, class G, class Dv>
int times_rule(Builder& b, const G& g, const Dv& d) {
  if constexpr (is_cpp_scalar_v<Dv>) {
    if (d == Dv(0)) return -1;
    if (d == Dv(1)) return to_ir_as<To, Dev>(b, g);
    return to_ir_as<To, Dev>(b, g * d);
  } else if constexpr (Conj && is_complex_v<To>) {
    return to_ir_as<To, Dev>(b, g * conj(d));
  } else {
    return to_ir_as<To, Dev>(b, g * d);
  }
}

template <class Op, class C, size_t N, class Dev>
void vjp(Builder& b, const IrNode& n, const int* args, int self, int adj, int* contrib, const bool* need) {
  const Op op = n.as<Op>();
  using V = apply_t<Op, C, N>;
  Sym<V> out(self), g(adj);
  [&]<size_t... K>(std::index_sequence<K...>) {
    auto one = [&]<size_t J>(std::integral_constant<size_t, J>) {
      if (!need[J]) return;
      if constexpr (is_complex_v<C> && !holomorphic_op<Op>())
        contrib[J] = to_ir_as<C, Dev>(b, op.template complex_vjp<J>(g, out, Sym<C>(args[K])...));
      else
        contrib[J] = times_rule<C, true, Dev>(b, g, rule<J>(op, out, Sym<C>(args[K])...));
    };
    (one(std::integral_constant<size_t, K>{}), ...);
  }(std::make_index_sequence<N>{});
}

template <class Op, class C, size_t N, class Dev>
int jvp(Builder& b, const IrNode& n, const int* args, int self, const int* tangents) {
  const Op op = n.as<Op>();
  using V = apply_t<Op, C, N>;
  Sym<V> out(self);
  if constexpr (requires { op.jvp_rule(out, out, out, Sym<C>(0), Sym<C>(0)); }) {
    // ops that select one operand: the tangent is selected too, never mixed (0 * inf)
    int zero = b.constant(&type_info<C, Dev>(), C(0));
    Sym<C> ta(tangents[0] < 0 ? zero : tangents[0]), tb(tangents[1] < 0 ? zero : tangents[1]);
    return to_ir_as<V, Dev>(b, op.jvp_rule(ta, tb, out, Sym<C>(args[0]), Sym<C>(args[1])));
  }
  int acc = -1;
  [&]<size_t... K>(std::index_sequence<K...>) {
    auto one = [&]<size_t J>(std::integral_constant<size_t, J>) {
      if (tangents[J] < 0) return;
      Sym<C> t(tangents[J]);
      int c;
      if constexpr (is_complex_v<C> && !holomorphic_op<Op>())
        c = to_ir_as<V, Dev>(b, op.template complex_jvp<J>(t, out, Sym<C>(args[K])...));
      else
        c = times_rule<V, false, Dev>(b, t, rule<J>(op, out, Sym<C>(args[K])...));
      if (c >= 0) acc = acc < 0 ? c : type_info<V, Dev>().add(b, acc, c);
    };
    (one(std::integral_constant<size_t, K>{}), ...);
  }(std::make_index_sequence<N>{});
  return acc;
}

template <class Op> const char* op_name() {
  return __PRETTY_FUNCTION__;  // informative enough for error messages
}

// The op's device function on an accelerator (Backend<Dev>::ir_op_fn); none on the CPU.
template <class Op, class C, size_t N, class Dev>
constexpr auto device_fn_of() -> const void* (*)() {
  if constexpr (Backend<Dev>::host_memory)
    return nullptr;
  else
    return &Backend<Dev>::template ir_op_fn<Op, C, N>;
}

template <class Op, class C, size_t N, class Dev>
const OpInfo* op_info() {
  using V = apply_t<Op, C, N>;
  constexpr auto dev = device_fn_of<Op, C, N, Dev>();
  constexpr int state_bytes = std::is_empty_v<Op> ? 0 : static_cast<int>(sizeof(Op));
  if constexpr (differentiable_op<Op, C>() && device_grad_dtype_v<C, Dev> && device_grad_dtype_v<V, Dev>) {
    static const OpInfo info{op_name<Op>(),      &kernel<Op, C, N>,     &vjp<Op, C, N, Dev>,
                             &jvp<Op, C, N, Dev>, &apply_elem<Op, C, N>, dev, state_bytes};
    return &info;
  } else {
    static const OpInfo info{op_name<Op>(), &kernel<Op, C, N>, nullptr, nullptr, &apply_elem<Op, C, N>, dev, state_bytes};
    return &info;
  }
}

template <class T, class Dev> int add_nodes(Builder& b, int x, int y) {
  return to_ir_as<T, Dev>(b, Sym<T>(x) + Sym<T>(y));
}

// CPU graphs: the chunked evaluator below, or (for tests) the device interpreter on the host
// (defined in ir_program.hpp).
void evaluate_host(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                   std::span<TensorImpl* const> outs, const std::vector<char>& live);
inline std::shared_ptr<Storage> cpu_storage(size_t nbytes) { return make_storage(nbytes, DeviceType::CPU); }
template <class Dev> const IrDevice* ir_device() {
  if constexpr (Backend<Dev>::host_memory) {
    static const IrDevice d{DeviceType::CPU, &cpu_storage, &evaluate_host};
    return &d;
  } else {
    return Backend<Dev>::ir_device();
  }
}

template <class T, class Dev> const TypeInfo& type_info() {
  if constexpr (device_grad_dtype_v<T, Dev>) {
    static const TypeInfo info{scalar_type_v<T>, static_cast<int>(sizeof(T)), grad_type_of<T, Dev>(),
                               &add_nodes<T, Dev>, ir_device<Dev>()};
    return info;
  } else {
    static const TypeInfo info{scalar_type_v<T>, static_cast<int>(sizeof(T)), nullptr, nullptr, ir_device<Dev>()};
    return info;
  }
}

// ------------------------------------------------------------------ evaluation
// Evaluates `roots` of `g` into `outs` (already allocated with the broadcast shape of the
// live leaves). One pass over the output in chunks: leaves are read in place (unit or zero
// stride) or gathered, each live op runs its kernel on the chunk, roots are stored.
struct EvalState {
  const Graph* g;
  std::span<const int> order;    // live nodes, in order
  std::span<const int> leaf_op;  // operand index of each leaf slot (-1 unused)
  std::span<const int> roots;
  int nout;
  int nops;  // operands: the outputs, then the live leaves
};

// Runs the graph over one tile: `rows` rows of n elements, operand k's row r starting at
// off[k] + r * outer[k]. The op kernels see the tile as one run of n * rows elements: a leaf
// that is not one run already (unit stride across the rows, or a broadcast 0) is gathered.
REEL_INLINE void eval_tile(const EvalState& s, const RowCtx& c, const int64_t* off, int64_t n, int64_t rows);

// A block of rows, cut into tiles of at most 256 elements: whole rows when they are short,
// chunks of one row when they are long.
REEL_INLINE void eval_rows(void* self, const RowCtx& c, int64_t cnt, int64_t rows, bool);

// The nodes the roots depend on.
REEL_INLINE void mark_live(const Graph& g, std::span<const int> roots, std::vector<char>& live);

// leaves[k]: the tensor of leaf slot k (may be null for slots no root depends on); `live`
// from mark_live for these roots.
REEL_INLINE void evaluate(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                     std::span<TensorImpl* const> outs, const std::vector<char>& live);
// The operands of evaluating `roots` of g into `outs` (for either evaluator): the outputs,
// then each live leaf slot's tensor once (leaf_op[k]: its operand, -1 when unused), each
// base pointer at the operand's first element (offsets then count elements from there);
// `order` gets the live nodes in order.
REEL_INLINE void live_operands(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                          std::span<TensorImpl* const> outs, const std::vector<char>& live, Operands& ops,
                          std::vector<int>& order, std::vector<int>& leaf_op);

REEL_INLINE void evaluate_cpu(const Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                         std::span<TensorImpl* const> outs, const std::vector<char>& live);

}  // namespace detail::ir
}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "ir-inl.hpp"
#endif
