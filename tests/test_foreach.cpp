// foreach ops: every form against a plain loop over the elements, the general (strided /
// autograd) path, mixed-dtype lists, errors naming the index, and no heap allocation on the
// fast path. EMA and clip_grad_norm_ against closed forms.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <reel/optim/optimizers.hpp>
#include <reel/reel.hpp>

#include "alloc_count.hpp"

using namespace reel;
using Tf = Tensor<float>;
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

TEST_CASE("foreach: NaN propagates through maximum / clamp_min") {
  auto nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tf> a{tensor<float>({nan, 1.f, 2.f})}, b{tensor<float>({0.f, nan, 3.f})};
  auto m = foreach::maximum(a, b)[0].to_vector();
  CHECK(std::isnan(m[0]));
  CHECK(std::isnan(m[1]));
  CHECK(m[2] == 3.f);
  auto c = foreach::clamp_min(a, 1.5)[0].to_vector();
  CHECK(std::isnan(c[0]));
  CHECK(c[1] == 1.5f);
}

TEST_CASE("foreach: strided views take the general path with the same result") {
  Generator g(3);
  Td base = rand<double>({4, 3}, g), other = rand<double>({3, 4}, g);
  std::vector<Td> a{base.mT(), base.mT().slice(1, 0, 4, 2).contiguous()};
  std::vector<Td> b{other, other.slice(1, 0, 4, 2)};
  auto expect0 = base.mT().contiguous().to_vector(), o0 = other.to_vector();
  foreach::addcmul_(a, b, b, 2.0);
  auto got = a[0].contiguous().to_vector();
  for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == doctest::Approx(expect0[k] + 2 * o0[k] * o0[k]));
  // base itself changed (a[0] is its transposed view)
  CHECK(base.mT().contiguous().to_vector() == got);
}

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

TEST_CASE("foreach: mismatched lengths and shapes name the index") {
  std::vector<Td> a{zeros<double>({2}), zeros<double>({3})}, b{zeros<double>({2})}, c{zeros<double>({2}), zeros<double>({4})};
  CHECK_THROWS_WITH_AS(foreach::add_(a, b), doctest::Contains("has 1 tensors but self has 2"), value_error);
  CHECK_THROWS_WITH_AS(foreach::mul(a, c), doctest::Contains("tensor 1 of argument 2 has shape [4]"), value_error);
  CHECK_THROWS_WITH_AS(foreach::addcmul_(a, a, c), doctest::Contains("tensor 1 of argument 3"), value_error);
  CHECK_THROWS_WITH_AS(foreach::mul_(a, std::vector<double>{1.0}), doctest::Contains("1 scalars but self has 2"), value_error);
  CHECK_THROWS_AS(foreach::add_(a, zeros<double>({2})), value_error);  // the tensor operand must be one number
  CHECK(a[0].to_vector() == std::vector<double>{0, 0});                  // nothing was written
}

TEST_CASE("foreach: the fast path does not allocate") {
  std::vector<Tf> a, b;
  for (int i = 0; i < 1000; ++i) {
    a.push_back(full<float>({1024}, 1.f));
    b.push_back(full<float>({1024}, 2.f));
  }
  std::vector<double> per(1000, 0.5);
  foreach::add_(a, b, 0.5);  // warm up (thread pool)
  reel_test::alloc_counting = true;
  reel_test::alloc_count = 0;
  foreach::add_(a, b, 0.5);
  foreach::add_(a, 1.0);
  foreach::mul_(a, per);
  foreach::addcdiv_(a, b, b, 0.25);
  foreach::lerp_(a, b, 0.1);
  foreach::sqrt_(a);
  foreach::zero_(a);
  reel_test::alloc_counting = false;
  CHECK(reel_test::alloc_count == 0);
  CHECK(a[999].to_vector()[0] == 0.f);
}

TEST_CASE("foreach: autograd sees out-of-place ops; in-place on a leaf that requires grad is refused") {
  Td x = tensor<double>({1.0, 2.0}).requires_grad_(), y = tensor<double>({3.0}).requires_grad_();
  auto r = foreach::mul(std::vector<Td>{x, y}, {2.0, 5.0});
  auto loss = Td(r[0].sum() + r[1].sum() * r[1].sum());
  auto gr = autograd::grad({loss}, {x, y});
  CHECK(gr[0].to_vector() == std::vector<double>{2, 2});
  CHECK(gr[1].item() == doctest::Approx(2 * 15 * 5));
  std::vector<Td> leaves{x};
  CHECK_THROWS_WITH_AS(foreach::add_(leaves, 1.0), doctest::Contains("leaf"), error);
  {
    autograd::no_grad ng;
    foreach::add_(leaves, 1.0);  // what an optimizer does
  }
  CHECK(x.to_vector() == std::vector<double>{2, 3});
  auto n = foreach::norm(std::vector<Td>{x});
  auto gn = autograd::grad({n[0]}, {x})[0].to_vector();
  CHECK(gn[0] == doctest::Approx(2 / std::sqrt(13.0)));
}

