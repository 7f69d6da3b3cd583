// autograd::compile: a replay gives what running the function eagerly gives (forces,
// Hessians, a PINN loss and its gradients, at new inputs each call), captures once per
// signature, reads closed-over tensors at each call, and refuses — running eagerly, with a
// warning — whatever a replay would get wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <reel/reel.hpp>

#include "../examples/lj_model.hpp"
#include "../examples/pinn_model.hpp"
#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;
namespace ag = autograd;

namespace {
template <class T>
bool same_values(const Tensor<T>& a, const Tensor<T>& b) {
  return a.sizes() == b.sizes() && a.contiguous().to_vector() == b.contiguous().to_vector();
}
// Warnings reel emits while alive, in order.
struct WarningLog {
  std::vector<std::string> messages;
  std::function<void(const Warning&)> prev;
  WarningLog() {
    set_warning_action(WarningAction::Default);  // also forgets warnings already shown
    prev = set_warning_sink([this](const Warning& w) { messages.push_back(w.message); });
  }
  ~WarningLog() { set_warning_sink(prev); }
};
}  // namespace

TEST_CASE("compile: LJ forces replayed at new configurations equal the eager ones bit for bit") {
  auto forces = ag::compile([](const Td& x) { return lj::forces(x); });
  for (int k = 0; k < 4; ++k) {
    Td P = lj::random_cluster(13, 10 + k);
    CHECK(same_values(forces(P), lj::forces(P)));
  }
  CHECK(forces.captures() == 1);
  CHECK(forces.replays() == 3);
  CHECK(forces.kernels() > 5);
  CHECK(forces.eager_reason().empty());
  // and against the hand-written analytic gradient (independent of autograd)
  Td P = lj::random_cluster(13, 99);
  auto x = P.to_vector();
  std::vector<double> g(x.size());
  lj::gradient_by_hand(x.data(), 13, g.data());
  for (double& v : g) v = -v;
  check_close(forces(P).reshape({-1}), g, 1e-10);
}

TEST_CASE("compile: a new shape is captured again; each signature replays its own kernels") {
  auto energy = ag::compile([](const Td& x) { return lj::energy(x); });
  Td a = lj::random_cluster(8, 1), b = lj::random_cluster(13, 2);
  for (int k = 0; k < 2; ++k) {
    CHECK(same_values(energy(a), lj::energy(a)));
    CHECK(same_values(energy(b), lj::energy(b)));
  }
  CHECK(energy.captures() == 2);
  CHECK(energy.replays() == 2);
  // a float argument is another signature
  auto twice = ag::compile([](const auto& x) { return Tensor<typename std::decay_t<decltype(x)>::value_type>(x * 2); });
  CHECK(same_values(twice(tensor<float>({1, 2})), tensor<float>({2, 4})));
  CHECK(same_values(twice(tensor<double>({1, 2})), tensor<double>({2, 4})));
  CHECK(same_values(twice(tensor<double>({3, 4})), tensor<double>({6, 8})));
  CHECK(twice.captures() == 2);
  energy.clear();
  CHECK(same_values(energy(a), lj::energy(a)));
  CHECK(energy.captures() == 3);
}

TEST_CASE("compile: Hessian (forward over reverse inside) and jacfwd replay") {
  auto hess = ag::compile([](const Td& x) { return ag::functional::hessian(lj::energy, x); });
  for (int k = 0; k < 3; ++k) {
    Td P = lj::random_cluster(6, 20 + k);
    Td H = hess(P);
    CHECK(same_values(H, ag::functional::hessian(lj::energy, P)));
    CHECK(H.sizes() == Shape{6, 3, 6, 3});
  }
  auto jac = ag::compile([](const Td& x) { return ag::functional::jacfwd([](const Td& y) { return Td(sin(y) * y); }, x); });
  Td x = tensor<double>({0.5, -1.0, 2.0});
  for (int k = 0; k < 2; ++k) {
    Td J = jac(x);
    auto v = x.to_vector();
    std::vector<double> want(9, 0.0);
    for (int i = 0; i < 3; ++i) want[i * 4] = std::cos(v[i]) * v[i] + std::sin(v[i]);
    check_close(J.reshape({-1}), want);
    x = x * 0.5;
  }
  CHECK(jac.replays() == 1);
}

