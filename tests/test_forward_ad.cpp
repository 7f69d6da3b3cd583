// Forward mode (dual levels, nesting, forward-over-reverse) and the functional API
// (torch.autograd.functional semantics), checked against closed forms; gradcheck and
// gradgradcheck accept correct derivatives and reject wrong ones.
#include <doctest/doctest.h>

#include <cmath>

#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;
using V = std::vector<Td>;
namespace fad = autograd::forward_ad;
namespace F = autograd::functional;

TEST_CASE("make_dual / unpack_dual carry a tangent through ops") {
  fad::dual_level level;
  auto x = fad::make_dual(tensor<double>({0.5, 1.0}), tensor<double>({1.0, 2.0}));
  Td y = sin(x) * 3.0;
  auto [p, t] = fad::unpack_dual(y);
  check_close(p, {3 * std::sin(0.5), 3 * std::sin(1.0)});
  check_close(t, {3 * std::cos(0.5), 6 * std::cos(1.0)});
  auto plain = fad::unpack_dual(tensor<double>({1.0}));
  CHECK_FALSE(plain.tangent.defined());
  // through views, reductions and matmul
  Td s = sum(matmul(x.unsqueeze(0), x.unsqueeze(1)));  // x . x
  check_close(fad::unpack_dual(s).tangent, {2 * (0.5 * 1 + 1.0 * 2)});
}

TEST_CASE("nested levels keep perturbations apart: d/dx [x * d/dy (x + y)] = 1") {
  fad::dual_level outer;
  auto x = fad::make_dual(tensor<double>({1.0}), tensor<double>({1.0}));
  Td inner_derivative;
  {
    fad::dual_level inner;
    auto y = fad::make_dual(tensor<double>({1.0}), tensor<double>({1.0}));
    inner_derivative = fad::unpack_dual(Td(x + y)).tangent;
  }
  check_close(fad::unpack_dual(Td(x * inner_derivative)).tangent, {1.0});
}

TEST_CASE("jvp of jvp gives the second derivative; tangents vanish after their level") {
  Td t2;
  {
    fad::dual_level l1;
    auto x1 = fad::make_dual(tensor<double>({0.7}), tensor<double>({1.0}));
    fad::dual_level l2;
    auto x = fad::make_dual(x1, tensor<double>({1.0}));
    Td y = exp(x) * x;  // y'' = e^x (x + 2)
    auto d1 = fad::unpack_dual(y).tangent;  // at level 2: e^x (x + 1), itself dual at level 1
    (void)l2;
    t2 = d1;
  }
  {
    // recompute with explicit level objects to read the level-1 tangent of the level-2 tangent
    fad::dual_level l1;
    auto x1 = fad::make_dual(tensor<double>({0.7}), tensor<double>({1.0}));
    Td d1;
    {
      fad::dual_level l2;
      auto x = fad::make_dual(x1, tensor<double>({1.0}));
      d1 = fad::unpack_dual(Td(exp(x) * x)).tangent;
    }
    check_close(d1, {std::exp(0.7) * 1.7});
    check_close(fad::unpack_dual(d1).tangent, {std::exp(0.7) * 2.7});
  }
  CHECK_THROWS_AS(fad::make_dual(tensor<double>({1.0}), tensor<double>({1.0})), error);  // no level
}

TEST_CASE("forward over reverse: jvp of grad is a Hessian-vector product") {
  auto w = tensor<double>({1.0, 2.0, -0.5});
  auto v = tensor<double>({1.0, 0.5, 2.0});
  fad::dual_level level;
  Td p = w.clone();
  p.requires_grad_();
  auto x = fad::make_dual(p, v);
  Td f = sum(Td(x * x * x)) + sum(Td(sin(x)));
  auto g = autograd::grad({f}, {x}, {}, {.create_graph = true})[0];
  auto hv = fad::unpack_dual(g).tangent;  // (6 x - sin x) v
  std::vector<double> expect;
  for (int i = 0; i < 3; ++i) {
    double wi = w.to_vector()[i], vi = v.to_vector()[i];
    expect.push_back((6 * wi - std::sin(wi)) * vi);
  }
  check_close(hv, expect);
}

