#pragma once
// Every elementwise op, each defined once: its type rule (base), its scalar form `apply`,
// optionally its Eigen vector form `vec`, and its derivative with respect to each operand,
// `dI(out, args...)`, written as a reel expression of the operands and the result `out`.
// Autograd multiplies `dI` by the incoming gradient (conjugated for complex, as PyTorch's
// convention requires for holomorphic ops) and the forward mode multiplies it by the
// tangent, so one rule serves reverse mode, forward mode, and every order of nesting.
// Ops that are not holomorphic in a complex argument (abs, angle, real, imag, conj) say so
// with `holomorphic = false`; autograd gives them their own rules.
// `differentiable = false` marks ops whose derivative is zero almost everywhere.
// This file: arithmetic, the float-valued and same-type unary ops, complex parts; the ordered
// and selecting ops follow in ops_select.hpp, the op lists and public functions in
// functions.hpp (which includes both: include that one).
#include "../core/config.hpp"
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "engine.hpp"

namespace reel::inline REEL_ABI::detail {
// A row's square root by the exact packet instruction. Eigen 3.4 turns its packet sqrt off
// on AVX-512 unless EIGEN_FAST_MATH (packet_traits: HasSqrt = EIGEN_FAST_MATH), which reel
// keeps off, although psqrt is then the exact instruction (_mm512_sqrt_ps): sqrt and rsqrt
// rows, and every expression holding one, ran one element at a time (1024 floats of
// sqrt(v) / c + eps: 2.3 us against 0.45 us).
template <class C>
struct sqrt_functor {
  C operator()(const C& x) const { return std::sqrt(x); }
  template <class P> P packetOp(const P& x) const { return Eigen::internal::psqrt(x); }
};
}  // namespace reel::detail
template <class C>
struct Eigen::internal::functor_traits<reel::detail::sqrt_functor<C>> {
  enum {
    Cost = 5 * NumTraits<C>::MulCost,
#if !EIGEN_FAST_MATH && defined(EIGEN_VECTORIZE_SSE2)  // (x86: psqrt is _mm*_sqrt_p*, exact)
    PacketAccess = packet_traits<C>::Vectorizable
#else
    PacketAccess = packet_traits<C>::HasSqrt
#endif
  };
};

