#pragma once
// The expression engine. An expression is a tree of `Expr<Op, Args...>` nodes whose leaves
// are tensors and scalars, all held by value so an `auto e = a * b + c;` can never dangle.
// Evaluating a tree is one pass over the output:
//   1. broadcast the leaves' shapes, and coalesce dimensions that are contiguous for every
//      operand (so most strided/broadcast cases become 1 or 2 dimensions);
//   2. split the flat output range between the threads (above a size threshold);
//   3. walk it row by row (a row = the innermost coalesced dimension). A row where every
//      tensor leaf has unit stride is evaluated as one Eigen array expression built from
//      `Eigen::Map`s, so Eigen's SIMD kernels (incl. its vectorized exp/log/sin/...) run;
//      other rows use the scalar form of each op.
#include <tuple>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../tensor.hpp"

namespace reel {

// ------------------------------------------------------------------ leaves and nodes
// A C++ number inside an expression.
template <class T>
struct Scalar : ExprBase {
  using value_type = T;
  using device_type = void;
  T value;
  explicit Scalar(T v) : value(v) {}
};

template <class Op, class... Args>
struct Expr;

namespace detail {
template <class E> struct leaf_traits;
template <class T, class D> struct leaf_traits<Tensor<T, D>> {
  using value_type = T;
  using device_type = D;
};
template <class T> struct leaf_traits<Scalar<T>> {
  using value_type = T;
  using device_type = void;
};
template <class Op, class... A> struct leaf_traits<Expr<Op, A...>> {
  using value_type = typename Expr<Op, A...>::value_type;
  using device_type = typename Expr<Op, A...>::device_type;
};
template <class E> using value_t = typename leaf_traits<std::decay_t<E>>::value_type;
template <class E> using device_t = typename leaf_traits<std::decay_t<E>>::device_type;

template <class... D> struct common_device { using type = void; };
template <class D0, class... D> struct common_device<D0, D...> {
  using rest = typename common_device<D...>::type;
  static_assert(std::is_void_v<D0> || std::is_void_v<rest> || std::is_same_v<D0, rest>,
                "reel: an expression mixes tensors of different devices; move them with .to_device<D>() first");
  using type = std::conditional_t<std::is_void_v<D0>, rest, D0>;
};

template <class... T> struct promote_all;
template <class T> struct promote_all<T> { using type = T; };
template <class A, class B, class... R> struct promote_all<A, B, R...> {
  using type = typename promote_all<promote_t<A, B>, R...>::type;
};
template <class... T> using promote_all_t = typename promote_all<T...>::type;
}  // namespace detail

template <class Op, class... Args>
struct Expr : ExprBase {
  using result_type = typename Op::template result<detail::value_t<Args>...>;
  using value_type = result_type;
  using device_type = typename detail::common_device<detail::device_t<Args>...>::type;
  static_assert(!std::is_void_v<device_type>, "reel: an expression needs at least one tensor operand");
  // The type each argument is converted to before the op's scalar/vector form runs.
  using compute_type = typename Op::template compute<detail::value_t<Args>...>;
  static_assert(!(requires { Op::requires_order; } && is_complex_v<compute_type>),
                "reel: complex numbers have no order, so this op (maximum, minimum, fmax, fmin, clamp, relu, "
                "floor, ...) is not defined for complex tensors");

  Op op;
  std::tuple<Args...> args;
  Expr(Op o, Args... a) : op(std::move(o)), args(std::move(a)...) {}