TEST_CASE("compile: a PINN loss and its parameter gradients, weights updated between calls") {
  Generator gen(7);
  pinn::Mlp net(gen);
  auto params = net.parameters();
  auto X = pinn::interior(64, gen), Xb = pinn::boundary(16, gen);
  auto step = ag::compile([&](const pinn::Tf& x, const pinn::Tf& xb) {
    auto l = pinn::loss(net, x, xb);
    return std::make_pair(l.detach(), ag::grad(std::vector<pinn::Tf>{l}, params));
  });
  optim::SGD<float> opt(params, optim::SGDOptions().lr(1e-3));
  for (int k = 0; k < 3; ++k) {
    auto [l, g] = step(X, Xb);
    auto l0 = pinn::loss(net, X, Xb);
    auto g0 = ag::grad(std::vector<pinn::Tf>{l0}, params);
    CHECK(same_values(l, l0.detach()));
    REQUIRE(g.size() == g0.size());
    for (size_t i = 0; i < g.size(); ++i) CHECK(same_values(g[i], g0[i]));
    for (size_t i = 0; i < g.size(); ++i) params[i].set_grad(g[i]);
    opt.step();  // in place: the next replay reads the new weights
  }
  CHECK(step.eager_reason().empty());
  CHECK(step.replays() == 2);
}

TEST_CASE("compile: results are fresh tensors; arguments may be views or expressions") {
  auto f = ag::compile([](const Td& x, const Td& y) { return std::vector<Td>{Td(x * y), Td(x + 1.0), x}; });
  Td a = tensor<double>({1, 2, 3}), b = tensor<double>({4, 5, 6});
  auto r1 = f(a, b);
  auto r2 = f(b, a);  // same signature: replay
  check_close(r1[0], {4, 10, 18});
  check_close(r1[1], {2, 3, 4});
  check_close(r1[2], {1, 2, 3});
  check_close(r2[1], {5, 6, 7});
  CHECK_FALSE(r1[0].is_same_storage(r2[0]));
  CHECK_FALSE(r2[2].is_same_storage(b));
  Td m = tensor<double>({{1, 2, 3}, {4, 5, 6}});
  auto g = ag::compile([](const Td& x) { return std::make_tuple(Td(x * 2.0), sum(x, Shape{0})); });
  for (int k = 0; k < 2; ++k) {
    auto [t2, s] = g(m.t());  // a transposed view
    check_close(t2.reshape({-1}), {2, 8, 4, 10, 6, 12});
    check_close(s, {6, 15});
  }
  auto r3 = f(a * 2.0, b);  // an expression argument
  check_close(r3[0], {8, 20, 36});
}

TEST_CASE("compile: temporaries whose lifetimes do not overlap share memory") {
  const int64_t n = 1 << 17;  // 1 MiB of doubles per buffer
  auto chain = ag::compile([](const Td& x) {
    Td y = x;
    for (int i = 0; i < 10; ++i) y = Td(exp(y) * 0.5);  // each value dies after the next one
    return Td(y + x);
  });
  Generator gen(3);
  Td x = rand<double>({n}, gen);
  Td want = x;
  for (int i = 0; i < 10; ++i) want = Td(exp(want) * 0.5);
  want = Td(want + x);
  for (int k = 0; k < 2; ++k) CHECK(same_values(chain(x), want));
  CHECK(chain.replays() == 1);
  CHECK(chain.buffer_bytes() >= size_t(2 * n * 8));
  CHECK(chain.buffer_bytes() <= size_t(3 * n * 8));  // 10 separate buffers without sharing
}

