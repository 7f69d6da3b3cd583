#pragma once
// The expression engine. An expression is a tree of `Expr<Op, Args...>` nodes whose leaves
// are tensors and scalars, all held by value so an `auto e = a * b + c;` can never dangle.
// Evaluating a tree is one pass over the output:
//   1. broadcast the leaves' shapes, and coalesce dimensions that are contiguous for every
//      operand (so most strided/broadcast cases become 1 or 2 dimensions);
//   2. order the dimensions by the operands' strides (the output's first), as PyTorch's
//      TensorIterator does, so the innermost loop runs along the smallest strides;
//   3. split the flat output range between the threads (above a size threshold);
//   4. hand each row kernel blocks of rows (a row = the innermost coalesced dimension, a
//      block = consecutive rows along the next one), so a short innermost dimension (xyz = 3)
//      costs one kernel call per block, not per row. A long row where every tensor leaf has
//      unit stride is evaluated as one Eigen array expression built from `Eigen::Map`s, so
//      Eigen's SIMD kernels (incl. its vectorized exp/log/sin/...) run; other rows use the
//      scalar form of each op.
#include "../core/config.hpp"
#include <array>
#include <cstring>
#include <tuple>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "expr.hpp"
#include "gather.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// ------------------------------------------------------------------ evaluation
// The iteration (broadcasting, coalescing, splitting between threads, walking rows) is
// done once, by non-template code, for every expression; each expression only supplies
// its row kernel. That keeps per-expression compile time and per-call overhead small.

// Operand k's state while a block of rows is processed: its base pointer, the element
// offset of the block's first element, its stride along a row and from one row to the next.
// Operand 0 is the output, tensor leaves follow in left-to-right order.
struct RowCtx {
  const void* const* base;
  const int64_t* off;
  const int64_t* inner;
  const int64_t* outer;
  // Row kernels that accept planes (run_rows' `planes_ok`): `planes` blocks of rows, block p
  // of operand k starting at off[k] + p * outer2[k] (a whole [n, m, 3] slab in one call).
  const int64_t* outer2 = nullptr;
  int64_t planes = 1;
};

inline constexpr int kMaxOperands = 32;
inline constexpr int64_t kMaxDims = 25;

struct Operands {
  int n = 0;
  const void* base[kMaxOperands];
  const Shape* sizes[kMaxOperands];
  const Shape* strides[kMaxOperands];
  void add(const void* p, const Shape& sz, const Shape& st) {
    base[n] = p;
    sizes[n] = &sz;
    strides[n] = &st;
    ++n;
  }
};

template <class E> inline constexpr int leaf_count_v = 0;
template <class T, class D> inline constexpr int leaf_count_v<Tensor<T, D>> = 1;
template <class Op, class... A> inline constexpr int leaf_count_v<Expr<Op, A...>> = (0 + ... + leaf_count_v<A>);

template <class T, class D> void collect_leaves(const Tensor<T, D>& t, Operands& o) { o.add(t.data_ptr(), t.sizes(), t.strides()); }
template <class T> void collect_leaves(const Scalar<T>&, Operands&) {}
template <class Op, class... A> void collect_leaves(const Expr<Op, A...>& e, Operands& o) {
  std::apply([&](const auto&... a) { (collect_leaves(a, o), ...); }, e.args);
}

// Index of argument K's first leaf, relative to its node's first leaf.
template <size_t K, class... A>
constexpr int leaf_offset() {
  constexpr int c[] = {leaf_count_v<A>..., 0};
  int s = 0;
  for (size_t i = 0; i < K; ++i) s += c[i];
  return s;
}

template <class C, class A>
auto cast_eigen(const A& a) {
  using S = typename std::decay_t<A>::Scalar;
  if constexpr (std::is_same_v<S, C>)
    return a;
  else
    return a.template cast<C>();
}

