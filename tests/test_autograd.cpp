// Reverse mode: the API, accumulation, higher orders, the seed's semantics, bad input,
// in-place safety, hooks, and threads. Expected values are closed forms.
#include <doctest/doctest.h>

#include <cmath>
#include <thread>

#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;

TEST_CASE("backward accumulates gradients of leaves") {
  auto x = tensor<double>({1.0, -2.0, 3.0});
  x.requires_grad_();
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  Td y = x * x;
  CHECK_FALSE(y.is_leaf());
  y.sum().backward();
  check_close(x.grad(), {2, -4, 6});
  Td(x * 3.0).sum().backward();  // accumulates
  check_close(x.grad(), {5, -1, 9});
  x.set_grad({});
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("broadcast operands get gradients summed over the broadcast dims") {
  auto a = tensor<double>({{1.0}, {2.0}});      // [2, 1]
  auto b = tensor<double>({10.0, 20.0, 30.0});  // [3]
  a.requires_grad_();
  b.requires_grad_();
  Td y = a * b;  // [2, 3]
  y.sum().backward();
  check_close(a.grad(), {60, 60});
  check_close(b.grad(), {3, 3, 3});
}

TEST_CASE("a pair energy over [n, n, 3] (short rows, broadcasts, dim-3 sums): gradient and tangent in closed form") {
  // E = sum over i, j of exp(-|x_i - x_j|^2): dE/dx_i = -4 sum_j exp(-|x_i - x_j|^2) (x_i - x_j)
  for (int64_t n : {1, 2, 7, 38, 70}) {
    Generator gen(n);
    Td P = randn<double>({n, 3}, gen);
    Td V = randn<double>({n, 3}, gen);
    auto energy = [](const Td& x) {
      Td d = x.unsqueeze(1) - x.unsqueeze(0);
      return sum(exp(-sum(d * d, Shape{2})));
    };
    Td x = P.detach();
    x.requires_grad_();
    auto g = autograd::grad({energy(x)}, {x})[0];
    auto pv = P.to_vector(), vv = V.to_vector();
    std::vector<double> want(3 * n, 0.0);
    double dir = 0;  // the directional derivative along V
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double r2 = 0;
        for (int k = 0; k < 3; ++k) r2 += (pv[3 * i + k] - pv[3 * j + k]) * (pv[3 * i + k] - pv[3 * j + k]);
        for (int k = 0; k < 3; ++k) want[3 * i + k] += -4 * std::exp(-r2) * (pv[3 * i + k] - pv[3 * j + k]);
      }
    for (int64_t q = 0; q < 3 * n; ++q) dir += want[q] * vv[q];
    INFO("n = ", n);
    check_close(g.reshape({-1}), want, 1e-12);
    auto [value, tangent] = autograd::functional::jvp(energy, {P}, {V});
    CHECK(tangent.item() == doctest::Approx(dir).epsilon(1e-12));
  }
}

TEST_CASE("third derivative of sin(x) * exp(x) through create_graph") {
  auto x = tensor<double>({-1.2, 0.3, 0.9, 2.0});
  x.requires_grad_();
  Td y = sin(x) * exp(x);
  auto g1 = autograd::grad({y.sum()}, {x}, {}, {.create_graph = true})[0];
  auto g2 = autograd::grad({g1.sum()}, {x}, {}, {.create_graph = true})[0];
  auto g3 = autograd::grad({g2.sum()}, {x})[0];
  std::vector<double> expect;
  for (double v : {-1.2, 0.3, 0.9, 2.0}) expect.push_back(2 * std::exp(v) * (std::cos(v) - std::sin(v)));
  check_close(g3, expect, 1e-12);
  std::vector<double> e1;
  for (double v : {-1.2, 0.3, 0.9, 2.0}) e1.push_back(std::exp(v) * (std::cos(v) + std::sin(v)));
  check_close(g1, e1);
}

TEST_CASE("retain_grad, detach, no_grad and enable_grad") {
  auto x = tensor<double>({1.0, 2.0});
  x.requires_grad_();
  Td h = x * 2.0;
  h.retain_grad();
  CHECK(h.retains_grad());
  Td y = h * h;
  y.sum().backward();
  check_close(h.grad(), {4, 8});
  check_close(x.grad(), {8, 16});

  Td d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_same_storage(x));
  {
    autograd::no_grad ng;
    CHECK_FALSE(autograd::is_grad_enabled());
    Td z = x * 3.0;
    CHECK_FALSE(z.requires_grad());
    {
      autograd::enable_grad eg;
      Td w = x * 3.0;
      CHECK(w.requires_grad());
    }
  }
  CHECK(autograd::is_grad_enabled());
}