namespace reel::inline REEL_ABI {

namespace detail {
template <class C, class A>
auto vec_sqrt(const A& a) {
  if constexpr (std::is_floating_point_v<C>)
    return a.unaryExpr(sqrt_functor<C>{});
  else
    return a.sqrt();
}
template <class C> inline constexpr bool vec_float_v = std::is_floating_point_v<C>;
template <class C> inline constexpr bool vec_float_or_complex_v = std::is_floating_point_v<C> || is_complex_v<C>;
// An Eigen row that is one value repeated (how a C++ number enters a row's Eigen expression).
template <class B> inline constexpr bool is_eigen_constant_v = false;
template <class S, class P>
inline constexpr bool is_eigen_constant_v<Eigen::CwiseNullaryOp<Eigen::internal::scalar_constant_op<S>, P>> = true;
template <class C> REEL_HD bool is_nan(const C& x) {
  if constexpr (is_complex_v<C>)
    return std::isnan(x.real()) || std::isnan(x.imag());
  else if constexpr (std::is_floating_point_v<C>)
    return std::isnan(x);
  else
    return false;
}
// Signed integer arithmetic wraps modulo 2^n, as in PyTorch; done in unsigned arithmetic
// because signed overflow is undefined behaviour in C++.
template <class C> inline constexpr bool wraps_v = std::is_integral_v<C> && std::is_signed_v<C> && !std::is_same_v<C, bool>;
template <class C> REEL_HD C wrap_add(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class C> REEL_HD C wrap_sub(C a, C b) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <class C> REEL_HD C wrap_mul(C a, C b) {
  using U = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
  return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
// A packet's lanes through the scalar function f one by one (a vector form's fallback).
template <class C, class P, class F> P lanewise(const P& x, const F& f) {
  alignas(64) C v[Eigen::internal::unpacket_traits<P>::size];
  Eigen::internal::pstore(v, x);
  for (auto& q : v) q = f(q);
  return Eigen::internal::pload<P>(v);
}
// Eigen's vector forms are used for every type but signed integers (whose scalar tail
// would overflow in signed arithmetic).
template <class C> inline constexpr bool vec_arith_v = !wraps_v<C>;
}  // namespace detail

// Complex numbers have no order: ops that compare magnitudes refuse them at compile time.
#define REEL_REQUIRE_ORDERED(T, FN)                                                                       \
  static_assert(!::reel::is_complex_v<T>, "reel::" FN ": complex numbers have no order, so " FN            \
                                          " is not defined for complex tensors (compare abs() or real() instead)")

// ================================================================== arithmetic
struct AddOp : SameTypeRule {
  template <class C> REEL_HD C apply(C a, C b) const {
    if constexpr (detail::wraps_v<C>)
      return detail::wrap_add(a, b);
    else
      return a + b;
  }
  template <class C, class A, class B>
    requires detail::vec_arith_v<C>
  auto vec(const A& a, const B& b) const { return a + b; }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 1; }
  template <class O, class A, class B> auto d1(const O&, const A&, const B&) const { return 1; }
};
struct SubOp : SameTypeRule {
  template <class C> REEL_HD C apply(C a, C b) const {
    if constexpr (detail::wraps_v<C>)
      return detail::wrap_sub(a, b);
    else
      return a - b;
  }
  template <class C, class A, class B>
    requires detail::vec_arith_v<C>
  auto vec(const A& a, const B& b) const { return a - b; }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 1; }
  template <class O, class A, class B> auto d1(const O&, const A&, const B&) const { return -1; }
};
struct MulOp : SameTypeRule {
  template <class C> REEL_HD C apply(C a, C b) const {
    if constexpr (std::is_same_v<C, bool>)
      return a && b;
    else if constexpr (detail::wraps_v<C>)
      return detail::wrap_mul(a, b);
    else
      return a * b;
  }
  template <class C, class A, class B>
    requires detail::vec_arith_v<C>
  auto vec(const A& a, const B& b) const { return a * b; }
  template <class O, class A, class B> auto d0(const O&, const A&, const B& b) const { return b; }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B&) const { return a; }
};
struct DivOp : FloatRule {  // true division, as torch.div
  template <class C> REEL_HD C apply(C a, C b) const { return a / b; }
  template <class C, class A, class B> auto vec(const A& a, const B& b) const { return a / b; }
  template <class O, class A, class B> auto d0(const O&, const A&, const B& b) const { return reciprocal(b); }
  template <class O, class A, class B> auto d1(const O& out, const A&, const B& b) const { return -out / b; }
};
struct NegOp : SameTypeRule {
  template <class C> REEL_HD C apply(C a) const {
    if constexpr (detail::wraps_v<C>)
      return detail::wrap_sub(C(0), a);
    else
      return -a;
  }
  template <class C, class A>
    requires detail::vec_arith_v<C>
  auto vec(const A& a) const { return -a; }
  template <class O, class A> auto d0(const O&, const A&) const { return -1; }
};
// pow(x, number) follows PyTorch's scalar-exponent kernel (sqrt for 0.5, products for small
// integers: so pow(-inf, 0.5) is NaN and pow(-0.0, 0.5) is -0.0); a tensor exponent is
// std::pow's (pow(-inf, 0.5) = inf), as PyTorch's tensor-exponent kernel.
struct PowOp : SameTypeRule {
  bool number_exponent = false;
  constexpr PowOp(bool number = false) : number_exponent(number) {}
  template <class A, class B> static PowOp for_operands() { return PowOp(is_cpp_scalar_v<B>); }
  template <class C> REEL_HD C apply(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (b < 0) return a == 1 ? C(1) : a == -1 ? ((b & 1) ? C(-1) : C(1)) : C(0);
      }
      C r = 1;
      using U = std::make_unsigned_t<C>;
      U e = static_cast<U>(b), x = static_cast<U>(a), acc = 1;
      for (; e; e >>= 1, x *= x)
        if (e & 1) acc *= x;  // wraps modulo 2^n like PyTorch's integer pow
      r = static_cast<C>(acc);
      return r;
    } else if constexpr (is_complex_v<C>) {
      return std::pow(a, b);
    } else if (!number_exponent) {
      return std::pow(a, b);
    } else {
      // The exponents physics codes write (r^-3, x^2, and -4 in r^-3's derivative) as
      // products, like PyTorch's CPU kernel does for 2, 3, -1, -2, +-0.5 (we add +-4 and -3):
      // within 2 ulp of pow and several times faster. No vector form: Eigen's vectorized pow
      // is slower than glibc's scalar one.
      if (b == C(0.5)) return std::sqrt(a);
      if (b == C(-0.5)) return C(1) / std::sqrt(a);
      if (b >= C(-4) && b <= C(4) && b == static_cast<C>(static_cast<int>(b)) && b != C(0) && b != C(1)) {
        const int n = static_cast<int>(b);
        const int m = n < 0 ? -n : n;
        const C s = a * a;
        const C p = m == 2 ? s : m == 3 ? s * a : m == 4 ? s * s : a;
        return n < 0 ? C(1) / p : p;
      }
      return std::pow(a, b);
    }
  }
  // Vector form only for one exponent over the row (pow(x, -3.0)): see PowConstFn below.
  template <class C, class A, class B>
    requires(detail::vec_float_v<C> && detail::is_eigen_constant_v<B>)
  auto vec(const A& a, const B& b) const;
  // b x^(b-1), and 0 where b == 0 (PyTorch: also at x = 0 and NaN, where the product is NaN)
  template <class O, class A, class B> auto d0(const O&, const A& a, const B& b) const {
    // (the same kernel: a number exponent b - 1 stays one)
    return where(eq(b, 0), 0, b * make_expr(PowOp(number_exponent), a, b - 1));
  }
  // x^y ln x, taken as 0 where x == 0 and y >= 0 (the limit; PyTorch does the same).
  template <class O, class A, class B> auto d1(const O& out, const A& a, const B& b) const {
    return where(logical_and(eq(a, 0), ge(real(b), 0)), 0, out * log(a));
  }
};