TEST_CASE("functional vjp, jvp, jacobian, hessian, hvp") {
  auto f = [](const V& x) -> Td { return Td(sin(x[0]) * x[1]); };
  auto a = tensor<double>({0.3, 1.2}), b = tensor<double>({2.0, -1.0});
  auto [out, vj] = F::vjp(f, V{a, b}, tensor<double>({1.0, 10.0}));
  check_close(out, {std::sin(0.3) * 2, -std::sin(1.2)});
  check_close(vj[0], {std::cos(0.3) * 2, 10 * std::cos(1.2) * -1});
  check_close(vj[1], {std::sin(0.3), 10 * std::sin(1.2)});
  CHECK_FALSE(vj[0].requires_grad());
  CHECK_THROWS_AS(F::vjp(f, V{a, b}), value_error);  // non-scalar output needs v

  auto [o2, jv] = F::jvp(f, V{a, b}, V{tensor<double>({1.0, 0.0}), tensor<double>({0.0, 1.0})});
  check_close(jv, {std::cos(0.3) * 2, std::sin(1.2)});

  for (auto strategy : {F::JacobianStrategy::ReverseMode, F::JacobianStrategy::ForwardMode}) {
    auto J = F::jacobian(f, V{a, b}, false, false, strategy);
    CHECK(J[0].sizes() == Shape{2, 2});
    check_close(J[0], {std::cos(0.3) * 2, 0, 0, -std::cos(1.2)});
    check_close(J[1], {std::sin(0.3), 0, 0, std::sin(1.2)});
  }
  // a single-tensor function; independent inputs give zeros unless strict
  auto g = [](const Td& x) -> Td { return Td(x * x).sum(); };
  auto H = F::hessian(g, tensor<double>({1.0, 2.0, 3.0}));
  check_close(H, {2, 0, 0, 0, 2, 0, 0, 0, 2});
  auto [o3, hv] = F::hvp(g, V{tensor<double>({1.0, 2.0})}, V{tensor<double>({3.0, 4.0})});
  check_close(hv[0], {6, 8});
  auto indep = [](const V& x) -> Td { return Td(x[0] * 2.0).sum(); };
  auto r = F::vjp(indep, V{a, b});
  check_close(r.grads[1], {0, 0});
  CHECK_THROWS_WITH_AS(F::vjp(indep, V{a, b}, {}, false, true), doctest::Contains("independent of input 1"), error);
  // create_graph keeps the result differentiable
  Td aa = a.clone();
  aa.requires_grad_();
  auto rg = F::vjp([](const Td& x) -> Td { return Td(x * x * x).sum(); }, V{aa}, {}, true);
  CHECK(rg.grads[0].requires_grad());
  check_close(autograd::grad({rg.grads[0].sum()}, {aa})[0], {6 * 0.3, 6 * 1.2});
}

TEST_CASE("gradcheck and gradgradcheck accept right derivatives and reject wrong ones") {
  auto a = tensor<double>({{0.3, -0.7}, {1.1, 0.4}});
  auto f = [](const V& x) -> Td { return Td(tanh(matmul(x[0], x[0].t())) * x[0]); };
  CHECK(autograd::gradcheck(f, V{a}));
  CHECK(autograd::gradgradcheck(f, V{a}));
  auto wrong = [](const V& x) -> Td {
    Td y = x[0] * x[0];
    if (y.requires_grad()) y.register_hook([](const Td& g) { return Td(g * 2.0); });
    return y;
  };
  CHECK_FALSE(autograd::gradcheck(wrong, V{a}, {.raise_exception = false}));
  CHECK_THROWS_WITH_AS(autograd::gradcheck(wrong, V{a}), doctest::Contains("Jacobian mismatch"), error);
  using C = std::complex<double>;
  auto z = tensor<C>({C(0.3, 0.2), C(-0.5, 1.0)});
  auto fc = [](const std::vector<Tensor<C>>& x) -> Tensor<C> { return Tensor<C>(exp(x[0]) * conj(x[0])); };
  CHECK(autograd::gradcheck(fc, std::vector<Tensor<C>>{z}));
  CHECK(autograd::gradgradcheck(fc, std::vector<Tensor<C>>{z}));
  // a complex gradient off by a complex factor, and (below) a right gradient whose own
  // derivative with respect to the output gradient is lost
  auto fc_wrong = [](const std::vector<Tensor<C>>& x) -> Tensor<C> {
    Tensor<C> y = exp(x[0]) * conj(x[0]);
    if (y.requires_grad()) y.register_hook([](const Tensor<C>& g) { return Tensor<C>(g * C(1, 0.01)); });
    return y;
  };
  CHECK_FALSE(autograd::gradcheck(fc_wrong, std::vector<Tensor<C>>{z}, {.raise_exception = false}));
  auto cut = [](const V& x) -> Td {
    Td y = x[0] * x[0];
    if (y.requires_grad()) y.register_hook([](const Td& g) { return g.detach(); });
    return y;
  };
  CHECK(autograd::gradcheck(cut, V{a}));
  CHECK_FALSE(autograd::gradgradcheck(cut, V{a}, {.raise_exception = false}));
}