  template <size_t I> const auto& arg() const { return std::get<I>(args); }
  operator Tensor<value_type, device_type>() const { return detail::materialize(*this); }
  Tensor<value_type, device_type> eval() const { return detail::materialize(*this); }
  auto sum() const { return eval().sum(); }
  auto mean() const { return eval().mean(); }
};

// ------------------------------------------------------------------ op type rules
// Each op struct picks one of these: they say what an op returns and what it computes in.
struct SameTypeRule {  // + - * maximum ...: promoted type; reduced floats compute in float
  template <class... A> using result = detail::promote_all_t<A...>;
  template <class... A> using compute = compute_t<detail::promote_all_t<A...>>;
};
struct FloatRule {  // exp, sqrt, true division: integers give float32
  template <class... A> using result = to_float_t<detail::promote_all_t<A...>>;
  template <class... A> using compute = compute_t<to_float_t<detail::promote_all_t<A...>>>;
};
struct PredicateRule {  // comparisons, isnan: bool out, compute in the promoted type
  template <class... A> using result = bool;
  template <class... A> using compute = compute_t<detail::promote_all_t<A...>>;
};
struct ToRealRule {  // abs, real, imag: complex -> its real type
  template <class A> using result = real_t<A>;
  template <class A> using compute = compute_t<A>;
};

namespace detail {

// Wraps C++ numbers as Scalar leaves typed after the tensor operands (PyTorch's "weak"
// scalar promotion: `int_tensor * 2.5` is float32, `float_tensor * 2` stays float32).
template <class Ref, class S>
auto wrap_scalar(const S& s) {
  if constexpr (is_tensor_v<S> || is_expr_v<S>) {
    return s;
  } else {
    using T = weak_promote_t<Ref, S>;
    return Scalar<T>(convert<T>(s));
  }
}

// Promoted type of the tensor-like operands only (void when there are none).
template <class Acc, class A, bool IsTensor = (is_tensor_v<A> || is_expr_v<A>)> struct fold_operand {
  using type = Acc;
};
template <class A> struct fold_operand<void, A, true> {
  using type = value_t<A>;
};
template <class Acc, class A> struct fold_operand<Acc, A, true> {
  using type = promote_t<Acc, value_t<A>>;
};
template <class Acc, class... A> struct tensor_operands { using type = Acc; };
template <class Acc, class A, class... R> struct tensor_operands<Acc, A, R...> {
  using type = typename tensor_operands<typename fold_operand<Acc, A>::type, R...>::type;
};
}  // namespace detail

// Builds a node, wrapping any C++ numbers among the operands as weakly-typed scalars.
template <class Op, class... A>
auto make_expr(Op op, const A&... a) {
  static_assert((... || (is_tensor_v<A> || is_expr_v<A>)), "reel: an expression needs at least one tensor operand");
  using Ref = typename detail::tensor_operands<void, A...>::type;
  using Ref2 = std::conditional_t<std::is_void_v<Ref>, float, Ref>;
  return Expr<Op, decltype(detail::wrap_scalar<Ref2>(a))...>(std::move(op), detail::wrap_scalar<Ref2>(a)...);
}

namespace detail {

// ------------------------------------------------------------------ shapes of trees
template <class T, class D> void collect_shape(const Tensor<T, D>& t, Shape& out, bool& first) {
  if (first) {
    out = t.sizes();
    first = false;
  } else if (!(out == t.sizes())) {
    out = broadcast_shapes(out, t.sizes());
  }
}
template <class T> void collect_shape(const Scalar<T>&, Shape&, bool&) {}
template <class Op, class... A> void collect_shape(const Expr<Op, A...>& e, Shape& out, bool& first) {
  std::apply([&](const auto&... a) { (collect_shape(a, out, first), ...); }, e.args);
}
template <class E> Shape shape_of(const E& e) {
  Shape s;
  bool first = true;
  collect_shape(e, s, first);
  return s;
}

// ------------------------------------------------------------------ bound evaluators
template <class T>
struct LeafCursor {
  using value_type = T;
  const T* base;
  Shape strides;  // broadcast + coalesced, one per output dim
  int64_t off = 0, inner = 0;
  auto at(int64_t i) const { return convert<compute_t<T>>(base[off + i * inner]); }
  auto eigen(int64_t n) const {
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> m(base + off, n);
    if constexpr (std::is_same_v<compute_t<T>, T>)
      return m;
    else
      return m.template cast<compute_t<T>>();
  }
};
template <class T>
struct ScalarBound {
  compute_t<T> v;
  auto at(int64_t) const { return v; }
  auto eigen(int64_t n) const { return Eigen::Array<compute_t<T>, Eigen::Dynamic, 1>::Constant(n, v); }
};
template <class B> constexpr bool eigen_able() {
  if constexpr (requires { B::kEigen; })
    return B::kEigen;
  else
    return true;
}
template <class C, class A>
auto cast_eigen(const A& a) {
  using S = typename std::decay_t<A>::Scalar;
  if constexpr (std::is_same_v<S, C>)
    return a;
  else
    return a.template cast<C>();
}

template <class Op, class C, class... B>
struct NodeBound {
  Op op;
  std::tuple<B...> args;
  auto at(int64_t i) const {
    return std::apply([&](const auto&... a) { return op.template apply<C>(convert<C>(a.at(i))...); }, args);
  }
  static constexpr bool kArgsEigen = (eigen_able<B>() && ...);
  static constexpr bool has_vec() {
    if constexpr (!kArgsEigen)
      return false;
    else
      return requires(const Op& o, const B&... b) { o.template vec<C>(cast_eigen<C>(b.eigen(1))...); };
  }
  // Eigen can build the row as one array expression when every node below is unary or
  // binary, or supplies a vector form.
  static constexpr bool kEigen = kArgsEigen && (sizeof...(B) <= 2 || has_vec());