TEST_CASE("tensor hooks replace the gradient and can be removed") {
  auto x = tensor<double>({1.0, 2.0});
  x.requires_grad_();
  int calls = 0;
  auto hx = x.register_hook([&](const Td& g) {
    ++calls;
    return Td(g * 10.0);
  });
  Td h = x * 3.0;
  auto hh = h.register_hook([&](const Td& g) {
    ++calls;
    return Td(g + 1.0);
  });
  h.sum().backward();
  CHECK(calls == 2);
  check_close(x.grad(), {60, 60});  // ((1 + 1) * 3) * 10
  hx.remove();
  hh.remove();
  x.set_grad({});
  Td(x * 3.0).sum().backward();
  CHECK(calls == 2);
  check_close(x.grad(), {3, 3});
  // observing hooks (returning void) see the gradient
  double seen = 0;
  x.register_hook([&](const Td& g) { seen = g.sum().item(); });
  x.set_grad({});
  Td(x * 5.0).sum().backward();
  CHECK(seen == 10.0);
}

TEST_CASE("a chain of 100k recorded ops backpropagates without recursion") {
  auto x = tensor<double>({0.5});
  x.requires_grad_();
  Td y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0000001;
  y.backward();
  check_close(x.grad(), {std::pow(1.0000001, 100000)}, 1e-9);
}

TEST_CASE("bad input gives clear errors") {
  auto x = tensor<double>({1.0, 2.0});
  x.requires_grad_();
  Td y = x * x;
  CHECK_THROWS_AS(y.backward(), value_error);  // non-scalar without a gradient
  auto u = tensor<double>({3.0});
  u.requires_grad_();
  CHECK_THROWS_WITH_AS(autograd::grad({y.sum()}, {u}), doctest::Contains("allow_unused"), error);
  auto r = autograd::grad({Td(x * x).sum()}, {x, u}, {}, {.allow_unused = true});
  CHECK(r[0].defined());
  CHECK_FALSE(r[1].defined());
  Td s = Td(exp(x)).sum();
  s.backward();
  CHECK_THROWS_WITH_AS(s.backward(), doctest::Contains("retain_graph"), error);
  Td s2 = Td(exp(x)).sum();
  s2.backward({}, true);
  s2.backward();  // the graph was retained once
  Td z = x * 2.0;
  CHECK_THROWS_AS(autograd::grad({z}, {x}, {tensor<double>({1.0, 1.0, 1.0})}), value_error);
  CHECK_THROWS_AS(Td(tensor<double>({1.0})).backward(), error);  // requires no grad
  auto i = tensor<int64_t>({1, 2});
  CHECK_THROWS_AS(i.requires_grad_(), type_error);
  CHECK_THROWS_AS(x.mul_(2.0), error);  // a leaf that requires grad, in place
}

TEST_CASE("modifying a saved tensor in place is caught at backward") {
  auto x = tensor<double>({0.5, 1.5});
  x.requires_grad_();
  Td a = x * 1.0;
  Td y = sin(a);  // saves a
  a.mul_(2.0);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("modified by an inplace operation"), error);
  // a rule that does not read the modified tensor is fine (PyTorch agrees)
  Td b = x * 1.0;
  Td z = b * 3.0;
  b.mul_(2.0);
  z.sum().backward();
  check_close(x.grad(), {3, 3});
  // in-place ops are recorded: d/dx of (x * 1).mul_(2) is 2
  x.set_grad({});
  Td c = x * 1.0;
  c.mul_(2.0);
  c.sum().backward();
  check_close(x.grad(), {2, 2});
  // writing a differentiable value into part of another tensor is refused, not silently lost
  auto buf = zeros<double>({2, 2});
  CHECK_THROWS_AS(buf.select(0, 0).copy_(x * 2.0), not_implemented_error);
}

TEST_CASE("fmin / fmax: the gradient goes to the non-NaN input, ties split it") {
  const double nan = std::nan("");
  auto x = tensor<double>({1.0, nan, 3.0});
  auto y = tensor<double>({2.0, 2.0, nan});
  x.requires_grad_();
  y.requires_grad_();
  Td(nan_to_num(fmin(x, y), 0)).sum().backward();
  check_close(x.grad(), {1, 0, 1});
  check_close(y.grad(), {0, 1, 0});
  // both NaN: the first input gets the gradient; ties split it in half (as maximum does)
  auto p = tensor<double>({nan, 4.0});
  auto q = tensor<double>({nan, 4.0});
  p.requires_grad_();
  q.requires_grad_();
  Td(fmax(p, q)).backward(tensor<double>({1.0, 1.0}));  // (nan_to_num would zero the NaN's gradient)
  check_close(p.grad(), {1, 0.5});
  check_close(q.grad(), {0, 0.5});
  auto m = tensor<double>({4.0});
  auto n = tensor<double>({4.0});
  m.requires_grad_();
  n.requires_grad_();
  Td(maximum(m, n)).backward();
  check_close(m.grad(), {0.5});
  check_close(n.grad(), {0.5});
  // forward mode selects the active side's tangent: an inf tangent on the other side stays out
  autograd::forward_ad::dual_level level;
  const double inf = std::numeric_limits<double>::infinity();
  auto xd = autograd::forward_ad::make_dual(tensor<double>({1.0, nan, 3.0}), tensor<double>({5.0, inf, 7.0}));
  auto yd = autograd::forward_ad::make_dual(tensor<double>({2.0, 2.0, nan}), tensor<double>({inf, 6.0, inf}));
  auto t = autograd::forward_ad::unpack_dual(Td(fmin(xd, yd))).tangent;
  check_close(t, {5, 6, 7});
}