// ------------------------------------------------------------------ vector mode
// f(x, y) = sum(x^3 * y) + sum(sin(x)) * y[0], x and y of 3 elements: closed forms below.
static Td cubic(const V& v) {
  const Td& x = v[0];
  const Td& y = v[1];
  return Td(sum(Td(x * x * x * y)) + sum(Td(sin(x))) * y.select(0, 0));
}

TEST_CASE("vector mode: k directions in one pass, through views, sums and matmul") {
  auto x = tensor<double>({0.3, -1.2, 2.0}), y = tensor<double>({1.5, 0.5, -0.7});
  // directions: the identity on x (3), then two on y
  Td tx = zeros<double>({5, 3}), ty = zeros<double>({5, 3});
  for (int i = 0; i < 3; ++i) tx.mutable_data_ptr()[i * 3 + i] = 1;
  ty.mutable_data_ptr()[3 * 3 + 0] = 1;
  ty.mutable_data_ptr()[4 * 3 + 2] = 2;
  auto [out, t] = F::jvp(cubic, V{x, y}, V{tx, ty});
  CHECK(t.sizes() == Shape{5});
  auto xv = x.to_vector(), yv = y.to_vector();
  double sinsum = std::sin(xv[0]) + std::sin(xv[1]) + std::sin(xv[2]);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) want.push_back(3 * xv[i] * xv[i] * yv[i] + std::cos(xv[i]) * yv[0]);
  want.push_back(xv[0] * xv[0] * xv[0] + sinsum);  // d/dy0
  want.push_back(2 * xv[2] * xv[2] * xv[2]);         // 2 d/dy2
  check_close(t, want);
  // a sum of a 0-d tensor sums nothing in any direction
  auto [o0, t0] = F::jvp([](const V& v) { return Td(sum(sum(v[0])) * 2.0); }, V{x}, V{tx});
  check_close(t0, {2, 2, 2, 0, 0});

  // every view kind, sums over dims, and an op with a one-direction rule (matmul)
  auto g = [](const Td& a) {
    Td m = a.reshape({2, 3});
    Td v = m.t().select(1, 1).unsqueeze(0).expand({4, 3});  // [4, 3]: row 1 of m, four times
    Td s = sum(Td(v * v), Shape{0});                           // [3]
    Td w = m.slice(1, 0, 3, 2).permute({1, 0});                // [2, 2]
    return Td(matmul(w, w).reshape({-1}).sum() + sum(Td(s * m.select(0, 0))));
  };
  Generator gen(3);
  Td a = randn<double>({6}, gen);
  Td dirs = randn<double>({4, 6}, gen);
  auto [o2, tb] = F::jvp([&](const V& v) { return g(v[0]); }, V{a}, V{dirs});
  for (int64_t k = 0; k < 4; ++k) {  // each direction alone (checked against differences by check_ad)
    auto [o3, t1] = F::jvp([&](const V& v) { return g(v[0]); }, V{a}, V{dirs.select(0, k).contiguous()});
    CHECK(tb[k].item() == doctest::Approx(t1.item()).epsilon(1e-13));
    double h = 1e-6;  // and against central differences
    double fd = (g(Td(a + h * dirs.select(0, k))).item() - g(Td(a - h * dirs.select(0, k))).item()) / (2 * h);
    CHECK(tb[k].item() == doctest::Approx(fd).epsilon(1e-7));
  }
  // shapes are checked
  fad::dual_level level(3);
  CHECK(level.batch() == 3);
  CHECK_THROWS_AS(fad::make_dual(x, zeros<double>({3})), value_error);
  CHECK_THROWS_AS(fad::make_dual(x, zeros<double>({2, 3})), value_error);
  CHECK(fad::make_dual(x, zeros<double>({3, 3})).sizes() == Shape{3});
}