TEST_CASE("compile: kernels that depend on no argument are folded (computed once, skipped by replays)") {
  // eye, 1 - eye and the arange-based weights depend on nothing the caller can change: one
  // kernel is left to replay, and it reads the folded buffers' values from the capture
  auto masked = ag::compile([](const Td& x) {
    const int64_t n = x.size(0);
    return Td(x * ((1.0 - eye<double>(n)) * arange<double>(n)));
  });
  auto eager = [](const Td& x) {
    const int64_t n = x.size(0);
    std::vector<double> v = x.to_vector();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) v[i * n + j] *= i == j ? 0.0 : double(j);
    return v;
  };
  Generator gen(4);
  for (int k = 0; k < 3; ++k) {
    Td x = randn<double>({5, 5}, gen);
    CHECK(masked(x).to_vector() == eager(x));
  }
  CHECK(masked.replays() == 2);
  CHECK(masked.kernels() == 1);
  // not folded: a buffer a replayed kernel writes too (m *= x), and one a replayed kernel
  // reads before its last write (y reads m = 0, then m is filled with 2)
  auto rewritten = ag::compile([](const Td& x) {
    Td m = eye<double>(x.size(0));
    Td y = x * m;
    m.mul_(x);
    return Td(y + m);
  });
  auto refilled = ag::compile([](const Td& x) {
    Td m = zeros<double>({x.size(0)});
    Td y = x + m;
    m.fill_(2.0);
    return Td(y * m);
  });
  for (int k = 0; k < 3; ++k) {
    Td x = randn<double>({4, 4}, gen), v = randn<double>({4}, gen);
    std::vector<double> want = x.to_vector();
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j) want[i * 4 + j] = i == j ? 2 * want[i * 4 + j] : 0.0;
    CHECK(rewritten(x).to_vector() == want);
    std::vector<double> wv = v.to_vector();
    for (double& q : wv) q *= 2.0;
    CHECK(refilled(v).to_vector() == wv);
  }
  CHECK(rewritten.replays() == 2);
  CHECK(refilled.replays() == 2);
  CHECK(refilled.kernels() == 4);  // zeros, x + m, fill, y * m: all replayed
}

TEST_CASE("compile: cumsum, sort, topk, gather and scatter_add (and their gradients) replay") {
  // a sorted-distance feature with a cumulative sum, differentiated: the backward passes run
  // gather's adjoint (scatter_add) and cumsum's reversed sum
  auto f = ag::compile([](const Td& x) {
    Td v = x.detach();
    v.requires_grad_();
    Td r = sqrt(sum(Td(v * v), Shape{1}));              // [n]
    auto [s, idx] = sort(r, 0, true);                    // descending, with indices
    Td c = cumsum(Td(s * arange<double>(s.size(0))), 0);
    auto top = topk(r, 2);
    Td loss = sum(Td(c * c)) + sum(top.values);
    auto g = ag::grad({loss}, {v})[0];
    return std::make_tuple(Td(c.detach()), Td(idx.to<double>()), Td(g));
  });
  auto eager = [](const Td& x) {
    Td v = x.detach();
    v.requires_grad_();
    Td r = sqrt(sum(Td(v * v), Shape{1}));
    auto [s, idx] = sort(r, 0, true);
    Td c = cumsum(Td(s * arange<double>(s.size(0))), 0);
    auto top = topk(r, 2);
    Td loss = sum(Td(c * c)) + sum(top.values);
    auto g = ag::grad({loss}, {v})[0];
    return std::make_tuple(Td(c.detach()), Td(idx.to<double>()), Td(g));
  };
  Generator gen(8);
  for (int k = 0; k < 4; ++k) {
    Td x = randn<double>({6, 3}, gen);
    auto [c, i, g] = f(x);
    auto [ce, ie, ge] = eager(x);
    CHECK(same_values(c, ce));
    CHECK(same_values(i, ie));
    CHECK(same_values(g, ge));
  }
  CHECK(f.eager_reason().empty());
  CHECK(f.replays() == 3);
  // the values against a loop: ranks change between calls (new sort order each time)
  Td x = randn<double>({6, 3}, gen);
  auto [c, i, g] = f(x);
  auto xv = x.to_vector();
  std::vector<double> r(6);
  for (int q = 0; q < 6; ++q) r[q] = std::sqrt(xv[3 * q] * xv[3 * q] + xv[3 * q + 1] * xv[3 * q + 1] + xv[3 * q + 2] * xv[3 * q + 2]);
  std::vector<double> sr = r;
  std::sort(sr.begin(), sr.end(), std::greater<>());
  std::vector<double> want(6);
  for (int q = 0; q < 6; ++q) want[q] = (q ? want[q - 1] : 0.0) + sr[q] * q;
  check_close(c, want, 1e-12);
  auto iv = i.to_vector();
  for (int q = 0; q < 6; ++q) CHECK(r[static_cast<size_t>(iv[q])] == sr[q]);
}

TEST_CASE("compile: a tensor the function closes over is read at each call") {
  Td w = tensor<double>({1, 2});
  auto f = ag::compile([&](const Td& x) { return Td(x * w + exp(w)); });
  Td x = tensor<double>({3, 4});
  check_close(f(x), {3 + std::exp(1.0), 8 + std::exp(2.0)});
  w.copy_(tensor<double>({-1, 0.5}));
  check_close(f(x), {-3 + std::exp(-1.0), 2 + std::exp(0.5)});
  CHECK(f.replays() == 1);
}

