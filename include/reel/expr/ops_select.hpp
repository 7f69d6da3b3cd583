#pragma once
// The elementwise ops that compare or select (ops.hpp's conventions): the min / max family,
// clamp, where, nan_to_num, casts, the predicates.
#include "../core/config.hpp"

#include "ops.hpp"

namespace reel::inline REEL_ABI {

// ================================================================== min / max family
// maximum/minimum propagate NaN; fmax/fmin ignore it (NaN only when both are NaN).
// Reverse mode (PyTorch's rule): the gradient goes to the larger (smaller) input, split in
// half on ties, and in full to both where either is NaN; fmax/fmin send it all to the
// non-NaN input, and to the first input when both are NaN.
template <bool Max, bool IgnoreNan>
struct ExtremumOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class C> REEL_HD C apply(C a, C b) const {
    if (detail::is_nan(a)) return IgnoreNan ? b : a;
    if (detail::is_nan(b)) return IgnoreNan ? a : b;
    return (Max ? a < b : b < a) ? b : a;
  }
  template <class C, class A, class B>
    requires detail::vec_float_v<C>
  auto vec(const A& a, const B& b) const {
    constexpr int P = IgnoreNan ? Eigen::PropagateNumbers : Eigen::PropagateNaN;
    if constexpr (Max)
      return a.binaryExpr(b, Eigen::internal::scalar_max_op<C, C, P>());
    else
      return a.binaryExpr(b, Eigen::internal::scalar_min_op<C, C, P>());
  }
  // x's share: 1 where x is selected over y, 1/2 on ties, 0 where y is selected; unordered
  // (a NaN) gives 1 in the backward rule and 0 in the forward one, as in PyTorch.
  template <class X, class Y> static auto share(const X& x, const Y& y) {
    if constexpr (Max)
      return where(lt(x, y), 0.0, where(eq(x, y), 0.5, 1.0));
    else
      return where(gt(x, y), 0.0, where(eq(x, y), 0.5, 1.0));
  }
  template <class X, class Y> static auto forward_share(const X& x, const Y& y) {
    if constexpr (Max)
      return where(gt(x, y), 1.0, where(eq(x, y), 0.5, 0.0));
    else
      return where(lt(x, y), 1.0, where(eq(x, y), 0.5, 0.0));
  }
  template <class O, class A, class B> auto d0(const O&, const A& a, const B& b) const {
    if constexpr (IgnoreNan)
      return where(isnan(b), 1.0, where(isnan(a), 0.0, share(a, b)));
    else
      return share(a, b);
  }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const {
    if constexpr (IgnoreNan)
      return where(isnan(b), 0.0, where(isnan(a), 1.0, share(b, a)));
    else
      return share(b, a);
  }
  // Forward mode selects the active operand's tangent (both halves on ties), so an inf or
  // NaN tangent of the other operand never leaks in through 0 * inf.
  template <class Ta, class Tb, class O, class A, class B>
  auto jvp_rule(const Ta& ta, const Tb& tb, const O& out, const A& a, const B& b) const {
    auto w = [&] {
      if constexpr (IgnoreNan)
        return d0(out, a, b);
      else  // PyTorch: other_t + weight * (self_t - other_t), the weight 0 where unordered
        return forward_share(a, b);
    }();
    return where(eq(w, 1.0), ta, where(eq(w, 0.0), tb, 0.5 * (ta + tb)));
  }
};
using MaximumOp = ExtremumOp<true, false>;
using MinimumOp = ExtremumOp<false, false>;
using FmaxOp = ExtremumOp<true, true>;
using FminOp = ExtremumOp<false, true>;

// A clamp bound given as a C++ number, kept exactly (int64, uint64 or double) until it is
// saturated into the tensor's type: an out-of-range bound never wraps and never throws.
struct Bound {
  enum Kind { None, Signed, Unsigned, Floating } kind = None;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  Bound() = default;
  Bound(std::nullopt_t) {}
  template <class S>
    requires(std::is_integral_v<S> && std::is_signed_v<S>)
  Bound(S v) : kind(Signed), i(v) {}
  template <class S>
    requires(std::is_integral_v<S> && !std::is_signed_v<S>)
  Bound(S v) : kind(Unsigned), u(v) {}
  template <class S>
    requires std::is_floating_point_v<S>
  Bound(S v) : kind(Floating), d(static_cast<double>(v)) {}
  template <class S>
  Bound(const std::optional<S>& o) {
    if (o) *this = Bound(*o);
  }
  bool has_value() const { return kind != None; }

