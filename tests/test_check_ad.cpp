// Every differentiable core op, checked in all four modes (reverse, reverse-over-reverse,
// forward, forward-over-reverse) against central finite differences by one check_ad line:
// elementwise ops here (and the binary ops of the op lists), reductions, views, products,
// joins and complex inputs in test_check_ad_shapes.cpp, the op lists' unary ops in
// test_check_ad_lists.cpp and their complex ops in test_check_ad_complex.cpp.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "check_ad_points.hpp"

using namespace reel;
using autograd::check_ad;
using Td = Tensor<double>;
using V = std::vector<Td>;
using Tc = Tensor<std::complex<double>>;
using Vc = std::vector<Tc>;
using namespace check_ad_points;

#define AD1(EXPR, X) check_ad([](const V& v) -> Td { const Td& x = v[0]; return EXPR; }, V{X})
#define AD2(EXPR, X, Y) check_ad([](const V& v) -> Td { const Td& x = v[0]; const Td& y = v[1]; return EXPR; }, V{X, Y})

TEST_CASE("check_ad: unary elementwise ops") {
  AD1(neg(x), a23());
  AD1(exp(x), a23());
  AD1(log(x), pos23());
  AD1(log1p(x), pos23());
  AD1(expm1(x), a23());
  AD1(sqrt(x), pos23());
  AD1(rsqrt(x), pos23());
  AD1(sin(x), a23());
  AD1(cos(x), a23());
  AD1(tan(x), a23());
  AD1(tanh(x), a23());
  AD1(sigmoid(x), a23());
  AD1(reciprocal(x), a23());
  AD1(square(x), a23());
  AD1(relu(x), a23());
  AD1(abs(x), a23());
  AD1(erf(x), a23());
  AD1(nn::functional::gelu(x), a23());
  AD1(nn::functional::gelu(x, true), a23());
  AD1(nn::functional::hardtanh(x), a23());
  AD1(nn::functional::softplus(x), a23());
  AD1(nn::functional::softplus(x, 2.0, 1.0), a23());
  AD1(nn::functional::elu(x, 0.7), a23());
  AD1(nn::functional::selu(x), a23());
  AD1(nn::functional::leaky_relu(x, 0.2), a23());
  AD1(nn::functional::silu(x), a23());
  AD1(clamp(x, -0.5, 1.0), a23());
  AD1(clamp_min(x, 0.1), a23());
  AD1(clamp_max(x, 0.1), a23());
  AD1(nan_to_num(x), a23());
  AD1(x.to<float>().to<double>() * 0 + x, a23());
  AD1(sin(x) * exp(x), a23());
}

TEST_CASE("check_ad: binary elementwise ops and broadcasting") {
  AD2(x + y, a23(), b23());
  AD2(x - y, a23(), b23());
  AD2(x * y, a23(), b23());
  AD2(x / y, a23(), b23());
  AD2(pow(x, y), pos23(), b23());
  AD2(maximum(x, y), a23(), b23());
  AD2(minimum(x, y), a23(), b23());
  AD2(fmax(x, y), a23(), b23());
  AD2(fmin(x, y), a23(), b23());
  AD2(where(gt(x, y), x * y, x - y), a23(), b23());
  AD2(x * y + sin(x) / (y * y + 1), a23(), row3());      // [2,3] with [3]
  AD2(x * y, a23().select(1, 0).unsqueeze(1), row3());  // [2,1] with [3]
  AD1(x * 2.5 + 1.0, a23());
  AD1(pow(x, 3.0), a23());
  AD1(2.0 / x, a23());
}

// every binary op of the op lists with real inputs (check_ad_points.hpp; the unary ones:
// test_check_ad_lists.cpp)
TEST_CASE("check_ad: every op of REEL_BINARY_OPS, real inputs") {
  int real_checked = 0;
#define REEL_LIST_BINARY(NAME, OP, CPLX)                                                          \
  {                                                                                               \
    CAPTURE(#NAME);                                                                               \
    real_checked += check_listed([](const auto& v) { return NAME(v[0], v[1]); }, V{x0(), y0()}); \
  }
  REEL_BINARY_OPS(REEL_LIST_BINARY)
#undef REEL_LIST_BINARY
  CHECK(real_checked == 18);  // the list's ops with a real result (all but the eight comparisons and logical ops)
}

TEST_CASE("check_ad reports a wrong derivative") {
  // a hook that doubles the gradient makes the reverse mode wrong: the check must say so
  auto wrong = [](const V& v) -> Td {
    Td y = v[0] * v[0];
    if (y.requires_grad()) y.register_hook([](const Td& g) { return Td(g * 2.0); });
    return y;
  };
  CHECK_THROWS_WITH_AS(check_ad(wrong, V{a23()}), doctest::Contains("reverse mode"), error);
}

// Bundled with other suites (tests/CMakeLists.txt): the macros end with the file.
#undef AD1
#undef AD2
