// PyTorch's selection ops and statistics (issue 16's missing ops): gather, scatter_add,
// index_select, index_add, flip, roll, masked_fill, var / std_dev / var_mean, clamp with tensor
// bounds. Values against hand-computed small cases (PyTorch's documented semantics),
// derivatives with check_ad.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;
using Td = Tensor<double>;
using Ti = Tensor<int64_t>;
using V = std::vector<Td>;

TEST_CASE("gather and scatter_add along a dim, index smaller than the input") {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto idx = from_vector<int64_t>({0, 0, 1, 0}, {2, 2});
  // out[i][j] = x[i][idx[i][j]]
  CHECK(gather(x, 1, idx).to_vector() == std::vector<double>{1, 1, 5, 4});
  CHECK(gather(x, 0, from_vector<int64_t>({1, 0}, {1, 2})).to_vector() == std::vector<double>{4, 2});
  CHECK_THROWS_AS(gather(x, 1, from_vector<int64_t>({0, 0, 0}, {3, 1})), index_error);
  CHECK_THROWS_AS(gather(x, 1, from_vector<int64_t>({3}, {1, 1})), index_error);
  // x[i][idx[i][j]] += src[i][j]; duplicates accumulate; src larger than idx
  auto src = from_vector<double>({10, 20, 30, 40, 50, 60}, {2, 3});
  CHECK(scatter_add(x, 1, idx, src).to_vector() == std::vector<double>{31, 2, 3, 4 + 50, 5 + 40, 6});
  // index smaller than x along the other dim: row 1 untouched
  CHECK(scatter_add(x, 1, from_vector<int64_t>({2}, {1, 1}), src).to_vector() == std::vector<double>{1, 2, 13, 4, 5, 6});
  autograd::check_ad([&](const V& v) { return gather(v[0], 1, idx); }, V{x});
  autograd::check_ad([&](const V& v) { return scatter_add(v[0], 1, idx, v[1]); }, V{x, src});
}

TEST_CASE("index_select, index_add") {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto idx = tensor<int64_t>({2, 0, 2});
  CHECK(index_select(x, 0, idx).to_vector() == std::vector<double>{5, 6, 1, 2, 5, 6});
  CHECK(index_select(x, 1, tensor<int64_t>({1})).to_vector() == std::vector<double>{2, 4, 6});
  auto src = from_vector<double>({1, 1, 2, 2, 3, 3}, {3, 2});
  // rows 2, 0, 2 get src's rows 0, 1, 2 (times alpha)
  CHECK(index_add(x, 0, idx, src, 2.0).to_vector() == std::vector<double>{1 + 4, 2 + 4, 3, 4, 5 + 2 + 6, 6 + 2 + 6});
  CHECK_THROWS_AS(index_add(x, 0, idx, from_vector<double>({1, 2}, {1, 2})), index_error);
  autograd::check_ad([&](const V& v) { return index_select(v[0], 0, idx); }, V{x});
  autograd::check_ad([&](const V& v) { return index_add(v[0], 0, idx, v[1], 0.5); }, V{x, src});
}

