// Each op's single definition carries its derivative rules (used by autograd). Check every
// rule against central finite differences of the op's own primal, in double: the unary ops
// here, the binary and ternary ones and the special points in test_derivatives_binary.cpp.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "derivative_rules.hpp"

using namespace reel;
using derivative_rules::check_rule;
using derivative_rules::values;

TEST_CASE("unary derivative rules match finite differences") {
  auto x = tensor<double>({0.3, 0.7, 1.1, 1.9, 2.4});
  auto s = tensor<double>({-1.3, -0.4, 0.2, 0.9, 1.7});  // signed, away from kinks
  check_rule<0>(ExpOp{}, x);
  check_rule<0>(LogOp{}, x);
  check_rule<0>(Log1pOp{}, x);
  check_rule<0>(Expm1Op{}, s);
  check_rule<0>(SqrtOp{}, x);
  check_rule<0>(RsqrtOp{}, x);
  check_rule<0>(SinOp{}, s);
  check_rule<0>(CosOp{}, s);
  check_rule<0>(TanOp{}, s);
  check_rule<0>(TanhOp{}, s);
  check_rule<0>(SigmoidOp{}, s);
  check_rule<0>(ReciprocalOp{}, x);
  check_rule<0>(SquareOp{}, s);
  check_rule<0>(NegOp{}, s);
  check_rule<0>(ReluOp{}, s);
  check_rule<0>(AbsOp{}, s);
  check_rule<0>(ErfOp{}, s);
  check_rule<0>(SignOp{}, s);
  check_rule<0>(FloorOp{}, s);
  check_rule<0>(ClampOp<double>(-1.0, 1.0, "clamp"), s);
  check_rule<0>(NanToNumOp<double>{{}, 0, 1, -1}, s);
}
