// Derivatives of the linalg ops in all six modes check_ad covers with forward_second_order
// (reverse, forward, reverse-over-reverse, forward-over-reverse, forward-over-forward,
// reverse-over-forward) against central differences, real and complex; gradcheck and
// gradgradcheck; and the closed-form second derivatives.
#include <doctest/doctest.h>

#include <reel/linalg.hpp>
#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using autograd::check_ad;
using C = std::complex<double>;
using Td = Tensor<double>;
using Tc = Tensor<C>;
using V = std::vector<Td>;
using Vc = std::vector<Tc>;
namespace fad = autograd::forward_ad;

namespace {
const autograd::CheckAdOptions all{.forward_second_order = true};
const autograd::CheckAdOptions all_loose{.atol = 1e-5, .rtol = 1e-4, .forward_second_order = true};

Td well3() { return tensor<double>({{2.1, 0.4, -0.7}, {0.3, 1.6, 0.5}, {-0.2, 0.8, 2.4}}); }
Td neg3() { return tensor<double>({{0.3, 1.4, -0.7}, {1.3, 0.6, 0.5}, {-0.2, 0.8, -1.9}}); }  // det < 0
Td batch2x2() { return tensor<double>({{{1.5, 0.3}, {-0.4, 0.9}}, {{0.7, -1.2}, {0.5, 1.1}}}); }
Td rhs32() { return tensor<double>({{0.5, -1.0}, {1.5, 0.25}, {-0.75, 2.0}}); }
Tc cwell3() {
  return tensor<C>({{C(2.1, 0.3), C(0.4, -0.5), C(-0.7, 0.1)},
                    {C(0.3, 0.2), C(1.6, -0.4), C(0.5, 0.6)},
                    {C(-0.2, -0.3), C(0.8, 0.1), C(2.4, 0.5)}});
}
Tc crhs3() { return tensor<C>({{0.5, -1.0}, {1.5, 0.25}, {-0.75, 2.0}}); }
template <class T>
Tensor<T> herm(const Tensor<T>& x) {  // x x^H + I: Hermitian positive definite
  return Tensor<T>(matmul(x, detail::la::mH(x)) + eye<T>(x.size(-1)));
}
template <class T>
Tensor<T> sym(const Tensor<T>& x) {
  return Tensor<T>(x + detail::la::mH(x));
}
}  // namespace

#define AD1(EXPR, X, O) check_ad([](const V& v) -> Td { const Td& x = v[0]; return EXPR; }, V{X}, O)
#define AD2(EXPR, X, Y, O) \
  check_ad([](const V& v) -> Td { const Td& x = v[0]; const Td& y = v[1]; return EXPR; }, V{X, Y}, O)
#define ADC1(EXPR, X, O) check_ad([](const Vc& v) -> Tc { const Tc& x = v[0]; return EXPR; }, Vc{X}, O)
#define ADC2(EXPR, X, Y, O) \
  check_ad([](const Vc& v) -> Tc { const Tc& x = v[0]; const Tc& y = v[1]; return EXPR; }, Vc{X, Y}, O)

TEST_CASE("check_ad: det and slogdet, real and complex, batched, at a singular matrix") {
  AD1(linalg::det(x), well3(), all);
  AD1(linalg::det(x), neg3(), all);
  AD1(linalg::det(x), batch2x2(), all);
  AD1(linalg::det(x), tensor<double>({{1.0, 2.0}, {2.0, 4.0}}), all);  // singular: the SVD path
  AD1(linalg::det(x), tensor<double>({{1.0, 2.0, 3.0}, {2.0, 4.0, 6.0}, {1.0, 0.5, 2.0}}), all);
  AD1(linalg::slogdet(x).logabsdet, well3(), all);
  AD1(linalg::slogdet(x).logabsdet, neg3(), all);
  AD1(linalg::slogdet(x).logabsdet, batch2x2(), all);
  ADC1(linalg::det(x), cwell3(), all);
  ADC1(linalg::slogdet(x).logabsdet.to<C>(), cwell3(), all);
  ADC1(linalg::slogdet(x).sign, cwell3(), all);
}

TEST_CASE("check_ad: solve (left and right, vectors and matrices, broadcasting), solve_triangular, inv") {
  AD2(linalg::solve(x, y), well3(), rhs32(), all);
  AD2(linalg::solve(x, y), well3(), tensor<double>({0.5, -1.0, 1.5}), all);
  AD2(linalg::solve(x, y, false), well3(), Td(rhs32().mT().contiguous()), all);
  AD2(linalg::solve(x, y, false), neg3(), tensor<double>({0.5, -1.0, 1.5}), all);
  AD2(linalg::solve(x, y), batch2x2(), tensor<double>({{0.3}, {-1.1}}), all);  // B broadcast over A's batch
  AD2(linalg::solve_triangular(x, y, false), well3(), rhs32(), all);
  AD2(linalg::solve_triangular(x, y, true, false), well3(), Td(rhs32().mT().contiguous()), all);
  AD1(linalg::inv(x), well3(), all);
  AD1(linalg::inv(x), batch2x2(), all);
  ADC2(linalg::solve(x, y), cwell3(), crhs3(), all);
  ADC2(linalg::solve(x, y, false), cwell3(), Tc(crhs3().mT().contiguous()), all);
  ADC1(linalg::inv(x), cwell3(), all);
}

