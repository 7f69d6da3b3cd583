// check_ad (all four modes against central differences) of every op the op lists mark as
// defined for complex tensors, with complex inputs (a real result through cast<complex>);
// test_check_ad_lists.cpp: every op with real inputs (check_ad_points.hpp).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "check_ad_points.hpp"

using namespace reel;
using Td = Tensor<double>;
using V = std::vector<Td>;
using Tc = Tensor<std::complex<double>>;
using Vc = std::vector<Tc>;
using namespace check_ad_points;

TEST_CASE("check_ad: every op of REEL_UNARY_OPS and REEL_BINARY_OPS defined for complex tensors, complex inputs") {
  int complex_checked = 0;
#define REEL_LIST_UNARY(NAME, OP, INPLACE, CPLX)                                                              \
  {                                                                                                           \
    CAPTURE(#NAME);                                                                                           \
    complex_checked += check_listed_complex<CPLX>([](const auto& v) { return NAME(v[0]); }, Vc{z0()});       \
  }
#define REEL_LIST_BINARY(NAME, OP, CPLX)                                                                      \
  {                                                                                                           \
    CAPTURE(#NAME);                                                                                           \
    complex_checked += check_listed_complex<CPLX>([](const auto& v) { return NAME(v[0], v[1]); }, Vc{z0(), w0()}); \
  }
  REEL_UNARY_OPS(REEL_LIST_UNARY)
  REEL_BINARY_OPS(REEL_LIST_BINARY)
#undef REEL_LIST_UNARY
#undef REEL_LIST_BINARY
  CHECK(complex_checked == 22);  // the complex ops with a result that has a derivative (not bool)
}