namespace detail {
// x^e with e fixed over a row, on Eigen packets: the same products, divisions and square
// roots as PowOp::apply (so the same roundings), several lanes at a time; other exponents run
// the scalar form lane by lane.
template <class C>
struct PowConstFn {
  C e;
  // What the row computes, decided once: an int, so the packet loop keeps it in a register
  // (a double member could alias the row's stores and would be reloaded and re-tested per
  // packet). 0: the scalar form; kSqrt / kRsqrt: x^(+-0.5); else the integer exponent.
  static constexpr int kSqrt = 100, kRsqrt = 101;
  int kind;
  PowConstFn(C ex, bool number_exponent) : e(ex), kind(number_exponent ? classify(ex) : 0) {}
  static int classify(C e) {
    if (e == C(0.5)) return kSqrt;
    if (e == C(-0.5)) return kRsqrt;
    if (e >= C(-4) && e <= C(4) && e == static_cast<C>(static_cast<int>(e)) && e != C(0) && e != C(1))
      return static_cast<int>(e);
    return 0;
  }
  // (kind 0 runs std::pow, as the scalar form does for an exponent it has no fast path for)
  C operator()(const C& x) const { return PowOp(kind != 0).template apply<C>(x, e); }
  template <class P>
  P packetOp(const P& x) const {
    namespace ei = Eigen::internal;
    const P one = ei::pset1<P>(C(1));
    const int k = kind;
    if (k == kSqrt) return ei::psqrt(x);
    if (k == kRsqrt) return ei::pdiv(one, ei::psqrt(x));
    if (k != 0) {
      const int m = k < 0 ? -k : k;
      const P s = ei::pmul(x, x);
      const P p = m == 2 ? s : m == 3 ? ei::pmul(s, x) : m == 4 ? ei::pmul(s, s) : x;
      return k < 0 ? ei::pdiv(one, p) : p;
    }
    return lanewise<C>(x, *this);
  }
};
}  // namespace detail
template <class C, class A, class B>
  requires(detail::vec_float_v<C> && detail::is_eigen_constant_v<B>)