TEST_CASE("check_ad: cholesky and eigh (through Hermitian inputs)") {
  AD1(linalg::cholesky(herm(x)), well3(), all);
  AD1(linalg::cholesky(herm(x), true), neg3(), all);
  AD1(linalg::cholesky(herm(x)), batch2x2(), all);
  ADC1(linalg::cholesky(herm(x)), cwell3(), all);
  AD1(linalg::eigh(sym(x)).eigenvalues, well3(), all);
  AD1(linalg::eigh(sym(x)).eigenvalues, batch2x2(), all);
  // eigenvectors are defined up to sign (phase): test functions that do not see it
  AD1(square(linalg::eigh(sym(x)).eigenvectors), well3(), all);
  AD1(Td(matmul(Td(linalg::eigh(sym(x)).eigenvectors * tensor<double>({1.0, 2.0, 3.0})), linalg::eigh(sym(x)).eigenvectors.mT())),
      neg3(), all);
  ADC1(linalg::eigh(sym(x)).eigenvalues.to<C>(), cwell3(), all);
  ADC1([](const Tc& v) { return Tc(v * conj(v)); }(linalg::eigh(sym(x)).eigenvectors), cwell3(), all);
}

TEST_CASE("check_ad: matrix_exp in several degree bands and with scaling and squaring") {
  for (double s : {0.01, 0.1, 0.4, 1.5, 4.0}) {
    CAPTURE(s);
    Td a = Td(well3() * s);
    check_ad([](const V& v) -> Td { return linalg::matrix_exp(v[0]); }, V{a}, s > 1 ? all_loose : all);
  }
  AD1(linalg::matrix_exp(x), Td(batch2x2() * 0.5), all);
  ADC1(linalg::matrix_exp(x), Tc(cwell3() * 0.3), all);
}

TEST_CASE("d2/dt2 det([[t + 2, 1], [1, 2t + 3]]) = 4 by grad of grad, jvp of jvp and jvp of grad") {
  auto A = [](const Td& t) {
    return linalg::det(Td(t * tensor<double>({{1.0, 0.0}, {0.0, 2.0}}) + tensor<double>({{2.0, 1.0}, {1.0, 3.0}})));
  };
  Td t = scalar_tensor<double>(0.7).requires_grad_();
  Td d = A(t);
  check_close(d.detach(), {2 * 0.49 + 7 * 0.7 + 5});
  auto g = autograd::grad({d}, {t}, {}, {.create_graph = true})[0];
  check_close(g.detach(), {4 * 0.7 + 7});
  check_close(autograd::grad({g}, {t})[0], {4.0});
  {
    fad::dual_level l1;
    auto t1 = fad::make_dual(scalar_tensor<double>(0.7), scalar_tensor<double>(1.0));
    Td first;
    {
      fad::dual_level l2;
      first = fad::unpack_dual(A(fad::make_dual(t1, scalar_tensor<double>(1.0)))).tangent;
    }
    check_close(fad::unpack_dual(first).tangent, {4.0});
  }
  {
    fad::dual_level l;
    Td tp = scalar_tensor<double>(0.7).requires_grad_();
    Td td = fad::make_dual(tp, scalar_tensor<double>(1.0));
    auto gr = autograd::grad({A(td)}, {tp}, {}, {.create_graph = true})[0];
    check_close(fad::unpack_dual(gr).tangent, {4.0});
  }
}

TEST_CASE("the seed's example: second-order gradient of sum(solve(M M^T + I, b)^2) matches finite differences") {
  Td b = tensor<double>({1.0, -2.0, 0.5});
  auto objective = [&](const Td& M) {
    Td x = linalg::solve(Td(matmul(M, M.mT()) + eye<double>(3)), b);
    return sum(Td(x * x));
  };
  // phi(A) = sum(g(A)^2) with g the gradient of the objective
  auto phi = [&](const Td& A0) {
    Td A = A0.detach().requires_grad_();
    auto g = autograd::grad({objective(A)}, {A}, {}, {.create_graph = true})[0];
    return std::pair{sum(Td(g * g)), A};
  };
  Td A0 = tensor<double>({{0.8, -0.3, 0.5}, {0.1, 1.2, -0.4}, {0.6, 0.2, 0.9}});
  auto [s, A] = phi(A0);
  s.backward();
  auto an = A.grad().to_vector();
  const double h = 1e-6;
  for (int64_t k = 0; k < 9; ++k) {
    Td p = A0.clone(), m = A0.clone();
    p.reshape({-1}).mutable_data_ptr()[k] += h;
    m.reshape({-1}).mutable_data_ptr()[k] -= h;
    double num = (phi(p).first.item() - phi(m).first.item()) / (2 * h);
    CHECK(an[k] == doctest::Approx(num).epsilon(1e-6).scale(1));
  }
}