TEST_CASE("jacfwd, jacrev and hessian (forward over reverse, all directions in one pass) in closed form") {
  auto x = tensor<double>({0.3, -1.2, 2.0}), y = tensor<double>({1.5, 0.5, -0.7});
  auto xv = x.to_vector(), yv = y.to_vector();
  // Jacobian of x -> x^2 * y[0] + exp(x): diagonal
  auto f = [](const V& v) { return Td(v[0] * v[0] * v[1].select(0, 0) + exp(v[0])); };
  for (auto J : {F::jacfwd(f, V{x, y}), F::jacrev(f, V{x, y}), F::jacfwd(f, V{x, y}, 1), F::jacfwd(f, V{x, y}, 2)}) {
    REQUIRE(J.size() == 2);
    CHECK(J[0].sizes() == Shape{3, 3});
    CHECK(J[1].sizes() == Shape{3, 3});
    std::vector<double> j0(9, 0.0), j1(9, 0.0);
    for (int i = 0; i < 3; ++i) {
      j0[i * 3 + i] = 2 * xv[i] * yv[0] + std::exp(xv[i]);
      j1[i * 3 + 0] = xv[i] * xv[i];
    }
    check_close(J[0], j0);
    check_close(J[1], j1);
  }
  // Hessian blocks of cubic: d2/dx2 = diag(6 x y - sin(x) y0), d2/dxdy = diag(3x^2) + e_0 cos(x)^T
  for (int64_t chunk : {0, 1, 4, 100}) {
    auto H = F::hessian(cubic, V{x, y}, false, false, chunk);
    REQUIRE(H.size() == 2);
    std::vector<double> hxx(9, 0.0), hxy(9, 0.0), hyx(9, 0.0), hyy(9, 0.0);
    for (int i = 0; i < 3; ++i) {
      hxx[i * 3 + i] = 6 * xv[i] * yv[i] - std::sin(xv[i]) * yv[0];
      hxy[i * 3 + i] += 3 * xv[i] * xv[i];
      hxy[i * 3 + 0] += std::cos(xv[i]);
      hyx[i * 3 + i] += 3 * xv[i] * xv[i];
      hyx[0 * 3 + i] += std::cos(xv[i]);
    }
    INFO("chunk ", chunk);
    check_close(H[0][0], hxx);
    check_close(H[0][1], hxy);
    check_close(H[1][0], hyx);
    check_close(H[1][1], hyy);
    CHECK(H[0][1].sizes() == Shape{3, 3});
  }
  // a matrix input: H of sum(X^4) / 12 over a [2, 2] X is diag(X^2), shaped [2, 2, 2, 2]
  auto X = tensor<double>({{1.0, -2.0}, {0.5, 3.0}});
  Td HX = F::hessian([](const Td& m) { return Td(sum(Td(m * m * m * m)) / 12.0); }, X);
  CHECK(HX.sizes() == Shape{2, 2, 2, 2});
  check_close(HX.reshape({4, 4}), {1, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0.25, 0, 0, 0, 0, 9});
  // create_graph: the Hessian is differentiable again (third derivative of sum(x^4)/12 is 2x)
  Td xg = x.detach();
  xg.requires_grad_();
  Td Hg = F::hessian([](const Td& v) { return Td(sum(Td(v * v * v * v)) / 12.0); }, xg, true);
  auto d3 = autograd::grad({Td(Hg.select(0, 1).select(0, 1))}, {xg})[0];
  check_close(d3, {0, 2 * xv[1], 0});
  // hvp: batched or not, against H v
  auto [o, hv] = F::hvp(cubic, V{x, y}, V{tensor<double>({1.0, 0.0, 0.0}), tensor<double>({0.0, 0.0, 1.0})});
  std::vector<double> hvx = {6 * xv[0] * yv[0] - std::sin(xv[0]) * yv[0], 0, 3 * xv[2] * xv[2]};
  std::vector<double> hvy = {3 * xv[0] * xv[0] + std::cos(xv[0]), 0, 0};
  check_close(hv[0], hvx);
  check_close(hv[1], hvy);
  check_close(o, {cubic(V{x, y}).item()});
  Td vx = stack({tensor<double>({1.0, 0.0, 0.0}), tensor<double>({0.0, 0.0, 0.0})}, 0);
  Td vy = stack({tensor<double>({0.0, 0.0, 1.0}), tensor<double>({0.0, 0.0, 0.0})}, 0);
  auto [ob, hvb] = F::hvp(cubic, V{x, y}, V{vx, vy});
  CHECK(hvb[0].sizes() == Shape{2, 3});
  check_close(hvb[0].select(0, 0), hvx);
  check_close(hvb[1].select(0, 0), hvy);
  check_close(hvb[0].select(0, 1), {0, 0, 0});
  CHECK_THROWS_AS(F::hessian([](const Td& v) { return Td(v * v); }, x), value_error);  // not a scalar
}

TEST_CASE("piecewise-constant ops: zero tangents, as PyTorch's (floor, sign, round)") {
  fad::dual_level level;
  auto x = fad::make_dual(tensor<double>({1.5, -0.5}), tensor<double>({1.0, 2.0}));
  for (const Tensor<double>& y : {Tensor<double>(floor(x)), Tensor<double>(sign(x)), Tensor<double>(round(x) * 3)}) {
    auto [p, t] = fad::unpack_dual(y);
    REQUIRE(t.defined());
    CHECK(t.to_vector() == std::vector<double>{0, 0});
  }
  auto [p, t] = fad::unpack_dual(Tensor<double>(floor(x) + x));
  CHECK(t.to_vector() == std::vector<double>{1, 2});
}
