#pragma once
// The points the check_ad suites (test_check_ad*.cpp) differentiate at, away from kinks (relu
// at 0, ties of max/min, |x| at 0), and the checks of the op lists.
#include <reel/reel.hpp>

namespace check_ad_points {
using Td = reel::Tensor<double>;
inline Td a23() { return reel::tensor<double>({{0.3, -0.7, 1.1}, {0.9, -1.4, 0.45}}); }
inline Td b23() { return reel::tensor<double>({{1.2, 0.5, -0.8}, {-0.35, 0.75, 1.6}}); }
inline Td pos23() { return reel::tensor<double>({{0.3, 0.7, 1.1}, {1.9, 2.4, 0.55}}); }
inline Td row3() { return reel::tensor<double>({0.4, -1.3, 0.8}); }

// Every op of the op lists (reel/expr/functions.hpp), checked from the lists themselves
// (test_check_ad_lists.cpp, test_check_ad.cpp, test_check_ad_complex.cpp): an op added there gets
// these checks with no line of its own. Real inputs inside every op's domain, away from integers,
// 1/2 and ties (floor, ceil and round have derivative 0 there); complex inputs for the ops the
// lists mark as defined for complex tensors (a real result is checked through cast<complex>). A
// bool result (predicates, comparisons) has no derivative: such ops are checked by their in-place
// form where they have one.
using C = std::complex<double>;
using Tc = reel::Tensor<C>;
inline Td x0() { return reel::tensor<double>({{0.3, 0.7, 1.1}, {0.45, 0.85, 0.15}}); }
inline Td y0() { return reel::tensor<double>({{1.2, 0.55, 0.8}, {0.35, 0.75, 1.6}}); }
inline Tc z0() { return reel::tensor<C>({C(0.3, -0.8), C(1.1, 0.4), C(-0.6, 0.9)}); }
inline Tc w0() { return reel::tensor<C>({C(-0.2, 0.5), C(0.7, -1.2), C(0.25, 0.35)}); }
// check_ad of f on the inputs when f's result has a derivative; returns whether it checked.
template <class F, class X>
bool check_listed(F f, const std::vector<X>& in) {
  using R = reel::detail::value_t<decltype(f(in))>;
  if constexpr (std::is_same_v<R, bool>) {
    return false;
  } else {
    reel::autograd::check_ad(
        [f](const std::vector<X>& v) -> X { return reel::cast<reel::detail::value_t<X>>(f(v)); }, in);
    return true;
  }
}
template <bool Cplx, class F>
int check_listed_complex(F f, std::vector<Tc> in) {
  if constexpr (Cplx) return check_listed(f, in) ? 1 : 0;
  return 0;
}
}  // namespace check_ad_points
