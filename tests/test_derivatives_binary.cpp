// The derivative rules of the binary and ternary ops against central finite differences of
// the op's own primal, in double, and the rules at the special points (ties, NaN, 0^y).
// (test_derivatives.cpp: the unary ops.)
#include <doctest/doctest.h>

#include <cmath>
#include <reel/reel.hpp>

#include "derivative_rules.hpp"

using namespace reel;
using derivative_rules::check_rule;
using derivative_rules::values;

TEST_CASE("binary and ternary derivative rules match finite differences") {
  auto a = tensor<double>({0.3, 0.7, 1.1, 1.9, 2.4});
  auto b = tensor<double>({1.2, 0.2, -0.7, 2.5, 1.3});
  check_rule<0>(AddOp{}, a, b);
  check_rule<1>(AddOp{}, a, b);
  check_rule<0>(SubOp{}, a, b);
  check_rule<1>(SubOp{}, a, b);
  check_rule<0>(MulOp{}, a, b);
  check_rule<1>(MulOp{}, a, b);
  check_rule<0>(DivOp{}, a, b);
  check_rule<1>(DivOp{}, a, b);
  check_rule<0>(PowOp{}, a, b);
  check_rule<1>(PowOp{}, a, b);
  check_rule<0>(MaximumOp{}, a, b);
  check_rule<1>(MaximumOp{}, a, b);
  check_rule<0>(MinimumOp{}, a, b);
  check_rule<1>(MinimumOp{}, a, b);
  check_rule<0>(FmaxOp{}, a, b);
  check_rule<1>(FminOp{}, a, b);
  auto c = Tensor<double>(cast<double>(a > 1));
  check_rule<1>(WhereOp{}, c, a, b);
  check_rule<2>(WhereOp{}, c, a, b);
}

TEST_CASE("rules at the special points the seed names") {
  // ties split the gradient in half
  auto t = tensor<double>({2, 2});
  CHECK(values(MaximumOp{}.d0(t, t, t), 2) == std::vector<double>{0.5, 0.5});
  CHECK(values(FminOp{}.d1(t, t, t), 2) == std::vector<double>{0.5, 0.5});
  // fmin/fmax: the whole gradient to the non-NaN input, to the first when both are NaN
  auto x = tensor<double>({1, NAN, 3, NAN});
  auto y = tensor<double>({2, 2, NAN, NAN});
  CHECK(values(FminOp{}.d0(x, x, y), 4) == std::vector<double>{1, 0, 1, 1});
  CHECK(values(FminOp{}.d1(x, x, y), 4) == std::vector<double>{0, 1, 0, 0});
  CHECK(values(FmaxOp{}.d0(x, x, y), 4) == std::vector<double>{0, 0, 1, 1});
  CHECK(values(FmaxOp{}.d1(x, x, y), 4) == std::vector<double>{1, 1, 0, 0});
  // x^y at x == 0: d/dy is taken as 0 (the limit), not NaN
  auto z = tensor<double>({0.0});
  auto e = tensor<double>({2.0});
  CHECK(values(PowOp{}.d1(Tensor<double>(pow(z, e)), z, e), 1) == std::vector<double>{0});
}
