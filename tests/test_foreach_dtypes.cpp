// foreach ops on lists of other dtypes: half and bfloat16 (computed in float, rounded once),
// complex, integer, and lists that mix dtypes (grouped by dtype). (test_foreach.cpp: every
// form on double lists, the general path, errors, allocations, norms, EMA, clipping.)
#include <doctest/doctest.h>

#include <cmath>
#include <reel/reel.hpp>

using namespace reel;
using Tf = Tensor<float>;
using Td = Tensor<double>;

TEST_CASE("foreach: half and bfloat16 compute in float and round once") {
  std::vector<Tensor<half>> h{tensor<half>({half(1.0f), half(2.0f)})};
  foreach::addcmul_(h, h, h, 0.5);  // 1 + 0.5 = 1.5, 2 + 2 = 4
  CHECK(float(h[0].to_vector()[0]) == 1.5f);
  CHECK(float(h[0].to_vector()[1]) == 4.0f);
  std::vector<Tensor<bfloat16>> b{full<bfloat16>({3}, bfloat16(256.0f))};
  foreach::add_(b, b, 1.0 / 256);  // 256 + 1: exactly representable only as a single rounding of 257
  CHECK(float(b[0].to_vector()[0]) == float(bfloat16(257.0f)));
}

TEST_CASE("foreach: complex lists") {
  using C = std::complex<double>;
  std::vector<Tensor<C>> a{tensor<C>({C(1, 2), C(-1, 0.5)})}, b{tensor<C>({C(0, 1), C(2, -1)})};
  auto r = foreach::mul(a, b)[0].to_vector();
  CHECK(r[0] == C(1, 2) * C(0, 1));
  auto s = foreach::add(a, C(0.5, -1))[0].to_vector();
  CHECK(s[1] == C(-0.5, -0.5));
  auto n = foreach::norm(a)[0].item();
  CHECK(n == doctest::Approx(std::sqrt(1 + 4 + 1 + 0.25)));
}

TEST_CASE("foreach: lists mixing dtypes are grouped by dtype") {
  std::vector<AnyTensor> a{tensor<float>({1.f, 2.f}), tensor<double>({3.0}), tensor<float>({4.f})};
  std::vector<AnyTensor> b{tensor<float>({10.f, 20.f}), tensor<double>({30.0}), tensor<float>({40.f})};
  foreach::add_(a, b, 0.5);
  CHECK(a[0].as<float>().to_vector() == std::vector<float>{6.f, 12.f});
  CHECK(a[1].as<double>().to_vector() == std::vector<double>{18.0});
  CHECK(a[2].as<float>().to_vector() == std::vector<float>{24.f});
  auto r = foreach::sqrt(std::vector<AnyTensor>{tensor<double>({4.0}), tensor<float>({9.f})});
  CHECK(r[0].as<double>().item() == 2.0);
  CHECK(r[1].as<float>().item() == 3.f);
  // a pair of different dtypes at one index is a type error
  std::vector<AnyTensor> c{tensor<double>({1.0, 2.0}), tensor<double>({1.0}), tensor<float>({1.f})};
  CHECK_THROWS_AS(foreach::add_(a, c), type_error);
  CHECK_THROWS_AS(foreach::add_(std::vector<AnyTensor>{tensor<int32_t>({1})}, 1.0), type_error);
}

TEST_CASE("foreach: integer lists") {
  std::vector<Tensor<int32_t>> a{tensor<int32_t>({1, -2}), tensor<int32_t>({7})};
  foreach::add_(a, 3.0);
  foreach::mul_(a, std::vector<double>{2, -1});
  CHECK(a[0].to_vector() == std::vector<int32_t>{8, 2});
  CHECK(a[1].to_vector() == std::vector<int32_t>{-10});
  foreach::clamp_min_(a, 0.0);
  CHECK(a[1].item() == 0);
  CHECK_THROWS_WITH_AS(foreach::add_(a, 0.5), doctest::Contains("not an integer"), type_error);
  CHECK_THROWS_AS(foreach::mul(a, std::vector<double>{1, 1.5}), type_error);
}