auto PowOp::vec(const A& a, const B& b) const {
  return a.unaryExpr(detail::PowConstFn<C>(b.functor().m_other, number_exponent));
}

// ================================================================== float-valued unary
namespace detail {
// Eigen's rational tanh for float packets (what Eigen's fast math would use; exact sqrt needs
// fast math off, config.hpp).
struct FastTanhFloat {
  float operator()(float x) const { return Eigen::internal::generic_fast_tanh_float(x); }
  template <class P> P packetOp(const P& x) const { return Eigen::internal::generic_fast_tanh_float(x); }
};
// exp and log on packets, with the lanes Eigen gets wrong done by the C library: beyond exp's
// clamps (|x| past about 87 for float, 708 for double: Eigen gives a denormal for exp(-inf),
// where the answer is 0) and log of a positive denormal (Eigen's is log of the smallest normal).
template <class C, bool Log>
struct ExpLogFn {
  static constexpr C lo = std::is_same_v<C, float> ? C(-87) : C(-708), hi = -lo;
  C operator()(C x) const { return Log ? std::log(x) : std::exp(x); }
  template <class P> P packetOp(const P& x) const {
    namespace ei = Eigen::internal;
    P bad;
    if constexpr (Log)
      bad = ei::pand(ei::pcmp_lt(ei::pzero(x), x), ei::pcmp_lt(x, ei::pset1<P>(std::numeric_limits<C>::min())));
    else
      bad = ei::por(ei::pcmp_lt(x, ei::pset1<P>(lo)), ei::pcmp_lt(ei::pset1<P>(hi), x));
    if (!ei::predux_any(bad)) return Log ? ei::plog(x) : ei::pexp(x);
    return lanewise<C>(x, *this);
  }
};
template <class C, bool Log, class A> auto vec_exp_log(const A& a) {
  if constexpr (std::is_floating_point_v<C>)
    return a.unaryExpr(ExpLogFn<C, Log>{});
  else if constexpr (Log)
    return a.log();
  else
    return a.exp();
}
template <class C, class A> auto vec_tanh(const A& a) {
  if constexpr (std::is_same_v<C, float>)
    return a.unaryExpr(FastTanhFloat{});
  else
    return a.tanh();
}
}  // namespace detail

#define REEL_FLOAT_UNARY(NAME, STRUCT, SCALAR, VEC, DERIV)                                        \
  struct STRUCT : FloatRule {                                                                     \
    template <class C> REEL_HD C apply(C x) const { return SCALAR; }                                      \
    template <class C, class A>                                                                   \
      requires detail::vec_float_or_complex_v<C>                                                  \
    auto vec(const A& a) const { return VEC; }                                                    \
    template <class O, class X> auto d0([[maybe_unused]] const O& out, [[maybe_unused]] const X& x) const { \
      return DERIV;                                                                               \
    }                                                                                             \
  };

