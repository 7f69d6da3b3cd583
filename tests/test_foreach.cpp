// foreach ops: NaN propagation, the general (strided / autograd) path, errors naming the index,
// no heap allocation on the fast path; foreach::norm, EMA and clip_grad_norm_ against closed
// forms. (test_foreach_ops.cpp: every form against a plain loop; test_foreach_dtypes.cpp: other
// dtypes.)
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <reel/optim/optimizers.hpp>
#include <reel/reel.hpp>

#include "alloc_count.hpp"

using namespace reel;
using Tf = Tensor<float>;
using Td = Tensor<double>;

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