  auto eigen(int64_t n) const
    requires kEigen
  {
    return std::apply(
        [&](const auto&... a) {
          if constexpr (has_vec()) {
            return op.template vec<C>(cast_eigen<C>(a.eigen(n))...);
          } else if constexpr (sizeof...(B) == 1) {
            Op o = op;
            return cast_eigen<C>(a.eigen(n)...).unaryExpr([o](const C& x) { return o.template apply<C>(x); });
          } else {
            Op o = op;
            return [&](const auto& x, const auto& y) {
              return cast_eigen<C>(x.eigen(n)).binaryExpr(cast_eigen<C>(y.eigen(n)),
                                                          [o](const C& p, const C& q) { return o.template apply<C>(p, q); });
            }(a...);
          }
        },
        args);
  }
};

template <class T, class D> LeafCursor<T> bind(const Tensor<T, D>& t, const Shape& out) {
  return {t.data_ptr(), broadcast_strides(t.sizes(), t.strides(), out)};
}
template <class T> ScalarBound<T> bind(const Scalar<T>& s, const Shape&) { return {convert<compute_t<T>>(s.value)}; }
template <class Op, class... A> auto bind(const Expr<Op, A...>& e, const Shape& out) {
  using C = typename Expr<Op, A...>::compute_type;
  return std::apply([&](const auto&... a) { return NodeBound<Op, C, decltype(bind(a, out))...>{e.op, {bind(a, out)...}}; },
                    e.args);
}

template <class B, class F> void for_each_leaf(B& b, F&& f) {
  if constexpr (requires { b.strides; })
    f(b);
  else if constexpr (requires { b.args; })
    std::apply([&](auto&... a) { (for_each_leaf(a, f), ...); }, b.args);
}

// Merges dims d and d+1 wherever every operand (all stride arrays) can walk them as one.
inline void coalesce(Shape& sizes, std::vector<Shape*>& strides) {
  // Drop size-1 dims first: their strides are irrelevant.
  for (int64_t d = sizes.size() - 1; d >= 0 && sizes.size() > 1; --d)
    if (sizes[d] == 1) {
      sizes.erase(d);
      for (auto* s : strides) s->erase(d);
    }
  for (int64_t d = sizes.size() - 2; d >= 0; --d) {
    bool ok = true;
    for (auto* s : strides)
      if ((*s)[d] != (*s)[d + 1] * sizes[d + 1]) {
        ok = false;
        break;
      }
    if (ok) {
      sizes[d] *= sizes[d + 1];
      sizes.erase(d + 1);
      for (auto* s : strides) {
        (*s)[d] = (*s)[d + 1];
        s->erase(d + 1);
      }
    }
  }
}

inline int num_threads_for(int64_t n) {
#ifdef _OPENMP
  constexpr int64_t kParallelThreshold = 1 << 15;
  if (n >= kParallelThreshold && !omp_in_parallel()) return omp_get_max_threads();
#endif
  (void)n;
  return 1;
}

// Runs f(begin, end) over [0, n) split between threads.
template <class F>
void parallel_range(int64_t n, F&& f, int64_t grain = 1 << 15) {
#ifdef _OPENMP
  int nt = n >= grain && !omp_in_parallel() ? omp_get_max_threads() : 1;
  if (nt > 1) {
    nt = static_cast<int>(std::min<int64_t>(nt, (n + grain - 1) / grain));
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), k = omp_get_num_threads();
      int64_t b = n * t / k, e = n * (t + 1) / k;
      if (b < e) f(b, e);
    }
    return;
  }
#endif
  (void)grain;
  if (n > 0) f(int64_t(0), n);
}