REEL_FLOAT_UNARY(exp, ExpOp, std::exp(x), (detail::vec_exp_log<C, false>(a)), out)
REEL_FLOAT_UNARY(log, LogOp, std::log(x), (detail::vec_exp_log<C, true>(a)), reciprocal(x))
REEL_FLOAT_UNARY(log1p, Log1pOp, std::log1p(x), a.log1p(), reciprocal(x + 1))
REEL_FLOAT_UNARY(expm1, Expm1Op, std::expm1(x), a.expm1(), out + 1)
REEL_FLOAT_UNARY(sqrt, SqrtOp, std::sqrt(x), detail::vec_sqrt<C>(a), 0.5 / out)
REEL_FLOAT_UNARY(rsqrt, RsqrtOp, C(1) / std::sqrt(x), detail::vec_sqrt<C>(a).inverse(), -0.5 * out * out * out)
REEL_FLOAT_UNARY(sin, SinOp, std::sin(x), a.sin(), cos(x))
REEL_FLOAT_UNARY(cos, CosOp, std::cos(x), a.cos(), -sin(x))
REEL_FLOAT_UNARY(tan, TanOp, std::tan(x), a.tan(), 1 + square(out))
REEL_FLOAT_UNARY(tanh, TanhOp, std::tanh(x), detail::vec_tanh<C>(a), 1 - square(out))
REEL_FLOAT_UNARY(sigmoid, SigmoidOp, C(1) / (C(1) + std::exp(-x)), (C(1) + detail::vec_exp_log<C, false>(-a)).inverse(),
                 out * (1 - out))  // (PyTorch's formula: Eigen's logistic is a denormal at -inf)
REEL_FLOAT_UNARY(reciprocal, ReciprocalOp, C(1) / x, a.inverse(), -square(out))
#undef REEL_FLOAT_UNARY
// erf: a scalar form only (Eigen's vector erf lives in its unsupported modules).
struct ErfOp : FloatRule {
  template <class C> REEL_HD C apply(C x) const {
    static_assert(!is_complex_v<C>, "reel::erf: not defined for complex tensors");
    return std::erf(x);
  }
  template <class O, class X> auto d0(const O&, const X& x) const { return 1.1283791670955126 * exp(-square(x)); }
};

// gelu (exact and tanh approximation) and silu, each one op with PyTorch's derivative
// formulas (GeluBackward, SiluBackward): so also NaN where those give inf * 0 (at +-inf).
struct GeluOp : FloatRule {
  template <class C> REEL_HD C apply(C x) const {
    static_assert(!is_complex_v<C>, "reel::gelu: not defined for complex tensors");
    return x * C(0.5) * (C(1) + std::erf(x * C(0.7071067811865476)));
  }
  template <class O, class X> auto d0(const O&, const X& x) const {
    return 0.5 * (1 + erf(x * 0.7071067811865476)) + x * (0.3989422804014327 * exp(-0.5 * square(x)));
  }
};
struct GeluTanhOp : FloatRule {
  static constexpr double kBeta = 0.7978845608028654, kKappa = 0.044715;  // sqrt(2 / pi)
  template <class C> REEL_HD C apply(C x) const {
    static_assert(!is_complex_v<C>, "reel::gelu: not defined for complex tensors");
    return C(0.5) * x * (C(1) + std::tanh(C(kBeta) * (x + C(kKappa) * x * x * x)));
  }
  template <class O, class X> auto d0(const O&, const X& x) const {
    auto t = tanh(kBeta * (x + kKappa * x * square(x)));
    return 0.5 * (1 + t) + 0.5 * x * (1 - square(t)) * (kBeta * (1 + 3 * kKappa * square(x)));
  }
};
struct SiluOp : FloatRule {
  template <class C> REEL_HD C apply(C x) const {
    static_assert(!is_complex_v<C>, "reel::silu: not defined for complex tensors");
    return x / (C(1) + std::exp(-x));
  }
  template <class O, class X> auto d0(const O&, const X& x) const {
    auto s = sigmoid(x);
    return s * (1 + x * (1 - s));
  }
};