TEST_CASE("flip and roll") {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(flip(x, {1}).to_vector() == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK(flip(x, {0, 1}).to_vector() == std::vector<double>{6, 5, 4, 3, 2, 1});
  CHECK_THROWS_AS(flip(x, {1, -1}), value_error);
  CHECK(roll(x, 1, 1).to_vector() == std::vector<double>{3, 1, 2, 6, 4, 5});
  CHECK(roll(x, -1, 1).to_vector() == std::vector<double>{2, 3, 1, 5, 6, 4});
  CHECK(roll(x, 7, 1).to_vector() == std::vector<double>{3, 1, 2, 6, 4, 5});  // 7 = 1 mod 3
  CHECK(roll(x, 2).to_vector() == std::vector<double>{5, 6, 1, 2, 3, 4});      // flattened
  CHECK(roll(x, 2).sizes() == Shape{2, 3});
  CHECK(roll(x, std::vector<int64_t>{1, 1}, {0, 1}).to_vector() == std::vector<double>{6, 4, 5, 3, 1, 2});
  autograd::check_ad([](const V& v) { return flip(v[0], {0, 1}); }, V{x});
  autograd::check_ad([](const V& v) { return roll(v[0], 1, 1); }, V{x});
}

TEST_CASE("masked_fill") {
  auto x = tensor<double>({1, 2, 3});
  auto m = tensor<bool>({true, false, true});
  CHECK(masked_fill(x, m, -1.0).to_vector() == std::vector<double>{-1, 2, -1});
  CHECK(masked_fill(x, m, Td(full<double>({}, 7.0))).to_vector() == std::vector<double>{7, 2, 7});
  CHECK_THROWS_AS(masked_fill(x, m, tensor<double>({1, 2})), value_error);
  auto xr = tensor<double>({1, 2, 3}).requires_grad_();
  sum(masked_fill(xr, m, 0.0)).backward();
  CHECK(xr.grad().to_vector() == std::vector<double>{0, 1, 0});
}

TEST_CASE("var, std, var_mean with correction") {
  auto x = from_vector<double>({1, 2, 3, 4, 6, 8}, {2, 3});
  // row 0: mean 2, squares 1 + 0 + 1 = 2; row 1: mean 6, squares 4 + 0 + 4 = 8
  CHECK(var(x, {1}).to_vector() == std::vector<double>{1, 4});
  CHECK(var(x, {1}, 0).to_vector() == std::vector<double>{2.0 / 3, 8.0 / 3});
  CHECK(Td(std_dev(x, {1})).to_vector() == std::vector<double>{1, 2});
  auto [v, m] = var_mean(x, {1}, 1, true);
  CHECK(v.sizes() == Shape{2, 1});
  CHECK(m.to_vector() == std::vector<double>{2, 6});
  // all elements: mean 4, squares 9 + 4 + 1 + 0 + 4 + 16 = 34, / 5
  CHECK(var(x).item() == doctest::Approx(34.0 / 5));
  CHECK(std::isnan(var(tensor<double>({3.0})).item()));  // N - correction = 0: 0 / 0
  // complex: |x - mean|^2, real result
  using C = std::complex<double>;
  auto z = tensor<C>({C(1, 1), C(-1, -1)});
  static_assert(std::is_same_v<decltype(var(z))::value_type, double>);
  CHECK(var(z).item() == doctest::Approx(4.0));
  // std of a constant row has gradient 0 (PyTorch), not NaN
  auto c = tensor<double>({2, 2, 2}).requires_grad_();
  std_dev(c).backward();
  CHECK(c.grad().to_vector() == std::vector<double>{0, 0, 0});
  autograd::check_ad([](const V& w) { return var(w[0], {1}); }, V{x});
  autograd::check_ad([](const V& w) { return Td(std_dev(w[0], {0}, 0)); }, V{x});
}

TEST_CASE("clamp with tensor bounds: values and PyTorch 2.15's gradients") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  auto x = tensor<double>({-2, -1, 0, 1, 2, nan}).requires_grad_();
  auto lo = full<double>({6}, -1.0).requires_grad_();
  auto hi = full<double>({6}, 1.0).requires_grad_();
  Td y = clamp(x, lo, hi);
  auto yv = y.to_vector();
  CHECK(std::vector<double>(yv.begin(), yv.end() - 1) == std::vector<double>{-1, -1, 0, 1, 1});
  CHECK(std::isnan(yv[5]));
  sum(y).backward();
  // the gradients PyTorch 2.15 gives (torch.clamp(x, lo, hi) with tensors)
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 1, 0.5, 0, 1});
  CHECK(lo.grad().to_vector() == std::vector<double>{1, 0.5, 0, 0, 0, 0});
  CHECK(hi.grad().to_vector() == std::vector<double>{0, 0, 0, 0.5, 1, 0});
  auto a = tensor<double>({0.3, -0.7, 1.4});
  autograd::check_ad([](const V& v) { return clamp(v[0], v[1], v[2]); }, V{a, tensor<double>({0.0, -0.5, -1.0}), tensor<double>({1.0, 0.5, 1.0})});
  CHECK(Td(clamp(a, tensor<double>({0.5}), 1.0)).to_vector() == std::vector<double>{0.5, 0.5, 1.0});
}

TEST_CASE("scatter: values (the last duplicate wins on the CPU), a number, PyTorch's gradients") {
  auto x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto src = from_vector<double>({10, 20, 30, 40, 50, 60}, {2, 3});
  auto dup = from_vector<int64_t>({0, 0, 1, 0}, {2, 2});
  // x[i][idx[i][j]] = src[i][j]: row 0 writes 10 then 20 at column 0; row 1 writes 40 at 1, 50 at 0
  CHECK(scatter(x, 1, dup, src).to_vector() == std::vector<double>{20, 2, 3, 50, 40, 6});
  CHECK(scatter(x, 1, dup, 7.0).to_vector() == std::vector<double>{7, 2, 3, 7, 7, 6});
  CHECK(scatter(x, 0, from_vector<int64_t>({1, 0}, {1, 2}), src).to_vector() == std::vector<double>{1, 20, 3, 10, 5, 6});
  CHECK_THROWS_AS(scatter(x, 1, from_vector<int64_t>({3}, {1, 1}), src), index_error);
  CHECK_THROWS_AS(scatter(x, 1, from_vector<int64_t>({0, 0, 0, 0}, {1, 4}), src), index_error);
  {
    auto xg = x.clone().requires_grad_(), sg = src.clone().requires_grad_();
    sum(scatter(xg, 1, dup, sg)).backward();
    CHECK(xg.grad().to_vector() == std::vector<double>{0, 1, 1, 0, 0, 1});  // zero where written
    CHECK(sg.grad().to_vector() == std::vector<double>{1, 1, 0, 1, 1, 0});  // gathered, duplicates too
  }
  auto distinct = from_vector<int64_t>({2, 0, 1, 0}, {2, 2});
  autograd::check_ad([&](const V& v) { return scatter(v[0], 1, distinct, v[1]); }, V{x, src});
  auto ints = scatter(from_vector<int64_t>({0, 0, 0}, {3}), 0, tensor<int64_t>({2}), from_vector<int64_t>({9}, {1}));
  CHECK(ints.to_vector() == std::vector<int64_t>{0, 0, 9});
}