// Evaluates expression `e` into the (already shaped) destination `out`.
template <class R, class D, class E>
void eval_into(const Tensor<R, D>& out, const E& e) {
  if constexpr (std::is_same_v<D, Meta>) {
    return;  // shapes only
  } else {
    const Shape& osz = out.sizes();
    int64_t n = out.numel();
    if (n == 0) return;
    auto root = bind(e, osz);
    LeafCursor<R> dst{out.mutable_data_ptr(), out.strides()};
    Shape sizes = osz;
    std::vector<Shape*> all{&dst.strides};
    for_each_leaf(root, [&](auto& l) { all.push_back(&l.strides); });
    coalesce(sizes, all);
    if (sizes.empty()) {
      sizes.push_back(1);
      for (auto* s : all) s->push_back(1);
    }
    const int64_t nd = sizes.size();
    const int64_t len = sizes[nd - 1];
    bool unit = dst.strides[nd - 1] == 1;
    for_each_leaf(root, [&](auto& l) {
      l.inner = l.strides[nd - 1];
      unit = unit && l.inner == 1;
    });
    dst.inner = dst.strides[nd - 1];
    R* const obase = const_cast<R*>(dst.base);

    parallel_range(n, [&](int64_t begin, int64_t end) {
      auto r = root;  // per-thread cursors
      int64_t row = begin / len, col = begin % len;
      Shape idx(nd - 1);
      for (int64_t d = nd - 2, q = row; d >= 0; --d) {
        idx[d] = q % sizes[d];
        q /= sizes[d];
      }
      for (int64_t pos = begin; pos < end;) {
        int64_t ooff = 0;
        for (int64_t d = 0; d < nd - 1; ++d) ooff += idx[d] * dst.strides[d];
        for_each_leaf(r, [&](auto& l) {
          int64_t o = 0;
          for (int64_t d = 0; d < nd - 1; ++d) o += idx[d] * l.strides[d];
          l.off = o + col * l.inner;
        });
        int64_t cnt = std::min(len - col, end - pos);
        R* o = obase + ooff + col * dst.inner;
        if constexpr (eigen_able<decltype(r)>()) {
          if (unit) {
            Eigen::Map<Eigen::Array<R, Eigen::Dynamic, 1>> m(o, cnt);
            auto x = r.eigen(cnt);
            using S = typename decltype(x)::Scalar;
            if constexpr (std::is_same_v<S, R>)
              m = x;
            else
              m = x.template cast<R>();
          } else {
            for (int64_t i = 0; i < cnt; ++i) o[i * dst.inner] = convert<R>(r.at(i));
          }
        } else {
          for (int64_t i = 0; i < cnt; ++i) o[i * dst.inner] = convert<R>(r.at(i));
        }
        pos += cnt;
        col = 0;
        for (int64_t d = nd - 2; d >= 0; --d) {
          if (++idx[d] < sizes[d]) break;
          idx[d] = 0;
        }
      }
    });
  }
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

template <class E>
auto materialize(const E& e) {
  if constexpr (is_tensor_v<E>) {
    return e;
  } else {
    using R = typename E::value_type;
    using D = typename E::device_type;
    auto out = make_tensor<R, D>(shape_of(e));
    eval_into(out, e);
    return out;
  }
}

}  // namespace detail
}  // namespace reel