// ================================================================== same-type unary
struct SquareOp : SameTypeRule {
  template <class C> REEL_HD C apply(C x) const {
    if constexpr (detail::wraps_v<C>)
      return detail::wrap_mul(x, x);
    else
      return x * x;
  }
  template <class C, class A>
    requires detail::vec_arith_v<C>
  auto vec(const A& a) const { return a.square(); }
  template <class O, class X> auto d0(const O&, const X& x) const { return 2 * x; }
};
struct ReluOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class C> REEL_HD C apply(C x) const {
    REEL_REQUIRE_ORDERED(C, "relu");
    return x < C(0) ? C(0) : x;  // NaN and -0 pass, as max(x, 0) in PyTorch
  }
  // PyTorch's threshold_backward: the gradient is zeroed where relu(x) <= 0, so it passes at NaN
  template <class O, class X> auto d0(const O&, const X& x) const {
    return cast<detail::value_t<X>>(logical_not(le(x, 0)));
  }
};
struct AbsOp : ToRealRule {
  static constexpr bool holomorphic = false;
  template <class C> REEL_HD auto apply(C x) const {
    if constexpr (std::is_unsigned_v<C> || std::is_same_v<C, bool>)
      return x;
    else if constexpr (detail::wraps_v<C>)
      return x < 0 ? detail::wrap_sub(C(0), x) : x;  // abs(INT_MIN) wraps to INT_MIN
    else
      return std::abs(x);
  }
  template <class C, class A>
    requires(std::is_floating_point_v<C> || is_complex_v<C>)
  auto vec(const A& a) const { return a.abs(); }
  template <class O, class X> auto d0(const O&, const X& x) const { return sgn(x); }
  // complex x: d|x| = Re(conj(u) dx) with u = x / |x| (0 at 0); the gradient of a real loss
  // is g u. u is written with differentiable ops (sgn's derivative is 0), for higher orders.
  template <class X> static auto unit(const X& x) { return where(eq(abs(x), 0), 0, x / abs(x)); }
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O&, const X& x) const { return g * unit(x); }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O&, const X& x) const {
    return real(conj(unit(x)) * t);
  }
};
// sign for real numbers; sgn(z) = z / |z| (0 at 0) extends it to complex numbers. Real: the
// derivative is 0 almost everywhere. Complex (PyTorch's sgn_backward): with s = sgn(z),
// ds/dz = 1 / (2|z|) and ds/dconj(z) = -s^2 / (2|z|), so the gradient of a real loss is
// (g - conj(g) s^2) / (2|z|) and the tangent (t - conj(t) s^2) / (2|z|); 0 at z = 0.
struct SignOp : SameTypeRule {
  static constexpr bool differentiable = false, complex_differentiable = true, holomorphic = false;
  template <class V, class O, class X> static auto complex_rule(const V& v, const O& out, const X& x) {
    return where(eq(abs(x), 0), 0, (v - conj(v) * square(out)) / (2 * abs(x)));
  }
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O& out, const X& x) const {
    return complex_rule(g, out, x);
  }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O& out, const X& x) const {
    return complex_rule(t, out, x);
  }
  template <class C> REEL_HD C apply(C x) const {
    if constexpr (is_complex_v<C>) {
      auto m = std::abs(x);
      return m == 0 ? C(0) : x / m;
    } else if constexpr (std::is_unsigned_v<C> || std::is_same_v<C, bool>) {
      return C(x != C(0));
    } else {
      return C((C(0) < x) - (x < C(0)));  // 0 at NaN and +0 at -0, as in PyTorch
    }
  }
  template <class O, class X> auto d0(const O&, const X&) const { return 0; }
};
#define REEL_ROUNDING(STRUCT, NAME, FN, VEC)                                                       \
  struct STRUCT : SameTypeRule {                                                                   \
    static constexpr bool differentiable = false;                                                  \
    static constexpr bool requires_order = true;                                                   \
    template <class C> REEL_HD C apply(C x) const {                                                        \
      REEL_REQUIRE_ORDERED(C, NAME);                                                               \
      if constexpr (std::is_floating_point_v<C>)                                                   \
        return FN(x);                                                                              \
      else                                                                                         \
        return x;                                                                                  \
    }                                                                                              \
    /* Eigen's kernels without SSE4.1 lose the sign of a zero result (floor(-0.0), ceil(-0.4));  \
       a zero result takes the input's sign (x * 0), as the scalar functions give it */            \
    template <class C, class A>                                                                    \
      requires detail::vec_float_v<C>                                                              \
    auto vec(const A& a) const { return ((VEC) == C(0)).select(a * C(0), VEC); }                 \
    template <class O, class X> auto d0(const O&, const X&) const { return 0; }                    \
  };
