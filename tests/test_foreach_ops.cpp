// foreach ops: every form (binary with a list, a scalar, scalars per tensor, a 0-dim tensor;
// pointwise, lerp, unary, zero_, copy_) against a plain loop over the elements. (test_foreach.cpp:
// NaN, the general path, errors, allocations, autograd, norms, EMA, clipping;
// test_foreach_dtypes.cpp: other dtypes.)
#include <doctest/doctest.h>

#include <cmath>
#include <reel/reel.hpp>

using namespace reel;
using Td = Tensor<double>;

namespace {
std::vector<Td> random_list(Generator& g, std::vector<Shape> shapes, double lo = -2, double hi = 2) {
  std::vector<Td> out;
  for (auto& s : shapes) out.push_back(Td(rand<double>(s, g) * (hi - lo) + lo));
  return out;
}
std::vector<Td> clones(const std::vector<Td>& v) {
  std::vector<Td> out;
  for (auto& t : v) out.push_back(t.clone());
  return out;
}
// expected[i][k] = f(i, k) for every element k of tensor i
template <class F>
void expect_each(const std::vector<Td>& got, const std::vector<Td>& like, F&& f, double tol = 1e-14) {
  REQUIRE(got.size() == like.size());
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].sizes() == like[i].sizes());
    auto v = got[i].contiguous().to_vector();
    for (size_t k = 0; k < v.size(); ++k) CHECK(v[k] == doctest::Approx(f(i, k)).epsilon(tol));
  }
}
std::vector<Shape> shapes() { return {{3}, {2, 4}, {}, {0}, {5, 1, 2}}; }
}  // namespace

TEST_CASE("foreach: binary ops with a list, a scalar, scalars per tensor and a 0-dim tensor") {
  Generator g(1);
  auto a = random_list(g, shapes()), b = random_list(g, shapes(), 0.5, 2);
  auto av = [&](size_t i, size_t k) { return a[i].contiguous().to_vector()[k]; };
  auto bv = [&](size_t i, size_t k) { return b[i].contiguous().to_vector()[k]; };
  std::vector<double> per{0.5, -1.5, 2.0, 3.0, 0.25};

  expect_each(foreach::add(a, b), a, [&](size_t i, size_t k) { return av(i, k) + bv(i, k); });
  expect_each(foreach::add(a, b, 2.5), a, [&](size_t i, size_t k) { return av(i, k) + 2.5 * bv(i, k); });
  expect_each(foreach::sub(a, b, 0.5), a, [&](size_t i, size_t k) { return av(i, k) - 0.5 * bv(i, k); });
  expect_each(foreach::mul(a, b), a, [&](size_t i, size_t k) { return av(i, k) * bv(i, k); });
  expect_each(foreach::div(a, b), a, [&](size_t i, size_t k) { return av(i, k) / bv(i, k); });
  expect_each(foreach::add(a, 1.25), a, [&](size_t i, size_t k) { return av(i, k) + 1.25; });
  expect_each(foreach::mul(a, per), a, [&](size_t i, size_t k) { return av(i, k) * per[i]; });
  expect_each(foreach::div(a, {1.0, 2.0, 4.0, 8.0, 16.0}), a,
              [&](size_t i, size_t k) { return av(i, k) / std::pow(2.0, double(i)); });
  expect_each(foreach::sub(a, full<double>({}, 0.75)), a, [&](size_t i, size_t k) { return av(i, k) - 0.75; });
  expect_each(foreach::add(a, full<double>({}, 0.75), 2.0), a, [&](size_t i, size_t k) { return av(i, k) + 1.5; });
  expect_each(foreach::maximum(a, b), a, [&](size_t i, size_t k) { return std::max(av(i, k), bv(i, k)); });
  expect_each(foreach::minimum(a, b), a, [&](size_t i, size_t k) { return std::min(av(i, k), bv(i, k)); });
  expect_each(foreach::clamp_min(a, -0.5), a, [&](size_t i, size_t k) { return std::max(av(i, k), -0.5); });
  expect_each(foreach::clamp_max(a, per), a, [&](size_t i, size_t k) { return std::min(av(i, k), per[i]); });

  // in place writes into the same storage
  auto c = clones(a);
  auto* p = c[1].data_ptr();
  foreach::mul_(c, b);
  CHECK(c[1].data_ptr() == p);
  expect_each(c, a, [&](size_t i, size_t k) { return av(i, k) * bv(i, k); });
  foreach::add_(c, b, -1.0);
  expect_each(c, a, [&](size_t i, size_t k) { return av(i, k) * bv(i, k) - bv(i, k); });
}

TEST_CASE("foreach: pointwise, lerp, unary, zero_, copy_") {
  Generator g(2);
  auto a = random_list(g, shapes()), b = random_list(g, shapes()), c = random_list(g, shapes(), 0.5, 2);
  auto v = [](const std::vector<Td>& l, size_t i, size_t k) { return l[i].contiguous().to_vector()[k]; };
  std::vector<double> per{0.5, -1.5, 2.0, 3.0, 0.25};
  expect_each(foreach::addcmul(a, b, c, 0.3), a,
              [&](size_t i, size_t k) { return v(a, i, k) + 0.3 * v(b, i, k) * v(c, i, k); });
  expect_each(foreach::addcdiv(a, b, c, per), a,
              [&](size_t i, size_t k) { return v(a, i, k) + per[i] * v(b, i, k) / v(c, i, k); });
  expect_each(foreach::addcmul(a, b, c, full<double>({}, -2.0)), a,
              [&](size_t i, size_t k) { return v(a, i, k) - 2 * v(b, i, k) * v(c, i, k); });
  for (double w : {0.1, 0.8})
    expect_each(foreach::lerp(a, b, w), a, [&](size_t i, size_t k) { return v(a, i, k) + w * (v(b, i, k) - v(a, i, k)); });
  auto wl = random_list(g, shapes(), 0, 1);
  expect_each(foreach::lerp(a, b, wl), a,
              [&](size_t i, size_t k) { return v(a, i, k) + v(wl, i, k) * (v(b, i, k) - v(a, i, k)); });
  // lerp with weight 1 lands exactly on `end` (PyTorch's two-sided formula)
  auto l1 = foreach::lerp(a, b, 1.0);
  for (size_t i = 0; i < a.size(); ++i) CHECK(l1[i].to_vector() == b[i].to_vector());
  expect_each(foreach::sqrt(c), c, [&](size_t i, size_t k) { return std::sqrt(v(c, i, k)); });
  expect_each(foreach::exp(a), a, [&](size_t i, size_t k) { return std::exp(v(a, i, k)); });
  expect_each(foreach::abs(a), a, [&](size_t i, size_t k) { return std::abs(v(a, i, k)); });
  expect_each(foreach::neg(a), a, [&](size_t i, size_t k) { return -v(a, i, k); });
  expect_each(foreach::reciprocal(c), c, [&](size_t i, size_t k) { return 1 / v(c, i, k); });
  auto d = clones(a);
  d[0].data_ptr()[0] = std::numeric_limits<double>::quiet_NaN();
  foreach::zero_(d);
  expect_each(d, a, [](size_t, size_t) { return 0.0; });
  foreach::copy_(d, b);
  expect_each(d, b, [&](size_t i, size_t k) { return v(b, i, k); });
  CHECK(!d[1].is_same_storage(b[1]));
}