TEST_CASE("relu's gradient is PyTorch's threshold_backward: zero where relu(x) <= 0, so it passes at NaN") {
  // derivatives.yaml: relu -> threshold_backward(grad, result, 0), i.e. grad * !(result <= 0)
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  auto x = tensor<double>({nan, -0.0, 0.0, -1.0, 2.0, inf, -inf});
  x.requires_grad_();
  Td(relu(x)).backward(ones<double>({7}));
  CHECK(x.grad().to_vector() == std::vector<double>{1, 0, 0, 0, 1, 1, 0});
  // forward mode: the same factor times the tangent
  autograd::forward_ad::dual_level level;
  auto xd = autograd::forward_ad::make_dual(tensor<double>({nan, -0.0, 0.0, 3.0}), tensor<double>({2.0, 2.0, 2.0, 2.0}));
  CHECK(autograd::forward_ad::unpack_dual(Td(relu(xd))).tangent.to_vector() == std::vector<double>{2, 0, 0, 2});
}

TEST_CASE("dropout: real and complex, gradient mask / (1 - p) under create_graph") {
  Generator gen(7);
  auto x = randn<double>({1000}, gen);
  x.requires_grad_();
  const double p = 0.3;
  Td y = nn::functional::dropout(x, p, true, gen);
  auto xv = x.detach().to_vector(), yv = y.detach().to_vector();
  int64_t kept = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    bool zero = yv[i] == 0.0;
    CHECK((zero || std::abs(yv[i] - xv[i] / (1 - p)) < 1e-12));
    kept += !zero;
  }
  CHECK(kept > 600);
  CHECK(kept < 800);
  auto g = autograd::grad({Td(y * y).sum()}, {x}, {}, {.create_graph = true})[0];  // 2 y mask / (1 - p)
  auto gv = g.detach().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) CHECK(gv[i] == doctest::Approx(yv[i] == 0 ? 0 : 2 * xv[i] / ((1 - p) * (1 - p))));
  auto gg = autograd::grad({g.sum()}, {x})[0].to_vector();  // 2 mask^2 / (1 - p)^2 ... per element
  for (size_t i = 0; i < xv.size(); ++i) CHECK(gg[i] == doctest::Approx(yv[i] == 0 ? 0 : 2 / ((1 - p) * (1 - p))));
  CHECK(nn::functional::dropout(x, 0.0, true, gen).is_same_storage(x));
  CHECK(nn::functional::dropout(x, 0.5, false, gen).is_same_storage(x));
  auto all = nn::functional::dropout(x, 1.0, true, gen).detach().to_vector();
  for (double v : all) CHECK(v == 0.0);
  CHECK_THROWS_AS(nn::functional::dropout(x, 1.5, true, gen), value_error);

  using C = std::complex<double>;
  auto z = randn<C>({500}, gen);
  auto zd = nn::functional::dropout(z, 0.5, true, gen).to_vector();
  auto zv = z.to_vector();
  for (size_t i = 0; i < zv.size(); ++i) {
    bool both_zero = zd[i].real() == 0 && zd[i].imag() == 0;
    CHECK((both_zero || std::abs(zd[i] - zv[i] * 2.0) < 1e-12));
  }
}

TEST_CASE("complex autograd: |x|^2 has gradient 2x") {
  using C = std::complex<double>;
  auto x = tensor<C>({C(1.0, 2.0), C(-0.5, 0.25)});
  x.requires_grad_();
  Tensor<C>(cast<C>(square(abs(x)))).sum().backward();
  auto g = x.grad().to_vector();
  CHECK(std::abs(g[0] - C(2.0, 4.0)) < 1e-12);
  CHECK(std::abs(g[1] - C(-1.0, 0.5)) < 1e-12);
  // the same loss written as real(x conj(x)), through real-valued views of the graph
  x.set_grad({});
  Tensor<C>(cast<C>(real(x * conj(x)))).sum().backward();
  g = x.grad().to_vector();
  CHECK(std::abs(g[0] - C(2.0, 4.0)) < 1e-12);
}