  // The bound in type T, saturated to T's range. For integer T a fractional lower bound
  // rounds up and an upper bound rounds down, so clamping stays exact in T.
  template <class T>
  T saturate(bool is_lower, const char* fn) const {
    if constexpr (std::is_integral_v<T>) {
      using L = std::numeric_limits<T>;
      if (kind == Signed) {
        if (std::cmp_less(i, L::lowest())) return L::lowest();
        if (std::cmp_greater(i, L::max())) return L::max();
        return static_cast<T>(i);
      }
      if (kind == Unsigned) {
        if (std::cmp_greater(u, L::max())) return L::max();
        return static_cast<T>(u);
      }
      REEL_CHECK(!std::isnan(d), value_error, fn, ": a NaN bound cannot be applied to an integer tensor");
      double v = is_lower ? std::ceil(d) : std::floor(d);
      if (v <= static_cast<double>(L::lowest())) return L::lowest();
      if (v >= static_cast<double>(L::max())) return L::max();  // 2^64 for uint64: saturates
      return static_cast<T>(v);
    } else {
      if (kind == Signed) return static_cast<T>(i);
      if (kind == Unsigned) return static_cast<T>(u);
      return static_cast<T>(d);
    }
  }
};

template <class T>
struct ClampOp : SameTypeRule {
  using C0 = compute_t<T>;
  bool has_lo = false, has_hi = false;
  bool hardtanh_rule = false;
  C0 lo{}, hi{};
  ClampOp(const Bound& l, const Bound& h, const char* fn, bool hardtanh = false)
      : has_lo(l.has_value()), has_hi(h.has_value()), hardtanh_rule(hardtanh) {
    REEL_REQUIRE_ORDERED(T, "clamp");
    REEL_CHECK(has_lo || has_hi, value_error, fn, ": at least one of 'min' or 'max' must not be None");
    using S = std::conditional_t<std::is_same_v<T, bool>, uint8_t, C0>;
    if (has_lo) lo = static_cast<C0>(l.template saturate<S>(true, fn));
    if (has_hi) hi = static_cast<C0>(h.template saturate<S>(false, fn));
  }
  template <class C> REEL_HD C apply(C x) const {
    if (detail::is_nan(x)) return x;
    if (has_lo && !(x >= C(lo))) x = C(lo);  // a NaN bound yields NaN
    if (has_hi && !(x <= C(hi)) && !detail::is_nan(x)) x = C(hi);
    return x;
  }
  // PyTorch 2.15's rules: clamp passes the gradient strictly inside the bounds (0 at a bound
  // and at NaN); hardtanh everywhere but at or beyond a bound, which differs only at NaN.
  template <class O, class X> auto d0(const O&, const X& x) const {
    const double lo_d = static_cast<double>(lo), hi_d = static_cast<double>(hi);
    auto inside = logical_and(logical_or(gt(x, lo_d), !has_lo), logical_or(lt(x, hi_d), !has_hi));
    return cast<detail::value_t<X>>(logical_or(inside, logical_and(isnan(x), hardtanh_rule)));
  }
};

// clamp with tensor bounds: min(max(x, lo), hi), NaN propagating. Gradients as PyTorch 2.15's:
// to x inside the bounds (and at NaN), to a bound where x is beyond it, split 0.5 / 0.5 where
// x equals a bound.
struct ClampTensorOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class C> REEL_HD C apply(C x, C lo, C hi) const {
    if (detail::is_nan(x) || detail::is_nan(lo) || detail::is_nan(hi)) return x + lo + hi;  // NaN
    C r = x < lo ? lo : x;
    return r > hi ? hi : r;
  }
  template <class O, class X, class L, class H> auto d0(const O&, const X& x, const L& lo, const H& hi) const {
    return where(logical_and(gt(x, lo), lt(x, hi)), 1.0,
                 where(logical_or(eq(x, lo), eq(x, hi)), 0.5, where(isnan(x), 1.0, 0.0)));
  }
  template <class O, class X, class L, class H> auto d1(const O&, const X& x, const L& lo, const H&) const {
    return where(lt(x, lo), 1.0, where(eq(x, lo), 0.5, 0.0));
  }
  template <class O, class X, class L, class H> auto d2(const O&, const X& x, const L&, const H& hi) const {
    return where(gt(x, hi), 1.0, where(eq(x, hi), 0.5, 0.0));
  }
};

