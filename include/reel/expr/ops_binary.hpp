#pragma once
// More binary elementwise ops under PyTorch's names (ops.hpp's conventions): atan2, hypot,
// copysign, logaddexp, xlogy, nextafter, and the integer-capable divisions fmod, remainder,
// floor_divide. Values follow PyTorch's CPU kernels, derivatives its derivatives.yaml.
#include "../core/config.hpp"
#include <algorithm>

#include "ops_select.hpp"

namespace reel::inline REEL_ABI {

namespace detail {
// Integer fmod / remainder / floor_divide by zero is PyTorch's ZeroDivisionError (checked
// before the expression is built; floating point gives inf / NaN instead).
template <class Op, class A, class B>
void check_integer_divisor(const A& a, const B& b, const char* fn) {
  using C = typename decltype(make_expr(Op{}, a, b))::compute_type;
  if constexpr (std::is_integral_v<C>) {
    if constexpr (is_cpp_scalar_v<B>) {
      REEL_CHECK(b != 0, value_error, fn, ": ZeroDivisionError (integer division by zero)");
    } else if constexpr (Backend<device_t<B>>::has_data) {
      auto z = materialize(eq(b, 0)).to_vector();
      REEL_CHECK(std::find(z.begin(), z.end(), true) == z.end(), value_error, fn,
                 ": ZeroDivisionError (integer division by zero)");
    }
  }
}
// The truncated remainder (C's fmod; for integers INT_MIN % -1 is 0, it overflows in C++).
template <class C> REEL_HD C trunc_mod(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1)) return C(0);
    return static_cast<C>(a % b);
  } else {
    return std::fmod(a, b);
  }
}
}  // namespace detail

struct Atan2Op : FloatRule {
  static constexpr bool requires_order = true;  // (real arguments only)
  template <class C> REEL_HD C apply(C a, C b) const { return std::atan2(a, b); }
  // (0 where a^2 + b^2 is 0, as PyTorch's atan2_backward)
  template <class O, class A, class B> auto d0(const O&, const A& a, const B& b) const { return over_norm2(b, a, b); }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const { return over_norm2(-a, a, b); }
  template <class N, class A, class B> static auto over_norm2(const N& n, const A& a, const B& b) {
    auto q = square(a) + square(b);
    return where(eq(q, 0), 0, n / q);
  }
};
struct HypotOp : FloatRule {
  static constexpr bool requires_order = true;  // (real arguments only)
  template <class C> REEL_HD C apply(C a, C b) const { return std::hypot(a, b); }
  template <class O, class A, class B> auto d0(const O& out, const A& a, const B&) const { return a / out; }
  template <class O, class A, class B> auto d1(const O& out, const A&, const B& b) const { return b / out; }
};
// |a| with b's sign; the gradient is out / a (0 at a = 0), none to b.
struct CopysignOp : FloatRule {
  static constexpr bool requires_order = true;  // (real arguments only)
  template <class C> REEL_HD C apply(C a, C b) const { return std::copysign(a, b); }
  template <class O, class A, class B> auto d0(const O& out, const A& a, const B&) const { return where(eq(a, 0), 0, out / a); }
  template <class O, class A, class B> auto d1(const O&, const A&, const B&) const { return 0; }
};
// log(e^a + e^b) without overflow; equal infinities give themselves.
struct LogaddexpOp : FloatRule {
  static constexpr bool requires_order = true;  // (real arguments only)
  template <class C> REEL_HD C apply(C a, C b) const {
    if (std::isinf(a) && a == b) return a;
    C m = a < b ? b : a;  // (NaN: the NaN propagates through a - b)
    return m + std::log1p(std::exp(-std::abs(a - b)));
  }
  template <class O, class A, class B> auto d0(const O&, const A& a, const B& b) const { return reciprocal(1 + exp(b - a)); }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const { return reciprocal(1 + exp(a - b)); }
};
// a * log(b), 0 where a is 0 (unless b is NaN).
struct XlogyOp : FloatRule {
  static constexpr bool requires_order = true;  // (real arguments only)
  template <class C> REEL_HD C apply(C a, C b) const {
    if (std::isnan(b)) return b;
    return a == C(0) ? C(0) : a * std::log(b);
  }
  template <class O, class A, class B> auto d0(const O&, const A& a, const B& b) const {
    return where(logical_and(eq(a, 0), le(b, 0)), 0, log(b));
  }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const { return a / b; }
};
// (PyTorch does not differentiate nextafter; reel takes it as the identity in a, as it is
// to first order: gradient 1 to a, 0 to b.)
struct NextafterOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class C> REEL_HD C apply(C a, C b) const {
    static_assert(std::is_floating_point_v<C>, "reel::nextafter: needs floating point tensors");
    return std::nextafter(a, b);
  }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 1; }
  template <class O, class A, class B> auto d1(const O&, const A&, const B&) const { return 0; }
};
// C's truncated remainder (the sign of a); integers keep their type.
struct FmodOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class A, class B> static void check(const A& a, const B& b) { detail::check_integer_divisor<FmodOp>(a, b, "fmod"); }
  template <class C> REEL_HD C apply(C a, C b) const { return detail::trunc_mod(a, b); }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 1; }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const { return -trunc(a / b); }
};
// Python's modulus (the sign of b); integers keep their type.
struct RemainderOp : SameTypeRule {
  static constexpr bool requires_order = true;
  template <class A, class B> static void check(const A& a, const B& b) {
    detail::check_integer_divisor<RemainderOp>(a, b, "remainder");
  }
  template <class C> REEL_HD C apply(C a, C b) const {
    C m = detail::trunc_mod(a, b);
    if (m != C(0) && ((b < C(0)) != (m < C(0)))) m += b;
    return m;
  }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 1; }
  template <class O, class A, class B> auto d1(const O&, const A& a, const B& b) const { return -floor_divide(a, b); }
};
// floor(a / b), computed as PyTorch does (exact for integers; for floats from fmod, so
// floor_divide(1, 0.1) is 9, as Python's //); piecewise constant: zero gradients.
struct FloorDivideOp : SameTypeRule {
  static constexpr bool differentiable = false;
  static constexpr bool requires_order = true;
  template <class A, class B> static void check(const A& a, const B& b) {
    detail::check_integer_divisor<FloorDivideOp>(a, b, "floor_divide");
  }
  template <class C> REEL_HD C apply(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if constexpr (std::is_signed_v<C>) {
        if (b == C(-1)) return detail::wrap_sub(C(0), a);  // INT_MIN // -1 wraps
        C q = static_cast<C>(a / b);
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
        return q;
      } else {
        return static_cast<C>(a / b);
      }
    } else {
      if (b == C(0)) return a / b;
      C mod = std::fmod(a, b);
      C div = (a - mod) / b;
      if (mod != C(0) && ((b < C(0)) != (mod < C(0)))) div -= C(1);
      if (div == C(0)) return std::copysign(C(0), a / b);
      C f = std::floor(div);
      return div - f > C(0.5) ? f + C(1) : f;
    }
  }
  template <class O, class A, class B> auto d0(const O&, const A&, const B&) const { return 0; }
  template <class O, class A, class B> auto d1(const O&, const A&, const B&) const { return 0; }
};

}  // namespace reel