// Value of element i of the current row, in the node's compute type.
template <int I, class T, class D>
auto eval_at(const Tensor<T, D>&, const RowCtx& c, int64_t i) {
  return convert<compute_t<T>>(static_cast<const T*>(c.base[I])[c.off[I] + i * c.inner[I]]);
}
template <int I, class T>
auto eval_at(const Scalar<T>& s, const RowCtx&, int64_t) {
  return convert<compute_t<T>>(s.value);
}
template <int I, class Op, class... A>
auto eval_at(const Expr<Op, A...>& e, const RowCtx& c, int64_t i) {
  using C = typename Expr<Op, A...>::compute_type;
  return [&]<size_t... K>(std::index_sequence<K...>) {
    return e.op.template apply<C>(convert<C>(eval_at<I + leaf_offset<K, A...>()>(std::get<K>(e.args), c, i))...);
  }(std::index_sequence_for<A...>{});
}

// The whole row as one Eigen array expression (only where every node allows it).
template <class E> struct eigen_able;
template <int I, class T, class D>
auto eval_eigen(const Tensor<T, D>&, const RowCtx& c, int64_t n) {
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> m(static_cast<const T*>(c.base[I]) + c.off[I], n);
  return cast_eigen<compute_t<T>>(m);
}
template <int I, class T>
auto eval_eigen(const Scalar<T>& s, const RowCtx&, int64_t n) {
  return Eigen::Array<compute_t<T>, Eigen::Dynamic, 1>::Constant(n, convert<compute_t<T>>(s.value));
}
// (A detection idiom rather than a requires-expression: nvcc's front end mis-evaluates the
// latter with a pack of parameters.)
template <class Op, class C, class... X>
auto has_vec_test(int) -> decltype(std::declval<const Op&>().template vec<C>(cast_eigen<C>(std::declval<const X&>())...),
                                   std::true_type{});
template <class Op, class C, class... X> std::false_type has_vec_test(...);
template <class Op, class C, class... X>
inline constexpr bool HasVec = decltype(has_vec_test<Op, C, X...>(0))::value;

template <class C, class Op, class P, class Q>
auto eigen_apply2(const Op& o, const P& p, const Q& q) {
  return cast_eigen<C>(p).binaryExpr(cast_eigen<C>(q), [o](const C& a, const C& b) { return o.template apply<C>(a, b); });
}
// An op over Eigen row expressions: its vector form where it has one, else its scalar form
// mapped over the row.
template <class C, class Op, class... X>
auto eigen_apply(const Op& o, const X&... x) {
  if constexpr (HasVec<Op, C, X...>) {
    return o.template vec<C>(cast_eigen<C>(x)...);
  } else if constexpr (sizeof...(X) == 1) {
    return cast_eigen<C>(x...).unaryExpr([o](const C& v) { return o.template apply<C>(v); });
  } else {
    return eigen_apply2<C>(o, x...);
  }
}

template <int I, class Op, class... A>
  requires eigen_able<Expr<Op, A...>>::value
auto eval_eigen(const Expr<Op, A...>& e, const RowCtx& c, int64_t n) {
  using C = typename Expr<Op, A...>::compute_type;
  return [&]<size_t... K>(std::index_sequence<K...>) {
    return eigen_apply<C>(e.op, eval_eigen<I + leaf_offset<K, A...>()>(std::get<K>(e.args), c, n)...);
  }(std::index_sequence_for<A...>{});
}

template <class E> struct eigen_able : std::true_type {};
template <class Op, class... A> struct eigen_able<Expr<Op, A...>> {
  static constexpr bool args_ok = (eigen_able<A>::value && ...);
  static constexpr bool vec_ok() {
    if constexpr (!args_ok) {
      return false;
    } else {
      using C = typename Expr<Op, A...>::compute_type;
      return []<size_t... K>(std::index_sequence<K...>) {
        return HasVec<Op, C, decltype(eval_eigen<leaf_offset<K, A...>()>(std::declval<const A&>(), std::declval<const RowCtx&>(), 0))...>;
      }(std::index_sequence_for<A...>{});
    }
  }
  static constexpr bool value = args_ok && (sizeof...(A) <= 2 || vec_ok());
};

// Elements below which work stays on one thread.
inline constexpr int64_t kParallelThreshold = 1 << 15;
inline int num_threads_for(int64_t n) {
#ifdef _OPENMP
  if (n >= kParallelThreshold && !omp_in_parallel()) return omp_get_max_threads();
#endif
  (void)n;
  return 1;
}