// ================================================================== selection and cleanup
struct WhereOp : SameTypeRule {
  template <class C> REEL_HD C apply(C c, C a, C b) const { return c != C(0) ? a : b; }
  template <class O, class Cd, class A, class B> auto d0(const O&, const Cd&, const A&, const B&) const { return 0; }
  template <class O, class Cd, class A, class B> auto d1(const O&, const Cd& c, const A&, const B&) const {
    return cast<detail::value_t<O>>(c);
  }
  template <class O, class Cd, class A, class B> auto d2(const O&, const Cd& c, const A&, const B&) const {
    return cast<detail::value_t<O>>(logical_not(c));
  }
};
// Returns its second operand; used to write a scalar into a strided destination.
struct SecondOp : SameTypeRule {
  static constexpr bool differentiable = false;  // (never recorded; a capture describes it)
  template <class C> REEL_HD C apply(C, C b) const { return b; }
};
template <class U>
struct CastOp {
  template <class A> using result = U;
  template <class A> using compute = compute_t<A>;
  template <class C> REEL_HD auto apply(C x) const { return convert<compute_t<U>>(x); }
  template <class C, class A>
    requires(!is_fp8_v<U> && !is_complex_v<C>)
  auto vec(const A& a) const { return a.template cast<compute_t<U>>(); }
  template <class O, class X> auto d0(const O&, const X&) const { return 1; }
};
// float8 conversion that sends finite overflow (and inf) to the largest finite value
// instead of NaN / inf; NaN stays NaN.
template <class U>
struct SaturatingCastOp {
  static_assert(is_fp8_v<U>, "reel::saturating_cast: the target must be a float8 type");
  template <class A> using result = U;
  template <class A> using compute = compute_t<A>;
  template <class C> REEL_HD auto apply(C x) const {
    double v = static_cast<double>(real_t<C>(std::real(x)));
    if constexpr (std::is_same_v<U, float8_e4m3fn>)
      return to_float8_e4m3fn(v, true);
    else
      return to_float8_e5m2(v, true);
  }
};

template <class T>
struct NanToNumOp : SameTypeRule {
  using R = real_t<compute_t<T>>;
  R nan, posinf, neginf;
  template <class C> REEL_HD C apply(C x) const {
    if constexpr (is_complex_v<C>) {
      return C(fix(x.real()), fix(x.imag()));
    } else if constexpr (std::is_floating_point_v<C>) {
      return fix(x);
    } else {
      return x;
    }
  }
  template <class V> V fix(V v) const {
    if (std::isnan(v)) return V(nan);
    if (std::isinf(v)) return v > 0 ? V(posinf) : V(neginf);
    return v;
  }
  template <class O, class X> auto d0(const O&, const X& x) const { return cast<detail::value_t<X>>(isfinite(x)); }
};

// ================================================================== predicates
#define REEL_COMPARE(STRUCT, NAME, OPR, ORDERED)                                                   \
  struct STRUCT : PredicateRule {                                                                  \
    static constexpr bool differentiable = false;                                                  \
    static constexpr bool requires_order = ORDERED;                                                \
    template <class C> REEL_HD bool apply(C a, C b) const {                                                \
      if constexpr (ORDERED) REEL_REQUIRE_ORDERED(C, NAME);                                        \
      return a OPR b;                                                                              \
    }                                                                                              \
    template <class C, class A, class B>                                                           \
      requires(!is_complex_v<C>)                                                                   \
    auto vec(const A& a, const B& b) const { return a OPR b; }                                     \
  };
REEL_COMPARE(EqOp, "eq", ==, false)
REEL_COMPARE(NeOp, "ne", !=, false)
REEL_COMPARE(LtOp, "lt", <, true)
REEL_COMPARE(LeOp, "le", <=, true)
REEL_COMPARE(GtOp, "gt", >, true)
REEL_COMPARE(GeOp, "ge", >=, true)
#undef REEL_COMPARE

struct LogicalAndOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C a, C b) const { return a != C(0) && b != C(0); }
};
struct LogicalOrOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C a, C b) const { return a != C(0) || b != C(0); }
};
struct LogicalNotOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C a) const { return a == C(0); }
};
struct IsNanOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C x) const { return detail::is_nan(x); }
};
struct IsInfOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C x) const {
    if constexpr (is_complex_v<C>)
      return std::isinf(x.real()) || std::isinf(x.imag());
    else if constexpr (std::is_floating_point_v<C>)
      return std::isinf(x);
    else
      return false;
  }
};
struct IsFiniteOp : PredicateRule {
  static constexpr bool differentiable = false;
  template <class C> REEL_HD bool apply(C x) const {
    if constexpr (is_complex_v<C>)
      return std::isfinite(x.real()) && std::isfinite(x.imag());
    else if constexpr (std::is_floating_point_v<C>)
      return std::isfinite(x);
    else
      return true;
  }
};

}  // namespace reel