TEST_CASE("foreach::norm: p = 2, 1, inf, 0 and general p") {
  std::vector<Td> a{tensor<double>({3.0, -4.0}), tensor<double>({{1.0, -2.0}, {2.0, 0.0}}), zeros<double>({0})};
  auto n2 = foreach::norm(a), n1 = foreach::norm(a, 1), ni = foreach::norm(a, INFINITY), n0 = foreach::norm(a, 0),
       n3 = foreach::norm(a, 3);
  CHECK(n2[0].item() == 5.0);
  CHECK(n2[1].item() == 3.0);
  CHECK(n2[2].item() == 0.0);
  CHECK(n1[1].item() == 5.0);
  CHECK(ni[0].item() == 4.0);
  CHECK(n0[1].item() == 3.0);
  CHECK(n3[0].item() == doctest::Approx(std::cbrt(27.0 + 64.0)));
  std::vector<Tf> f{tensor<float>({3.f, 4.f})};
  CHECK(foreach::norm(f)[0].item() == 5.f);
}

TEST_CASE("update_ema: ema = decay * ema + (1 - decay) * model") {
  std::vector<Td> ema{tensor<double>({1.0, 2.0}), tensor<double>({-1.0})}, model{tensor<double>({3.0, 0.0}), tensor<double>({1.0})};
  update_ema(ema, model, 0.9);
  CHECK(ema[0].to_vector()[0] == doctest::Approx(0.9 * 1 + 0.1 * 3));
  CHECK(ema[0].to_vector()[1] == doctest::Approx(1.8));
  CHECK(ema[1].item() == doctest::Approx(-0.8));
  // parameters that require grad are updated too (no_grad inside)
  Td p = tensor<double>({4.0}).requires_grad_();
  std::vector<Td> e{zeros<double>({1})};
  update_ema(e, std::vector<Td>{p}, 0.5);
  CHECK(e[0].item() == 2.0);
  update_ema({e[0]}, {p}, 0.5);  // braced lists
  CHECK(e[0].item() == 3.0);
}

TEST_CASE("clip_grad_norm_: total norm, scaling, inf norm, non-finite") {
  Td a = zeros<double>({2}).requires_grad_(), b = zeros<double>({2, 2}).requires_grad_(), c = zeros<double>({3}).requires_grad_();
  a.set_grad(tensor<double>({3.0, 0.0}));
  b.set_grad(tensor<double>({{0.0, 4.0}, {0.0, 0.0}}));
  std::vector<Td> ps{a, b, c};  // c has no gradient: skipped
  double total = nn::utils::clip_grad_norm_(ps, 1.0);
  CHECK(total == doctest::Approx(5.0));
  double coef = 1.0 / (5.0 + 1e-6);
  CHECK(a.grad().to_vector()[0] == doctest::Approx(3 * coef).epsilon(1e-15));
  CHECK(b.grad().to_vector()[1] == doctest::Approx(4 * coef).epsilon(1e-15));
  // below max_norm: unchanged (coefficient clamped to 1)
  double t2 = nn::utils::clip_grad_norm_(ps, 10.0);
  CHECK(t2 == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(a.grad().to_vector()[0] == doctest::Approx(3 * coef).epsilon(1e-15));
  a.set_grad(tensor<double>({-6.0, 1.0}));
  CHECK(nn::utils::clip_grad_norm_(ps, 2.0, INFINITY) == 6.0);
  CHECK(a.grad().to_vector()[0] == doctest::Approx(-6 * 2 / (6 + 1e-6)));
  a.set_grad(tensor<double>({INFINITY, 1.0}));
  CHECK_THROWS_WITH_AS(nn::utils::clip_grad_norm_(ps, 1.0, 2.0, true), doctest::Contains("non-finite"), error);
  CHECK(std::isinf(nn::utils::clip_grad_norm_(ps, 1.0)));
  a.set_grad(tensor<double>({3.0, 4.0}));
  CHECK(nn::utils::clip_grad_norm_({a}, 100.0) == doctest::Approx(5.0));  // a braced list
  std::vector<Td> none{zeros<double>({1})};
  CHECK(nn::utils::clip_grad_norm_(none, 1.0) == 0.0);
}
