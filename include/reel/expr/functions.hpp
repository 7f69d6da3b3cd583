#pragma once
// The elementwise ops' public functions: the op lists (each op named once), the functions and
// operators they make, the in-place forms, and the functions that take more than operands
// (cast, where, clamp, nan_to_num).
#include "../core/config.hpp"

#include "ops_binary.hpp"

namespace reel::inline REEL_ABI {

// ================================================================== the public functions
// The elementwise ops, each named once: X(function, op struct[, has an in-place form x.fn_()],
// defined for complex tensors). These lists make the public functions and in-place forms
// below, the instantiations of the ops' autograd tables that reel::runtime compiles once for
// float, double and (the ops defined for them) complex<float> / complex<double>
// (reel/runtime/instantiate_ops.inc), and the checks every op gets in
// tests/test_check_ad_lists.cpp and tests/test_check_ad_complex.cpp.
#define REEL_UNARY_OPS(X) \
  X(neg, NegOp, 1, 1) \
  X(exp, ExpOp, 1, 1) \
  X(log, LogOp, 1, 1) \
  X(log1p, Log1pOp, 1, 0) \
  X(expm1, Expm1Op, 1, 0) \
  X(sqrt, SqrtOp, 1, 1) \
  X(rsqrt, RsqrtOp, 1, 1) \
  X(sin, SinOp, 1, 1) \
  X(cos, CosOp, 1, 1) \
  X(tan, TanOp, 1, 1) \
  X(tanh, TanhOp, 1, 1) \
  X(sigmoid, SigmoidOp, 1, 1) \
  X(erf, ErfOp, 1, 0) \
  X(reciprocal, ReciprocalOp, 1, 1) \
  X(square, SquareOp, 1, 1) \
  X(relu, ReluOp, 1, 0) \
  X(abs, AbsOp, 1, 1) \
  X(sgn, SignOp, 0, 1) \
  X(floor, FloorOp, 1, 0) \
  X(ceil, CeilOp, 1, 0) \
  X(round, RoundOp, 1, 0) \
  X(trunc, TruncOp, 1, 0) \
  X(real, RealOp, 0, 1) \
  X(conj, ConjOp, 0, 1) \
  X(angle, AngleOp, 0, 1) \
  X(isnan, IsNanOp, 0, 1) \
  X(isinf, IsInfOp, 0, 1) \
  X(isfinite, IsFiniteOp, 0, 1) \
  X(logical_not, LogicalNotOp, 0, 1)
#define REEL_COMPLEX_ONLY_OPS(X) X(imag, ImagOp, 0, 1)  // (a compile error for real tensors)
#define REEL_BINARY_OPS(X) \
  X(add, AddOp, 1) \
  X(sub, SubOp, 1) \
  X(mul, MulOp, 1) \
  X(div, DivOp, 1) \
  X(pow, PowOp, 1) \
  X(maximum, MaximumOp, 0) \
  X(minimum, MinimumOp, 0) \
  X(fmax, FmaxOp, 0) \
  X(fmin, FminOp, 0) \
  X(eq, EqOp, 1) \
  X(ne, NeOp, 1) \
  X(lt, LtOp, 0) \
  X(le, LeOp, 0) \
  X(gt, GtOp, 0) \
  X(ge, GeOp, 0) \
  X(logical_and, LogicalAndOp, 1) \
  X(logical_or, LogicalOrOp, 1) \
  X(atan2, Atan2Op, 0) \
  X(hypot, HypotOp, 0) \
  X(copysign, CopysignOp, 0) \
  X(logaddexp, LogaddexpOp, 0) \
  X(xlogy, XlogyOp, 0) \
  X(nextafter, NextafterOp, 0) \
  X(fmod, FmodOp, 0) \
  X(remainder, RemainderOp, 0) \
  X(floor_divide, FloorDivideOp, 0)

template <class A, class B> concept BinaryOperands =
    (TensorLike<A> || TensorLike<B>) && (TensorLike<A> || is_cpp_scalar_v<A>) && (TensorLike<B> || is_cpp_scalar_v<B>);

#define REEL_DEFINE_UNARY(NAME, OP) \
  template <TensorLike X> auto NAME(const X& x) { return make_expr(OP{}, x); }
// (An op that depends on its operands' kinds says so with Op::for_operands<A, B>(): pow.)
namespace detail {
template <class Op, class A, class B> Op binary_op() {
  if constexpr (requires { Op::template for_operands<A, B>(); })
    return Op::template for_operands<A, B>();
  else
    return Op{};
}
// (An op that checks its operands first says so with Op::check(a, b): integer division by 0.)
template <class Op, class A, class B> void check_operands(const A& a, const B& b) {
  if constexpr (requires { Op::check(a, b); }) Op::check(a, b);
}
}  // namespace detail
#define REEL_DEFINE_BINARY(NAME, OP, ...) \
  template <class A, class B> requires BinaryOperands<A, B> auto NAME(const A& a, const B& b) { \
    detail::check_operands<OP>(a, b); \
    return make_expr(detail::binary_op<OP, A, B>(), a, b); \
  }

#define REEL_DEFINE_UNARY_X(NAME, OP, INPLACE, CPLX) REEL_DEFINE_UNARY(NAME, OP)
REEL_UNARY_OPS(REEL_DEFINE_UNARY_X)
REEL_COMPLEX_ONLY_OPS(REEL_DEFINE_UNARY_X)
REEL_BINARY_OPS(REEL_DEFINE_BINARY)
#undef REEL_DEFINE_UNARY_X

// sign is the real-valued function; complex tensors use sgn (as in PyTorch).
template <TensorLike X>
auto sign(const X& x) {
  static_assert(!is_complex_v<detail::value_t<X>>,
                "reel::sign: sign is not defined for complex tensors; use sgn (z / |z|) instead");
  return make_expr(SignOp{}, x);
}

template <class U, TensorLike X>
auto cast(const X& x) {
  return make_expr(CastOp<U>{}, x);
}
template <class U, TensorLike X>
auto saturating_cast(const X& x) {
  return make_expr(SaturatingCastOp<U>{}, x);
}
// For derivative rules written generically: a number stays a number.
template <class U, class S>
  requires is_cpp_scalar_v<S>
auto cast(const S& s) {
  return convert<U>(s);
}

template <class Cd, class A, class B>
  requires(TensorLike<Cd> && (TensorLike<A> || is_cpp_scalar_v<A>) && (TensorLike<B> || is_cpp_scalar_v<B>))
auto where(const Cd& cond, const A& a, const B& b) {
  static_assert(std::is_same_v<detail::value_t<Cd>, bool>, "reel::where: the condition must be a bool tensor");
  return make_expr(WhereOp{}, cond, a, b);
}

template <TensorLike X>
auto clamp(const X& x, Bound min, Bound max) {
  using T = detail::value_t<X>;
  return make_expr(ClampOp<T>(min, max, "clamp"), x);
}
template <TensorLike X, class L, class H>
  requires((TensorLike<L> || TensorLike<H>) && (TensorLike<L> || is_cpp_scalar_v<L>) && (TensorLike<H> || is_cpp_scalar_v<H>))
auto clamp(const X& x, const L& min, const H& max) {  // tensor bounds (broadcasting)
  return make_expr(ClampTensorOp{}, x, min, max);
}
template <TensorLike X> auto clamp_min(const X& x, Bound min) { return make_expr(ClampOp<detail::value_t<X>>(min, {}, "clamp_min"), x); }
template <TensorLike X> auto clamp_max(const X& x, Bound max) { return make_expr(ClampOp<detail::value_t<X>>({}, max, "clamp_max"), x); }
// With a tensor bound PyTorch's clamp_min / clamp_max are maximum / minimum, gradients included
// (0.5 / 0.5 at ties, in full to both where either is NaN).
template <TensorLike X, TensorLike L> auto clamp_min(const X& x, const L& min) { return maximum(x, min); }
template <TensorLike X, TensorLike H> auto clamp_max(const X& x, const H& max) { return minimum(x, max); }

template <TensorLike X>
auto nan_to_num(const X& x, double nan = 0.0, std::optional<double> posinf = {}, std::optional<double> neginf = {}) {
  using T = detail::value_t<X>;
  using R = real_t<compute_t<T>>;
  using L = std::numeric_limits<real_t<T>>;
  NanToNumOp<T> op;
  op.nan = static_cast<R>(nan);
  op.posinf = posinf ? static_cast<R>(*posinf) : static_cast<R>(static_cast<double>(L::max()));
  op.neginf = neginf ? static_cast<R>(*neginf) : static_cast<R>(static_cast<double>(L::lowest()));
  return make_expr(op, x);
}

template <class A, class B> requires BinaryOperands<A, B> auto operator+(const A& a, const B& b) { return add(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator-(const A& a, const B& b) { return sub(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator*(const A& a, const B& b) { return mul(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator/(const A& a, const B& b) { return div(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator<(const A& a, const B& b) { return lt(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator<=(const A& a, const B& b) { return le(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator>(const A& a, const B& b) { return gt(a, b); }
template <class A, class B> requires BinaryOperands<A, B> auto operator>=(const A& a, const B& b) { return ge(a, b); }
template <TensorLike X> auto operator-(const X& x) { return neg(x); }

// In-place forms: x.op_() for every unary op writes into x's storage.
#define REEL_INPLACE(NAME, OP, INPLACE, CPLX) REEL_INPLACE_##INPLACE(NAME)
#define REEL_INPLACE_0(NAME)
#define REEL_INPLACE_1(NAME) \
  template <class T, class D> Tensor<T, D> NAME##_(Tensor<T, D> x) { return x.copy_(NAME(x)); }
REEL_UNARY_OPS(REEL_INPLACE)
#undef REEL_INPLACE
#undef REEL_INPLACE_0
#undef REEL_INPLACE_1
template <class T, class D> Tensor<T, D> clamp_(Tensor<T, D> x, Bound min, Bound max) { return x.copy_(clamp(x, min, max)); }

}  // namespace reel