REEL_ROUNDING(FloorOp, "floor", std::floor, a.floor())
REEL_ROUNDING(CeilOp, "ceil", std::ceil, a.ceil())
REEL_ROUNDING(RoundOp, "round", std::nearbyint, a.rint())  // half to even, as torch.round
REEL_ROUNDING(TruncOp, "trunc", std::trunc, (a.abs().floor() * a.sign()))
#undef REEL_ROUNDING

// ================================================================== complex parts
struct RealOp : ToRealRule {
  static constexpr bool holomorphic = false;
  template <class C> REEL_HD auto apply(C x) const { return std::real(x); }
  template <class O, class X> auto d0(const O&, const X&) const { return 1; }
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O&, const X&) const { return g; }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O&, const X&) const { return real(t); }
};
struct ImagOp : ToRealRule {
  static constexpr bool holomorphic = false;
  template <class C> REEL_HD auto apply(C x) const {
    static_assert(is_complex_v<C>, "reel::imag: imag is not implemented for tensors with non-complex dtypes");
    return std::imag(x);
  }
  template <class O, class X> auto d0(const O&, const X&) const { return 0; }
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O&, const X&) const {
    return g * std::complex<double>(0, 1);
  }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O&, const X&) const { return imag(t); }
};
struct ConjOp : SameTypeRule {
  static constexpr bool holomorphic = false;
  template <class C> REEL_HD C apply(C x) const {
    if constexpr (is_complex_v<C>)
      return std::conj(x);
    else
      return x;
  }
  template <class O, class X> auto d0(const O&, const X&) const { return 1; }
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O&, const X&) const { return conj(g); }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O&, const X&) const { return conj(t); }
};
struct AngleOp {
  static constexpr bool holomorphic = false;
  template <class A> using result = to_float_t<real_t<A>>;
  template <class A> using compute = compute_t<std::conditional_t<is_complex_v<A>, A, to_float_t<A>>>;
  template <class C> REEL_HD auto apply(C x) const {
    if constexpr (is_complex_v<C>) {
      return std::arg(x);
    } else {
      return detail::is_nan(x) ? x : (x < C(0) ? C(M_PI) : C(0));
    }
  }
  template <class O, class X> auto d0(const O&, const X&) const { return 0; }
  // complex x = r e^{i angle}: d angle = Im(conj(x) dx) / r^2; gradient g i x / r^2 (0 at 0)
  template <size_t K, class G, class O, class X> auto complex_vjp(const G& g, const O&, const X& x) const {
    return where(eq(abs(x), 0), 0, g * x * std::complex<double>(0, 1) / square(abs(x)));
  }
  template <size_t K, class Tn, class O, class X> auto complex_jvp(const Tn& t, const O&, const X& x) const {
    return where(eq(abs(x), 0), 0, imag(conj(x) * t) / square(abs(x)));
  }
};

}  // namespace reel

template <>
struct Eigen::internal::functor_traits<reel::detail::FastTanhFloat> {
  enum { Cost = 30 * NumTraits<float>::MulCost, PacketAccess = packet_traits<float>::Vectorizable };
};
template <class C, bool Log>
struct Eigen::internal::functor_traits<reel::detail::ExpLogFn<C, Log>> {
  enum {
    Cost = functor_traits<scalar_exp_op<C>>::Cost,
    PacketAccess = Log ? packet_traits<C>::HasLog : packet_traits<C>::HasExp
  };
};
// PowConstFn has a packet form (Eigen then evaluates pow(x, -3.0) rows vectorized).
template <class C>
struct Eigen::internal::functor_traits<reel::detail::PowConstFn<C>> {
  enum { Cost = 8 * NumTraits<C>::MulCost, PacketAccess = packet_traits<C>::Vectorizable };
};
