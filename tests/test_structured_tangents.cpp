// Structured tangents (graph.hpp: StructTangent): functional::hessian of one input runs every
// direction in one pass whose tangents keep the identity seed's pattern. Each case is checked
// against the dense vector-mode pass (explicit chunk sizes never use structure), and the
// Lennard-Jones Hessian against its closed form.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;
namespace F = reel::autograd::functional;

namespace {
// One function type for every case: hessian and jacfwd are instantiated once (compile time).
using Fn = std::function<Td(const Td&)>;
// The structured pass (automatic chunks) against dense passes of 1, 5 and all directions.
void check_hessian(const Fn& f, const Td& x, double tol = 1e-12) {
  Td h = F::hessian(f, x);
  for (int64_t chunk : {int64_t(1), int64_t(5), x.numel()}) {
    INFO("chunk ", chunk);
    check_near(h, F::hessian(f, x, false, false, chunk), tol);
  }
}

// E = sum over pairs of 4 (r^-12 - r^-6), as in examples/lj_model.hpp
Td lj_energy(const Td& P) {
  const int64_t n = P.size(0);
  Td d = P.unsqueeze(1) - P.unsqueeze(0);
  Td eye_n = eye<double>(n);
  Td r2 = sum(d * d, Shape{2}) + eye_n;
  Td inv6 = pow(r2, -3.0);
  return 2.0 * sum((inv6 * inv6 - inv6) * (1.0 - eye_n));
}
// Its Hessian in closed form: with phi(s) = 4 (s^-6 - s^-3) of s = |x_i - x_j|^2, each pair
// adds B = 2 phi'(s) I + 4 phi''(s) d d^T to the blocks (i, i) and (j, j) and -B to (i, j), (j, i).
std::vector<double> lj_hessian(const std::vector<double>& x, int n) {
  std::vector<double> H(9 * n * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      double d[3], s = 0;
      for (int k = 0; k < 3; ++k) {
        d[k] = x[3 * i + k] - x[3 * j + k];
        s += d[k] * d[k];
      }
      const double p1 = 4 * (-6 * std::pow(s, -7) + 3 * std::pow(s, -4));
      const double p2 = 4 * (42 * std::pow(s, -8) - 12 * std::pow(s, -5));
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          const double B = (a == b ? 2 * p1 : 0) + 4 * p2 * d[a] * d[b];
          H[(3 * i + a) * 3 * n + 3 * i + b] += B;
          H[(3 * i + a) * 3 * n + 3 * j + b] -= B;
        }
    }
  return H;
}
}  // namespace

TEST_CASE("structured hessian: Lennard-Jones cluster against the closed form") {
  Generator gen(7);
  std::vector<double> p;
  for (int i = 0; i < 8; ++i)
    for (int c : {i % 2, (i / 2) % 2, i / 4}) p.push_back(1.1 * c);
  Td P = from_vector<double>(p, {8, 3}) + 0.2 * (rand<double>({8, 3}, gen) - 0.5);
  Td H = F::hessian(Fn(lj_energy), P);
  CHECK(H.sizes() == Shape{8, 3, 8, 3});
  Td want = from_vector<double>(lj_hessian(P.to_vector(), 8), {8, 3, 8, 3});
  check_near(H, want, 1e-11);
  check_hessian(Fn(lj_energy), P);
  // compiled: the structured pass captured and replayed
  auto hc = autograd::compile([](const Td& x) { return F::hessian(Fn(lj_energy), x); });
  check_near(hc(P), want, 1e-11);
  Td P2 = P + 0.01;
  check_near(hc(P2), from_vector<double>(lj_hessian(P2.to_vector(), 8), {8, 3, 8, 3}), 1e-11);
}

