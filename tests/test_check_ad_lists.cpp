// check_ad (all four modes against central differences) of every unary op of the op lists with real
// inputs, and their in-place forms (test_check_ad.cpp: the binary ops; test_check_ad_complex.cpp:
// the ops defined for complex tensors, with complex inputs). An op added to the lists gets these
// checks with no line of its own (check_ad_points.hpp).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "check_ad_points.hpp"

using namespace reel;
using Td = Tensor<double>;
using V = std::vector<Td>;
using Tc = Tensor<std::complex<double>>;
using Vc = std::vector<Tc>;
using namespace check_ad_points;

TEST_CASE("check_ad: every op of REEL_UNARY_OPS, real inputs; in-place forms") {
  int real_checked = 0;
#define REEL_LIST_INPLACE_0(NAME)
#define REEL_LIST_INPLACE_1(NAME)                             \
  {                                                           \
    Td y = x0();                                              \
    NAME##_(y);                                               \
    CHECK(y.to_vector() == Td(NAME(x0())).to_vector());       \
  }
#define REEL_LIST_UNARY(NAME, OP, INPLACE, CPLX)                                                              \
  {                                                                                                           \
    CAPTURE(#NAME);                                                                                           \
    real_checked += check_listed([](const auto& v) { return NAME(v[0]); }, V{x0()});                         \
    REEL_LIST_INPLACE_##INPLACE(NAME)                                                                         \
  }
  REEL_UNARY_OPS(REEL_LIST_UNARY)
#undef REEL_LIST_UNARY
#undef REEL_LIST_INPLACE_0
#undef REEL_LIST_INPLACE_1
  CHECK(real_checked == 25);  // the list's ops with a real result (all but the four bool-valued ones)
}
