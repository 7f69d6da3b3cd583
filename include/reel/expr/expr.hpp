#pragma once
// Expression trees: `Expr<Op, Args...>` nodes over tensor and scalar leaves (all held by value,
// so an `auto e = a * b + c;` never dangles), the op type rules that give a node its value and
// compute types, and the broadcast shape of a tree. Evaluating a tree is engine.hpp's work.
#include "../core/config.hpp"
#include <tuple>
#include <utility>

#include "../core/tensor.hpp"

namespace reel::inline REEL_ABI {

// ------------------------------------------------------------------ leaves and nodes
// A C++ number inside an expression.
template <class T>
struct Scalar : ExprBase {
  using value_type = T;
  using device_type = void;
  // held in the compute type: with a half / bfloat16 tensor a C++ number stays a float (PyTorch's
  // op-math: half_tensor * 70000 is 35008 at 0.5, not inf), while the result type stays T
  compute_t<T> value;
  explicit Scalar(compute_t<T> v) : value(v) {}
  explicit Scalar(T v)
    requires(!std::is_same_v<T, compute_t<T>>)
      : value(convert<compute_t<T>>(v)) {}
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

template <class Op> constexpr bool requires_order_f() {
  if constexpr (requires { Op::requires_order; })
    return Op::requires_order;
  else
    return false;
}
template <class Op> inline constexpr bool requires_order_v = requires_order_f<Op>();

template <class... T> struct promote_all;
template <class T> struct promote_all<T> { using type = T; };
template <class A, class B, class... R> struct promote_all<A, B, R...> {
  using type = typename promote_all<promote_t<A, B>, R...>::type;
};
template <class... T> using promote_all_t = typename promote_all<T...>::type;
}  // namespace detail

namespace detail {
template <class E> Shape shape_of(const E& e);
}
template <class Op, class... Args>
struct Expr : ExprBase {
  static_assert((!is_fp4_v<detail::value_t<Args>> && ...),
                "reel: float4_e2m1fn_x2 packs two FP4 values per element; unpack_fp4() them to compute");
  using result_type = typename Op::template result<detail::value_t<Args>...>;
  using value_type = result_type;
  using device_type = typename detail::common_device<detail::device_t<Args>...>::type;
  static_assert(!std::is_void_v<device_type>, "reel: an expression needs at least one tensor operand");
  // The type each argument is converted to before the op's scalar/vector form runs.
  using compute_type = typename Op::template compute<detail::value_t<Args>...>;
  static_assert(!(detail::requires_order_v<Op> && is_complex_v<compute_type>),
                "reel: complex numbers have no order, so this op (maximum, minimum, fmax, fmin, clamp, relu, "
                "floor, ...) is not defined for complex tensors");

  Op op;
  std::tuple<Args...> args;
  Expr(Op o, Args... a) : op(std::move(o)), args(std::move(a)...) {}

  template <size_t I> const auto& arg() const { return std::get<I>(args); }
  operator Tensor<value_type, device_type>() const { return detail::materialize(*this); }
  Tensor<value_type, device_type> eval() const { return detail::materialize(*this); }
  // The Tensor members a PyTorch user calls on a result: each evaluates the expression once
  // (an expression held in `auto` stays unevaluated until one of these, or a conversion to
  // Tensor, asks for its values).
  auto sum() const;   // (ops/reductions.hpp: reduced as it is evaluated where it can be)
  auto mean() const;
  Tensor<value_type, device_type> requires_grad_(bool on = true) const {
    auto t = eval();
    t.requires_grad_(on);
    return t;
  }
  Tensor<value_type, device_type> clone() const { return eval(); }  // (a fresh tensor already)
  Tensor<value_type, device_type> detach() const { return eval().detach(); }
  value_type item() const { return eval().item(); }
  std::vector<value_type> to_vector() const { return eval().to_vector(); }
  Shape sizes() const { return detail::shape_of(*this); }  // (no evaluation: the broadcast shape)
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  Tensor<value_type, device_type> reshape(Shape s) const { return eval().reshape(std::move(s)); }
  Tensor<value_type, device_type> view(Shape s) const { return eval().view(std::move(s)); }
  template <class U> Tensor<U, device_type> to() const { return eval().template to<U>(); }
  void backward() const { eval().backward(); }
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
    return Scalar<T>(convert<compute_t<T>>(s));
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

}  // namespace detail
}  // namespace reel