TEST_CASE("two threads differentiate independent graphs at once") {
  auto work = [](double s, double* out, bool* mode_ok) {
    for (int rep = 0; rep < 200; ++rep) {
      auto x = tensor<double>({s, 2 * s});
      x.requires_grad_();
      Td y = sin(x) * x;
      auto g = autograd::grad({y.sum()}, {x}, {}, {.create_graph = true})[0];
      auto h = autograd::grad({g.sum()}, {x})[0];
      out[0] = g.detach()[0].item();
      out[1] = h[0].item();
      if (rep == 100) {
        autograd::no_grad ng;  // thread-local: must not affect the other thread
        *mode_ok = !autograd::is_grad_enabled();
      }
    }
  };
  double r1[2], r2[2];
  bool m1 = false, m2 = false;
  std::thread t1(work, 0.3, r1, &m1), t2(work, 1.7, r2, &m2);
  t1.join();
  t2.join();
  CHECK(m1);
  CHECK(m2);
  for (auto [s, r] : {std::pair{0.3, r1}, std::pair{1.7, r2}}) {
    CHECK(r[0] == doctest::Approx(std::cos(s) * s + std::sin(s)));
    CHECK(r[1] == doctest::Approx(-std::sin(s) * s + 2 * std::cos(s)));
  }
}

TEST_CASE("autograd::backward with several outputs and explicit gradients") {
  auto x = tensor<double>({1.0, 2.0});
  x.requires_grad_();
  Td a = x * 2.0, b = x * x;
  autograd::backward({a, b}, {tensor<double>({1.0, 1.0}), tensor<double>({0.5, 0.5})});
  check_close(x.grad(), {3, 4});
}

TEST_CASE("piecewise-constant ops give zero gradients; bool results cut the graph (PyTorch)") {
  for (int k = 0; k < 3; ++k) {
    auto x = tensor<double>({1.5, -0.5, 2.0}).requires_grad_();
    Tensor<double> y = k == 0 ? Tensor<double>(floor(x)) : k == 1 ? Tensor<double>(sign(x) * 2) : Tensor<double>(ceil(x) + round(x));
    CHECK(y.requires_grad());
    sum(y).backward();
    REQUIRE(x.grad().defined());  // PyTorch: zeros, not None
    CHECK(x.grad().to_vector() == std::vector<double>{0, 0, 0});
  }
  auto x = tensor<double>({1.5, -0.5}).requires_grad_();
  CHECK_FALSE(Tensor<bool>(gt(x, 0)).requires_grad());
  CHECK_FALSE(Tensor<double>(cast<double>(gt(x, 0)) * 2).requires_grad());
  CHECK_FALSE(Tensor<int64_t>(cast<int64_t>(x)).requires_grad());
  // through a where, x reaches the result only via its condition: no gradient either
  auto w = tensor<double>({3.0, 4.0}).requires_grad_();
  Tensor<double> z = where(gt(x, 0), w, 0.0);
  sum(z).backward();
  CHECK(w.grad().to_vector() == std::vector<double>{1, 0});
  CHECK_FALSE(x.grad().defined());
  // one path through a bool, one through floor: the gradient is zeros
  auto v = tensor<double>({1.5, -0.5}).requires_grad_();
  sum(Tensor<double>(cast<double>(gt(v, 0)) + floor(v))).backward();
  REQUIRE(v.grad().defined());
  CHECK(v.grad().to_vector() == std::vector<double>{0, 0});
}

TEST_CASE("autograd: post-accumulate-grad hooks and callbacks queued for the end of the pass") {
  Tensor<double> w = from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor<double> v = from_vector<double>({3, 4}, {2}).requires_grad_();
  std::vector<std::string> log;
  auto h = w.register_post_accumulate_grad_hook([&](const Tensor<double>& leaf) {
    log.push_back("w " + std::to_string(leaf.grad().to_vector()[1]));  // the accumulated .grad
    if (log.size() == 1) autograd::queue_callback([&] { log.push_back("end"); });
  });
  v.register_post_accumulate_grad_hook([&](const Tensor<double>&) { log.push_back("v"); });
  Tensor<double>(sum(w * w * v)).backward();
  CHECK(log == std::vector<std::string>{"w 16.000000", "v", "end"});  // d/dw1 = 2 w1 v1 = 16
  log.clear();
  Tensor<double>(sum(w * v)).backward();  // accumulates: 16 + 4
  CHECK(log == std::vector<std::string>{"w 20.000000", "v", "end"});  // (queued again: the log was cleared)
  h.remove();
  log.clear();
  Tensor<double>(sum(w)).backward();
  CHECK(log.empty());
  CHECK_THROWS_WITH_AS(autograd::queue_callback([] {}), doctest::Contains("no backward pass is running"), error);
  Tensor<double> nonleaf = w * 2.0;
  CHECK_THROWS_AS(nonleaf.register_post_accumulate_grad_hook([](const Tensor<double>&) {}), error);
}