TEST_CASE("cumprod: values, integer results, gradients to second order with zeros") {
  CHECK(cumprod(tensor<double>({2, 3, 0, 4, 0, 5}), 0).to_vector() == std::vector<double>{2, 6, 0, 0, 0, 0});
  Tensor<int64_t> ci = cumprod(tensor<int32_t>({1, 2, 3, -4}), 0);
  CHECK(ci.to_vector() == std::vector<int64_t>{1, 2, 6, -24});
  auto m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumprod(m, 1).to_vector() == std::vector<double>{1, 2, 6, 4, 20, 120});
  CHECK(cumprod(m, 0).to_vector() == std::vector<double>{1, 2, 3, 4, 10, 18});
  CHECK(cumprod(m * 2.0, -1).to_vector() == std::vector<double>{2, 8, 48, 8, 80, 960});
  {
    // L = x0 + x0 x1 + x0 x1 x2 + x0 x1 x2 x3 at (2, 3, 0, 4): dL/dx = (1 + x1, x0, x0 x1 (1 + x3), 0)
    auto x = tensor<double>({2, 3, 0, 4}).requires_grad_();
    sum(cumprod(x, 0)).backward();
    CHECK(x.grad().to_vector() == std::vector<double>{4, 2, 30, 0});
  }
  autograd::CheckAdOptions all_orders;
  all_orders.forward_second_order = true;
  autograd::check_ad([](const V& v) { return cumprod(v[0], 0); }, V{tensor<double>({2, 3, 0, 4, 0, 0.5})}, all_orders);
  autograd::check_ad([](const V& v) { return cumprod(v[0], 0); }, V{tensor<double>({2, 3, 0, 4, 1, 0.5})}, all_orders);
  autograd::check_ad([](const V& v) { return cumprod(v[0], 1); }, V{from_vector<double>({0.5, 0, 2, -1.5, 0.7, 1.2}, {2, 3})});
  autograd::check_ad([](const V& v) { return cumprod(v[0], 0); }, V{from_vector<double>({0.5, -0.3, 2, -1.5, 0.7, 1.2}, {3, 2})});
}

TEST_CASE("clamp_min / clamp_max with a tensor bound: maximum / minimum, PyTorch 2.15's gradients") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  auto x = tensor<double>({0, 1, 2, nan, 1, -1}).requires_grad_();
  auto b = tensor<double>({1, 1, 1, 0, nan, -2}).requires_grad_();
  auto same = [](const std::vector<double>& a, const std::vector<double>& e) {
    for (size_t i = 0; i < e.size(); ++i)
      if (!(a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i])))) return false;
    return a.size() == e.size();
  };
  Td lo = clamp_min(x, b);
  CHECK(same(lo.to_vector(), {1, 1, 2, nan, nan, -1}));
  sum(lo).backward();
  // torch.clamp_min(x, b) (and torch.clamp(x, min=b)) in PyTorch 2.15
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0.5, 1, 1, 1, 1});
  CHECK(b.grad().to_vector() == std::vector<double>{1, 0.5, 0, 1, 1, 0});
  x = x.detach().requires_grad_();
  b = b.detach().requires_grad_();
  Td hi = clamp_max(x, b);
  CHECK(same(hi.to_vector(), {0, 1, 1, nan, nan, -2}));
  sum(hi).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1, 0.5, 0, 1, 1, 0});
  CHECK(b.grad().to_vector() == std::vector<double>{0, 0.5, 1, 1, 1, 1});
  auto a = tensor<double>({0.3, -0.7, 1.4});
  autograd::check_ad([](const V& v) { return clamp_min(v[0], v[1]); }, V{a, tensor<double>({0.0, -0.5, 2.0})});
  autograd::check_ad([](const V& v) { return clamp_max(v[0], v[1]); }, V{a, tensor<double>({0.0, -0.5, 2.0})});
}