TEST_CASE("structured hessian through views, sums, means and broadcasts") {
  Generator gen(11);
  Td X = randn<double>({4, 3}, gen);
  // permute (t), mean with keepdim over an aligned dim, a broadcast product
  check_hessian([](const Td& x) { return Td(sum(exp(mean(x, Shape{0}, true)) * x) + sum(x.t() * x.t() * x.t())); }, X);
  // sums over several dims, aligned and not, with and without keepdim
  Td Y = randn<double>({2, 3, 2}, gen);
  check_hessian([](const Td& y) {
    Td a = sum(y, Shape{0, 2}, true);
    Td b = sum(y, Shape{1});
    return Td(sum(a * a * a * y) + sum(b.unsqueeze(1) * y * y) + sum(y.unsqueeze(0) * y.unsqueeze(1)));
  }, Y);
  // expand, and a size-1 dim
  Td Z = randn<double>({1, 5}, gen);
  Td M = randn<double>({4, 5}, gen);
  check_hessian([&](const Td& z) {
    Td e = z.expand({4, 5}) * M;
    return Td(sum(e * e * z) + sum(exp(z * z.t())));
  }, Z);
  // maximum selects one operand's tangent
  Td S = randn<double>({3, 3}, gen);
  check_hessian([](const Td& s) { return Td(sum(maximum(s, s.t()) * s * s)); }, S);
  // coordinates picked by select: a component a picked dim equals becomes free
  Td C = randn<double>({5, 3}, gen);
  check_hessian([](const Td& c) {
    Td z = c.select(1, 2), x = c.select(-1, 0);
    return Td(sum(sin(z) * x * x) + sum(exp(c.select(0, 1)) * c.select(0, 3)) + sum(c * c * c));
  }, C);
  // a 0-d input
  check_hessian([](const Td& v) { return Td(v * v * v * v + sin(v)); }, scalar_tensor<double>(0.7));
  // a 1-d input summed in full
  check_hessian([](const Td& v) { return Td(pow(sum(v * v), 2.0) + sum(tanh(v))); }, randn<double>({5}, gen));
}

TEST_CASE("structured hessian: ops without structure make the tangent dense") {
  Generator gen(13);
  Td X = randn<double>({3, 4}, gen), W = randn<double>({4, 2}, gen), c = randn<double>({12}, gen);
  check_hessian([&](const Td& x) { return Td(sum(tanh(matmul(x, W)))); }, X);     // matmul
  check_hessian([&](const Td& x) { return Td(pow(sum(x.reshape({-1}) * c), 2.0) + sum(x * x * x)); }, X);  // merged dims
  check_hessian([](const Td& x) { return Td(sum(x.select(0, 0) * x.select(0, 1) * x.narrow(0, 1, 1))); }, X);
  // more patterns than a structured tangent keeps: the terms are made dense
  Td Q = randn<double>({3, 3}, gen), w = randn<double>({3, 3, 3, 3}, gen);
  check_hessian([&](const Td& q) {
    Td qt = q.t();
    Td y = q.view({3, 3, 1, 1}) + q.view({3, 1, 3, 1}) + q.view({3, 1, 1, 3}) + q.view({1, 3, 3, 1}) +
           q.view({1, 3, 1, 3}) + q.view({1, 1, 3, 3}) + qt.view({3, 3, 1, 1}) + qt.view({1, 1, 3, 3});
    return Td(sum(y * y * w));
  }, Q);
}

TEST_CASE("structured hessian: past its budget it starts over in chunks, also when compiled") {
  Generator gen(17);
  Td X = randn<double>({3, 4}, gen), W = randn<double>({4, 5}, gen);
  Fn f = [&](const Td& x) { return Td(sum(tanh(matmul(x, W)) * sum(x))); };
  Td want = F::hessian(f, X, false, false, 1);
  int64_t& budget = reel::detail::struct_budget();
  budget = 50;  // the dense tangent of the matmul's output has 12 * 15 elements
  Td h = F::hessian(f, X);
  auto hc = autograd::compile([&](const Td& x) { return F::hessian(f, x); });
  Td h1 = hc(X), h2 = hc(X * 2.0);
  budget = 0;
  check_near(h, want);
  check_near(h1, want);
  check_near(h2, F::hessian(f, Td(X * 2.0), false, false, 1));
}

TEST_CASE("structured jacfwd: every direction in one pass, against dense passes and jacrev") {
  Generator gen(19);
  Td P = randn<double>({5, 3}, gen), W = randn<double>({3, 4}, gen);
  auto check = [](const Fn& f, const Td& x) {
    Td j = F::jacfwd(f, x);
    for (int64_t chunk : {int64_t(1), int64_t(4), x.numel()}) {
      INFO("chunk ", chunk);
      check_near(j, F::jacfwd(f, x, chunk));
    }
    check_near(j, F::jacrev(f, x));
  };
  check([](const Td& p) { return Td(sum(pow(p.unsqueeze(1) - p.unsqueeze(0), 2.0), Shape{2})); }, P);  // [5, 5]
  check([](const Td& p) { return Td(exp(p) * sum(p, Shape{1}, true)); }, P);
  check([&](const Td& p) { return Td(tanh(matmul(p, W))).t(); }, P);
  check([](const Td& p) { return Td(sum(p * p)); }, P);
  check([](const Td& p) { return Td(p.select(1, 2) * 2.0); }, P);
  // an output that does not depend on the input: zeros
  Td j = F::jacfwd(Fn([](const Td& p) { return Td(zeros<double>({2}) + 0.0 * sum(p).detach()); }), P);
  check_near(j, zeros<double>({2, 5, 3}));
}