TEST_CASE("compile: what a replay would get wrong runs eagerly, with a warning") {
  WarningLog log;
  Td x = tensor<double>({1, 2, 3});
  SUBCASE("host reads (control flow on values)") {
    auto f = ag::compile([](const Td& v) { return v.sum().item() > 6.5 ? Td(v * 2.0) : Td(v * 3.0); });
    check_close(f(x), {3, 6, 9});
    check_close(f(tensor<double>({2, 2, 3})), {4, 4, 6});  // eager: sees the new values
    CHECK(f.eager_reason().find("host") != std::string::npos);
    CHECK(f.kernels() == 0);
    REQUIRE(log.messages.size() == 1);
    CHECK(log.messages[0].find("autograd::compile") != std::string::npos);
  }
  SUBCASE("random draws") {
    Generator gen(1);
    auto f = ag::compile([&](const Td& v) { return Td(v + rand<double>({3}, gen)); });
    Td a = f(x), b = f(x);
    CHECK_FALSE(same_values(a, b));
    CHECK(f.eager_reason().find("random") != std::string::npos);
  }
  SUBCASE("backward() into .grad") {
    Td w = tensor<double>({1, 1, 1});
    w.requires_grad_();
    auto f = ag::compile([&](const Td& v) {
      sum(v * w).backward();
      return Td(v * 2.0);
    });
    f(x);
    f(x);
    check_close(w.grad(), {2, 4, 6});  // accumulated twice, as eager code does
    CHECK(f.eager_reason().find(".grad") != std::string::npos);
  }
  SUBCASE("a result that requires grad keeps its graph") {
    Td w = tensor<double>({1, 2, 3});
    w.requires_grad_();
    auto f = ag::compile([&](const Td& v) { return sum(v * w); });
    Td s = f(x);
    CHECK(s.requires_grad());
    s.backward();
    check_close(w.grad(), {1, 2, 3});
    CHECK(f.eager_reason().find("requires grad") != std::string::npos);
  }
  SUBCASE("an op whose kernel compile does not capture") {
    auto f = ag::compile([](const Td& v) { return histc(Td(v * 2.0), 4, 0, 8); });
    check_close(f(x), {0, 1, 1, 1});
    check_close(f(tensor<double>({1, 1, 1})), {0, 3, 0, 0});
    CHECK(f.eager_reason().find("cannot replay") != std::string::npos);
  }
  SUBCASE("a raw write into a captured buffer is caught by the trial replay") {
    auto f = ag::compile([](const Td& v) {
      Td z = zeros<double>({3});
      z.data_ptr()[1] = 5;  // not a kernel: compile cannot see it
      return Td(z + v);
    });
    check_close(f(x), {1, 7, 3});
    check_close(f(tensor<double>({0, 0, 0})), {0, 5, 0});
    CHECK(f.eager_reason().find("did not reproduce") != std::string::npos);
  }
  SUBCASE("arguments that require grad under grad mode: the caller differentiates through") {
    auto f = ag::compile([](const Td& v) { return Td(v * v); });
    Td v = tensor<double>({1, 2, 3});
    v.requires_grad_();
    sum(f(v)).backward();
    check_close(v.grad(), {2, 4, 6});
    CHECK(f.captures() == 0);
    autograd::no_grad ng;  // without grad mode the same call is captured
    check_close(f(v), {1, 4, 9});
    CHECK(f.captures() == 1);
    CHECK(log.messages.empty());
  }
}

TEST_CASE("compile: nested compiled functions, and exceptions") {
  auto inner = ag::compile([](const Td& v) { return Td(exp(v)); });
  auto outer = ag::compile([&](const Td& v) { return Td(inner(v) * 2.0); });
  Td x = tensor<double>({0, 1});
  for (int k = 0; k < 2; ++k) check_close(outer(x), {2, 2 * std::exp(1.0)});
  CHECK(outer.replays() == 1);
  CHECK(inner.captures() == 0);  // its kernels were captured by the outer function
  int calls = 0;
  auto bad = ag::compile([&](const Td& v) {
    if (++calls == 1) raise<value_error>("first call fails");
    return Td(v + 1.0);
  });
  CHECK_THROWS_AS(bad(x), value_error);
  check_close(bad(x), {1, 2});  // captured afresh
  check_close(bad(x), {1, 2});
  CHECK(bad.replays() == 1);
}