TEST_CASE("det's gradient at a singular matrix is the cofactor matrix") {
  Td A = tensor<double>({{1.0, 2.0}, {2.0, 4.0}}).requires_grad_();
  linalg::det(A).backward();
  check_close(A.grad(), {4, -2, -2, 1});
  // rank 1 (every cofactor zero) and rank 2 of 3 (cofactors from the 2x2 minors)
  Td R1 = tensor<double>({{1.0, 2.0, 3.0}, {2.0, 4.0, 6.0}, {-1.0, -2.0, -3.0}}).requires_grad_();
  linalg::det(R1).backward();
  check_close(R1.grad(), std::vector<double>(9, 0.0), 1e-12);
  auto m = std::vector<double>{1, 2, 3, 2, 4, 6, 1, 0.5, 2};
  Td R2 = from_vector<double>(m, {3, 3}).requires_grad_();
  linalg::det(R2).backward();
  auto a = [&](int i, int j) { return m[i * 3 + j]; };
  std::vector<double> cof(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      int r0 = (i + 1) % 3, r1 = (i + 2) % 3, c0 = (j + 1) % 3, c1 = (j + 2) % 3;
      cof[i * 3 + j] = a(r0, c0) * a(r1, c1) - a(r0, c1) * a(r1, c0);  // cyclic minors carry the sign
    }
  check_close(R2.grad(), cof, 1e-10);
  // a third derivative there is refused, not silently wrong
  Td S = tensor<double>({{1.0, 2.0}, {2.0, 4.0}}).requires_grad_();
  auto g = autograd::grad({linalg::det(S)}, {S}, {}, {.create_graph = true})[0];
  auto h = autograd::grad({sum(Td(g * g))}, {S}, {}, {.create_graph = true})[0];
  CHECK_THROWS_AS(autograd::grad({sum(h)}, {S}), not_implemented_error);
}

TEST_CASE("gradcheck and gradgradcheck for every op, real and complex, on random well-conditioned inputs") {
  Generator gen(7);
  auto Ar = Td(randn<double>({2, 3, 3}, gen) + eye<double>(3) * 3.0);
  auto Br = randn<double>({2, 3, 2}, gen);
  auto Ac = Tc(randn<C>({2, 3, 3}, gen) + eye<C>(3) * 3.0);
  auto Bc = randn<C>({2, 3, 2}, gen);
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  // {op, uses B}
  std::vector<std::pair<std::function<Td(const V&)>, bool>> real_ops{
      {[](const V& v) { return linalg::det(v[0]); }, false},
      {[](const V& v) { return linalg::slogdet(v[0]).logabsdet; }, false},
      {[](const V& v) { return linalg::solve(v[0], v[1]); }, true},
      {[](const V& v) { return linalg::solve(v[0], v[1].mT(), false); }, true},
      {[](const V& v) { return linalg::inv(v[0]); }, false},
      {[](const V& v) { return linalg::cholesky(herm(v[0])); }, false},
      {[](const V& v) { return linalg::eigh(sym(v[0])).eigenvalues; }, false},
      {[](const V& v) { return square(linalg::eigh(sym(v[0])).eigenvectors); }, false},
      {[](const V& v) { return linalg::matrix_exp(Td(v[0] * 0.3)); }, false}};
  for (size_t i = 0; i < real_ops.size(); ++i) {
    CAPTURE(i);
    V in = real_ops[i].second ? V{Ar, Br} : V{Ar};
    CHECK(gradcheck(real_ops[i].first, in));
    CHECK(gradgradcheck(real_ops[i].first, in));
  }
  std::vector<std::pair<std::function<Tc(const Vc&)>, bool>> complex_ops{
      {[](const Vc& v) { return linalg::det(v[0]); }, false},
      {[](const Vc& v) { return linalg::slogdet(v[0]).sign; }, false},
      {[](const Vc& v) { return linalg::slogdet(v[0]).logabsdet.to<C>(); }, false},
      {[](const Vc& v) { return linalg::solve(v[0], v[1]); }, true},
      {[](const Vc& v) { return linalg::inv(v[0]); }, false},
      {[](const Vc& v) { return linalg::cholesky(herm(v[0])); }, false},
      {[](const Vc& v) { return linalg::eigh(sym(v[0])).eigenvalues.to<C>(); }, false},
      {[](const Vc& v) { auto e = linalg::eigh(sym(v[0])).eigenvectors; return Tc(e * conj(e)); }, false},
      {[](const Vc& v) { return linalg::matrix_exp(Tc(v[0] * 0.3)); }, false}};
  for (size_t i = 0; i < complex_ops.size(); ++i) {
    CAPTURE(i);
    Vc in = complex_ops[i].second ? Vc{Ac, Bc} : Vc{Ac};
    CHECK(gradcheck(complex_ops[i].first, in));
    CHECK(gradgradcheck(complex_ops[i].first, in));
  }
}

// Bundled with other suites (tests/CMakeLists.txt): the macros end with the file.
#undef AD1
#undef AD2
#undef ADC1
#undef ADC2