// A non-owning reference to a callable, so the one OpenMP region below serves every caller
// (a template parameter would outline a parallel region per expression: compile time).
class RangeFn {
 public:
  template <class F>
  RangeFn(F& f) : obj_(&f), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

REEL_INLINE void parallel_for(int64_t n, int64_t grain, RangeFn f);

// Runs f(begin, end) over [0, n) split between threads (each thread one contiguous range).
template <class F>
void parallel_range(int64_t n, F&& f, int64_t grain = kParallelThreshold) {
  parallel_for(n, grain, RangeFn(f));
}

// Merges dims d and d+1 wherever every operand can walk them as one; drops size-1 dims.
// st holds nops rows of nd strides.
REEL_INLINE void coalesce(Shape& sizes, int nops, int64_t* st, int64_t& nd);

// Orders the dims outermost to innermost by the operands' strides (TensorIterator's rule):
// the first operand whose strides along two dims differ, neither being a broadcast 0,
// decides; otherwise the order stays. Usually the output is contiguous and nothing moves;
// a transposed output (y.t().copy_(x), a backward pass into a permuted view) is then
// written along its unit stride instead of across it.
REEL_INLINE void order_dims(Shape& sizes, int nops, int64_t* st, int64_t nd);

// The iteration space of `ops` (operand 0 is the output, whose sizes define the space):
// every operand's strides broadcast to it, then coalesced. Shared by the CPU row walker
// and the CUDA kernels' offset calculators.
struct IterPlan {
  Shape sizes;  // coalesced sizes (at least one dim)
  int64_t nd = 1, numel = 0;
  int nops = 0;
  int64_t st[kMaxOperands * kMaxDims];  // operand k's stride along dim d: st[k * kMaxDims + d]
  int64_t stride(int k, int64_t d) const { return st[k * kMaxDims + d]; }
};
REEL_INLINE void plan_iteration(const Operands& ops, IterPlan& p);

// Calls row(ctx, cnt, rows, unit) for every block of rows of the broadcast iteration
// space of `ops` (operand 0 is the output, whose sizes define the space): `rows` rows of
// `cnt` elements, row r of operand k starting at off[k] + r * outer[k]. `unit`: every
// operand has unit stride along the rows. With `planes_ok`, whole blocks that follow one
// another along the next dim are handed over in one call (ctx.planes, ctx.outer2), so a
// kernel's per-call setup is paid once per slab, not once per block of short rows.
using RowFn = void (*)(void* self, const RowCtx& c, int64_t cnt, int64_t rows, bool unit);
REEL_INLINE void run_rows(const Operands& ops, void* self, RowFn row_fn, bool planes_ok = false, bool serial = false);
// Whether n elements are one dense run of every operand: the output (operand 0) contiguous,
// every other operand contiguous with n elements (inner 1) or a single element (inner 0).
REEL_INLINE bool flat_run(const Operands& ops, int64_t n, int64_t* inner, bool& unit);
// run_rows on one thread over consecutive tiles of `tile` elements of the iteration space,
// calling done(begin, end) after each. Operand 0 must be contiguous; its offsets are taken
// from the tile's start, so it can be a buffer of one tile (a reduction reads an expression
// tile by tile instead of materializing it).
REEL_INLINE void run_rows_tiled(const Operands& ops, void* self, RowFn row_fn, int64_t tile, RangeFn done);

// Bytes of each tensor leaf's elements, operand order (index 0: the output's).
template <class E> struct LeafBytes {
  static constexpr void into(int*, int&) {}
};
template <class T, class D> struct LeafBytes<Tensor<T, D>> {
  static constexpr void into(int* o, int& i) { o[i++] = static_cast<int>(sizeof(T)); }
};
template <class Op, class... A> struct LeafBytes<Expr<Op, A...>> {
  static constexpr void into(int* o, int& i) { (LeafBytes<A>::into(o, i), ...); }
};
template <class E>
constexpr std::array<int, leaf_count_v<E> + 1> leaf_bytes() {
  std::array<int, leaf_count_v<E> + 1> a{};
  int i = 1;
  LeafBytes<E>::into(a.data(), i);
  return a;
}
// Blocks of short rows up to this many elements are evaluated as one flat run.
inline constexpr int64_t kFlatBlock = 512;

// Rows shorter than this take the scalar loop (an Eigen map's setup costs more than it saves).
inline constexpr int64_t kEigenMinRow = 16;
// Rows shorter than this, in blocks of more rows than that, are walked across (xyz = 3).
inline constexpr int64_t kShortRow = 8;

template <class R, class E> void eval_rows_cpu(const Tensor<R, CPU>& out, const E& e);
template <class R, class E> void eval_row_block(void* self, const RowCtx& c, int64_t cnt, int64_t rows, bool unit);

// The storages an expression reads (for a capture's buffer sharing: CaptureTrace::keep_kernel),
// operand order.
template <class X> void collect_leaf_storages(const X&, const Storage**, size_t&) {}
template <class T, class D> void collect_leaf_storages(const Tensor<T, D>& t, const Storage** s, size_t& n) {
  s[n++] = t.impl().storage.get();
}
template <class Op, class... A> void collect_leaf_storages(const Expr<Op, A...>& e, const Storage** s, size_t& n) {
  std::apply([&](const auto&... a) { (collect_leaf_storages(a, s, n), ...); }, e.args);
}
// Keeps in capture `t` the kernel `step` that writes `out` from the operands of expression `e`.
template <class O, class E, class F> void keep_expr_kernel(CaptureTrace& t, const O& out, const E& e, F&& step) {
  const Storage* reads[kMaxOperands];
  size_t n = 0;
  collect_leaf_storages(e, reads, n);
  t.keep_kernel(out.impl().storage.get(), reads, n, CaptureStep(std::forward<F>(step)));
}

// Evaluates expression `e` into the (already shaped) destination `out`.
template <class R, class D, class E>
void eval_into(const Tensor<R, D>& out, const E& e) {
  if constexpr (!Backend<D>::has_data) {
    return;  // shapes only
  } else if constexpr (device_memory_v<D>) {
    static_assert(leaf_count_v<E> < kMaxOperands, "reel: an expression may have at most 31 tensor operands");
    if (out.numel() == 0) return;
    Backend<D>::eval_into(out, e);  // one kernel
  } else {
    static_assert(leaf_count_v<E> < kMaxOperands, "reel: an expression may have at most 31 tensor operands");
    if (out.numel() == 0) return;
    if (CaptureTrace* t = capturing()) {
      keep_expr_kernel(*t, out, e, [out, e] { eval_rows_cpu(out, e); });
      Recorder<R, D>::describe(*t, out, e, out.sizes(), {}, false);
    } else
      eval_rows_cpu(out, e);
  }
}

// The row kernel of expression E writing R: a block of `rows` rows of `cnt` elements.
template <class R, class E>
void eval_row_block(void* self, const RowCtx& c, int64_t cnt, int64_t rows, bool unit) {
  const E& ex = *static_cast<const E*>(self);
  constexpr int N = leaf_count_v<E> + 1;
  int64_t off[N], inner[N];  // local copies: the stores through o cannot alias them
  for (int k = 0; k < N; ++k) inner[k] = c.inner[k];
  R* const o = static_cast<R*>(const_cast<void*>(c.base[0]));
  if (cnt < kShortRow && rows > cnt) {
    if constexpr (eigen_able<E>::value) {
      // Each block is one dense run of the output (a [n, m, 3] result): operands
      // that are not (broadcast rows, strided views) are gathered into dense runs
      // first (once for all planes when they do not move from plane to plane), and
      // the whole block is one vectorized Eigen loop.
      if (inner[0] == 1 && c.outer[0] == cnt && rows * cnt <= kFlatBlock) {
        const int64_t m = rows * cnt;
        static constexpr auto bytes = leaf_bytes<E>();
        alignas(64) thread_local unsigned char scratch[kFlatBlock * 16 * (N > 1 ? N - 1 : 1)];
        const void* base[N];
        int64_t zoff[N], one[N];
        bool dense[N];
        for (int k = 0; k < N; ++k) {
          one[k] = 1;
          off[k] = c.off[k];
          dense[k] = inner[k] == 1 && c.outer[k] == cnt;
          base[k] = dense[k] ? c.base[k] : scratch + (k - 1) * kFlatBlock * 16;
        }
        const RowCtx fc{base, zoff, one, one};
        // A row repeated along the block (broadcast: outer 0) is gathered as a pattern of
        // kPatternRun elements only, read by runs of that fixed length: stored once per plane
        // instead of once per output element (the pattern's stores waited behind the output's
        // in the store buffer: a [38, 38, 3] pair difference took 1.4x its contiguous op).
        // The patterns of kPlanesAhead planes are gathered at once.
        constexpr int64_t kPlanesAhead = kFlatBlock * 16 / (kPatternRun * 8);
        bool rep[N];
        constexpr bool can_run =
            std::is_floating_point_v<R> && runs_vectorize<decltype(cast_eigen<R>(eval_eigen<1>(ex, fc, m)))>;
        bool runs = can_run && kPatternRun % cnt == 0 && m >= 2 * kPatternRun, any_rep = false;
        for (int k = 0; k < N; ++k) {
          rep[k] = !dense[k] && c.outer[k] == 0;
          any_rep |= rep[k];
          runs &= !rep[k] || bytes[k] == 4 || bytes[k] == 8;
        }
        runs &= any_rep;
        for (int k = 1; k < N; ++k) runs &= c.base[k] != c.base[0];
        for (int64_t p = 0, ahead = 0; p < c.planes; ++p, ahead = ahead + 1 == kPlanesAhead ? 0 : ahead + 1) {
          for (int k = 0; k < N; ++k) {
            if (dense[k]) continue;
            unsigned char* d = scratch + (k - 1) * kFlatBlock * 16;
            const unsigned char* src = static_cast<const unsigned char*>(c.base[k]) + off[k] * bytes[k];
            if (runs && rep[k]) {
              if (c.outer2[k] == 0 ? p == 0 : ahead == 0)
                fill_patterns(d, src, inner[k], c.outer2[k], cnt, std::min(kPlanesAhead, c.planes - p), bytes[k]);
            } else if (p == 0 || c.outer2[k] != 0) {
              copy2d(d, 1, cnt, src, inner[k], c.outer[k], cnt, rows, bytes[k]);
            }
          }
          bool done = false;
          if constexpr (can_run) {
            if (runs) {
              // the last run ends at the block's end, overlapping the one before it (so runs is
              // false where the output is also an operand: an in-place op)
              int64_t step[N];
              for (int k = 0; k < N; ++k) {
                zoff[k] = dense[k] ? off[k] : rep[k] && c.outer2[k] != 0 ? ahead * kPatternRun : 0;
                step[k] = rep[k] ? 0 : 1;
              }
              for (int64_t i = 0;;) {
                eval_run(o + zoff[0], cast_eigen<R>(eval_eigen<1>(ex, fc, kPatternRun)));
                if (i + kPatternRun == m) break;
                const int64_t adv = std::min<int64_t>(kPatternRun, m - kPatternRun - i);
                for (int k = 0; k < N; ++k) zoff[k] += step[k] ? adv : 0;
                i += adv;
              }
              done = true;
            }
          }
          if (!done) {
            for (int k = 0; k < N; ++k) zoff[k] = dense[k] ? off[k] : 0;
            Eigen::Map<Eigen::Array<R, Eigen::Dynamic, 1>>(o + zoff[0], m) = cast_eigen<R>(eval_eigen<1>(ex, fc, m));
          }
          for (int k = 0; k < N; ++k) off[k] += c.outer2[k];
        }
        return;
      }
    }
  }
  for (int64_t p = 0; p < c.planes; ++p) {
    for (int k = 0; k < N; ++k) off[k] = c.off[k] + p * c.outer2[k];
    const RowCtx rc{c.base, off, inner, c.outer};
    if (cnt < kShortRow && rows > cnt) {  // short rows: the loop runs across them
      int64_t outer[N];
      for (int k = 0; k < N; ++k) outer[k] = c.outer[k];
      const RowCtx cc{c.base, off, outer, inner};
      for (int64_t i = 0; i < cnt; ++i) {
        for (int64_t r = 0; r < rows; ++r) o[off[0] + r * outer[0]] = convert<R>(eval_at<1>(ex, cc, r));
        for (int k = 0; k < N; ++k) off[k] += inner[k];
      }
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (eigen_able<E>::value) {
        if (unit && cnt >= kEigenMinRow) {
          Eigen::Map<Eigen::Array<R, Eigen::Dynamic, 1>> m(o + off[0], cnt);
          m = cast_eigen<R>(eval_eigen<1>(ex, rc, cnt));
          for (int k = 0; k < N; ++k) off[k] += c.outer[k];
          continue;
        }
      }
      for (int64_t i = 0; i < cnt; ++i) o[off[0] + i * inner[0]] = convert<R>(eval_at<1>(ex, rc, i));
      for (int k = 0; k < N; ++k) off[k] += c.outer[k];
    }
  }
}

// The CPU evaluation proper: the expression's row kernel over the planned iteration space.
template <class R, class E>
void eval_rows_cpu(const Tensor<R, CPU>& out, const E& e) {
  Operands ops;
  ops.add(out.mutable_data_ptr(), out.sizes(), out.strides());
  collect_leaves(e, ops);
  const int64_t n = out.numel();
  if (n < kParallelThreshold && out.dim() <= kMaxDims) {
    // Small and dense (every operand contiguous like the output, or one element), one thread:
    // one run without the iteration planner (a chain of 1-element ops: 0.125 -> 0.09 us per
    // op; 8-element ops 139 -> 110 ns)
    static constexpr int64_t zero[kMaxOperands] = {};
    if (n == 1) {  // (scalars, losses, the nodes of scalar graphs: not even the row kernel)
      const RowCtx c{ops.base, zero, zero, zero, zero, 1};
      *static_cast<R*>(const_cast<void*>(ops.base[0])) = convert<R>(eval_at<1>(e, c, 0));
      return;
    }
    int64_t inner[kMaxOperands];
    bool unit;
    if (flat_run(ops, n, inner, unit)) {
      eval_row_block<R, E>(const_cast<E*>(&e), RowCtx{ops.base, zero, inner, zero, zero, 1}, n, 1, unit);
      return;
    }
  }
  run_rows(ops, const_cast<E*>(&e), &eval_row_block<R, E>, /*planes_ok=*/true);
}

// Evaluates e on the CPU, on one thread, in row-major tiles of `tile` elements written to
// `buf` (room for one tile), calling f(buf, begin, len) after each: e read without being
// materialized (reductions of expressions).
template <class R, class E, class F>
void eval_tiles_cpu(const E& e, int64_t tile, R* buf, F&& f) {
  const Shape s = shape_of(e), st = contiguous_strides(s);
  Operands ops;
  ops.add(buf, s, st);
  collect_leaves(e, ops);
  auto done = [&](int64_t b, int64_t end) { f(static_cast<const R*>(buf), b, end - b); };
  run_rows_tiled(ops, const_cast<E*>(&e), &eval_row_block<R, E>, tile, RangeFn(done));
}

template <class T, class D, class E>
bool leaf_aliases(const Tensor<T, D>& out, const E& e) {
  bool bad = false;
  auto visit = [&](const auto& self, const auto& x) -> void {
    using X = std::decay_t<decltype(x)>;
    if constexpr (is_tensor_v<X>) {
      if (x.impl().storage == out.impl().storage &&
          !(x.storage_offset() == out.storage_offset() && x.sizes() == out.sizes() && x.strides() == out.strides()))
        bad = true;
    } else if constexpr (requires { x.args; }) {
      std::apply([&](const auto&... a) { (self(self, a), ...); }, x.args);
    }
  };
  visit(visit, e);
  return bad;
}

// (The return type is spelled out, so reel::runtime's explicit instantiations of it are
// used as declared, not instantiated again to deduce it.)
template <class E>
Tensor<typename E::value_type, typename E::device_type> materialize(const E& e) {
  if constexpr (is_tensor_v<E>) {
    return e;
  } else {
    using R = typename E::value_type;
    using D = typename E::device_type;
    auto out = make_tensor<R, D>(shape_of(e));
    eval_into(out, e);
    Recorder<R, D>::record(out, e);
    return out;
  }
}

}  // namespace detail
}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "engine-inl.hpp"
#endif
