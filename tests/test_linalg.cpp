// Values of the linalg ops against closed forms, matrix_exp across its degree bands, and
// errors for bad input. (Derivatives: test_linalg_ad.cpp.)
#include <doctest/doctest.h>

#include <reel/linalg.hpp>
#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using C = std::complex<double>;
using Td = Tensor<double>;
using Tc = Tensor<C>;

namespace {
void check_close_c(const Tc& a, const std::vector<C>& b, double tol = 1e-12) {
  auto v = a.contiguous().to_vector();
  REQUIRE(v.size() == b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    CHECK(v[i].real() == doctest::Approx(b[i].real()).epsilon(tol).scale(1));
    CHECK(v[i].imag() == doctest::Approx(b[i].imag()).epsilon(tol).scale(1));
  }
}
double max_abs_diff(const Td& a, const Td& b) {
  auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}
}  // namespace

TEST_CASE("det: closed forms, batches, complex, singular, empty") {
  check_close(linalg::det(tensor<double>({{3.0, 1.0}, {4.0, 2.0}})), {2.0});
  Td A = tensor<double>({{2.0, -1.0, 0.5}, {1.0, 3.0, 2.0}, {0.0, 1.5, 4.0}});
  // rule of Sarrus
  double sarrus = 2 * (3 * 4 - 2 * 1.5) - (-1) * (1 * 4 - 2 * 0) + 0.5 * (1 * 1.5 - 3 * 0);
  check_close(linalg::det(A), {sarrus});
  Td B = stack({A, Td(A * 2.0), eye<double>(3), Td(A.mT().contiguous())}).reshape({2, 2, 3, 3});
  auto d = linalg::det(B);
  CHECK(d.sizes() == Shape{2, 2});
  check_close(d, {sarrus, 8 * sarrus, 1.0, sarrus});
  check_close(linalg::det(tensor<double>({{1.0, 2.0}, {2.0, 4.0}})), {0.0});
  Tc Z = tensor<C>({{C(1, 2), C(0, 1)}, {C(3, 0), C(1, -1)}});
  check_close_c(linalg::det(Z), {C(1, 2) * C(1, -1) - C(0, 1) * C(3, 0)});
  check_close(linalg::det(zeros<double>({2, 0, 0})), {1.0, 1.0});
  CHECK(linalg::det(A.to<float>()).item() == doctest::Approx(sarrus).epsilon(1e-6));
}

TEST_CASE("slogdet: sign and log|det|, negative and complex determinants, singular") {
  Td A = tensor<double>({{0.0, 2.0}, {3.0, 1.0}});  // det = -6
  auto r = linalg::slogdet(A);
  check_close(r.sign, {-1.0});
  check_close(r.logabsdet, {std::log(6.0)});
  Tc Z = tensor<C>({{C(1, 2), C(0, 1)}, {C(3, 0), C(1, -1)}});
  C dz = C(1, 2) * C(1, -1) - C(0, 1) * C(3, 0);
  auto rz = linalg::slogdet(Z);
  check_close_c(rz.sign, {dz / std::abs(dz)});
  check_close(rz.logabsdet, {std::log(std::abs(dz))});
  auto rs = linalg::slogdet(tensor<double>({{1.0, 2.0}, {2.0, 4.0}}));
  check_close(rs.sign, {0.0});
  CHECK(std::isinf(rs.logabsdet.item()));
  CHECK(rs.logabsdet.item() < 0);
  // large matrices whose det overflows keep a finite log
  Td big = Td(eye<double>(200) * 1e3);
  auto rb = linalg::slogdet(big);
  check_close(rb.logabsdet, {200 * std::log(1e3)});
  CHECK(std::isinf(linalg::det(big).item()));
}

TEST_CASE("solve and inv: closed forms, left and right, vectors, broadcasting") {
  Td A = tensor<double>({{3.0, 1.0}, {4.0, 2.0}});  // A^-1 = [[1, -0.5], [-2, 1.5]]
  check_close(linalg::inv(A), {1.0, -0.5, -2.0, 1.5});
  check_close(linalg::solve(A, tensor<double>({1.0, 2.0})), {0.0, 1.0});
  check_close(linalg::solve(A, tensor<double>({{1.0}, {2.0}})), {0.0, 1.0});
  // x A = b  =>  x = b A^-1
  check_close(linalg::solve(A, tensor<double>({1.0, 2.0}), false), {1.0 - 4.0, -0.5 + 3.0});
  check_close(linalg::solve(A, tensor<double>({{1.0, 2.0}, {0.0, 1.0}}), false), {-3.0, 2.5, -2.0, 1.5});
  // batch of A against one B, and batched vectors
  Td As = stack({A, Td(A * 2.0)});
  auto X = linalg::solve(As, tensor<double>({{1.0}, {2.0}}));
  CHECK(X.sizes() == Shape{2, 2, 1});
  check_close(X, {0.0, 1.0, 0.0, 0.5});
  auto Xv = linalg::solve(As, tensor<double>({{1.0, 2.0}, {2.0, 4.0}}));  // [2, 2]: a batch of vectors
  CHECK(Xv.sizes() == Shape{2, 2});
  check_close(Xv, {0.0, 1.0, 0.0, 1.0});
  Tc Z = tensor<C>({{C(1, 2), C(0, 1)}, {C(3, 0), C(1, -1)}});
  auto Zi = linalg::inv(Z);
  check_close_c(Tc(matmul(Z, Zi)), {1, 0, 0, 1});
  Td R = tensor<double>({{2.0, 0.0, 0.0}, {1.0, 4.0, 0.0}, {-1.0, 2.0, 5.0}});
  check_close(linalg::solve_triangular(R, tensor<double>({{2.0}, {9.0}, {14.0}}), false), {1.0, 2.0, 2.2});
  // the upper triangle is not read
  check_close(linalg::solve_triangular(Td(R + tensor<double>({{0.0, 7.0, 7.0}, {0.0, 0.0, 7.0}, {0.0, 0.0, 0.0}})),
                                       tensor<double>({{2.0}, {9.0}, {14.0}}), false),
              {1.0, 2.0, 2.2});
  CHECK(linalg::inv(A.to<float>()).to<double>().to_vector()[3] == doctest::Approx(1.5).epsilon(1e-6));
}

TEST_CASE("cholesky: closed form, upper, complex Hermitian, batches") {
  Td A = tensor<double>({{4.0, 2.0}, {2.0, 3.0}});
  check_close(linalg::cholesky(A), {2.0, 0.0, 1.0, std::sqrt(2.0)});
  check_close(linalg::cholesky(A, true), {2.0, 1.0, 0.0, std::sqrt(2.0)});
  // only the lower triangle is read
  check_close(linalg::cholesky(tensor<double>({{4.0, 99.0}, {2.0, 3.0}})), {2.0, 0.0, 1.0, std::sqrt(2.0)});
  Tc H = tensor<C>({{C(4, 0), C(1, 1)}, {C(1, -1), C(3, 0)}});
  auto L = linalg::cholesky(H);
  check_close_c(L, {2, 0, C(0.5, -0.5), std::sqrt(2.5)});
  auto B = stack({A, Td(A * 4.0)});
  check_close(linalg::cholesky(B), {2, 0, 1, std::sqrt(2.0), 4, 0, 2, 2 * std::sqrt(2.0)});
}

TEST_CASE("eigh: closed forms, ascending values, orthonormal vectors, complex") {
  auto r = linalg::eigh(tensor<double>({{2.0, 1.0}, {1.0, 2.0}}));
  check_close(r.eigenvalues, {1.0, 3.0});
  auto v = r.eigenvectors.to_vector();
  CHECK(std::abs(v[0]) == doctest::Approx(std::sqrt(0.5)));
  CHECK(v[0] * v[2] < 0);  // (1, -1) / sqrt 2 for eigenvalue 1
  Tc H = tensor<C>({{C(2, 0), C(0, 1)}, {C(0, -1), C(2, 0)}});
  auto rc = linalg::eigh(H);
  check_close(rc.eigenvalues, {1.0, 3.0});
  // A V = V diag(w) and V^H V = I for a 4x4 with known spectrum: Q diag(-1, 0.5, 2, 7) Q^T
  double c = std::cos(0.3), s = std::sin(0.3);
  Td Q = tensor<double>({{c, -s, 0, 0}, {s, c, 0, 0}, {0, 0, c, s}, {0, 0, -s, c}});
  Q = matmul(Q, tensor<double>({{1, 0, 0, 0}, {0, c, -s, 0}, {0, s, c, 0}, {0, 0, 0, 1}}));
  Td A = matmul(Td(Q * tensor<double>({-1.0, 0.5, 2.0, 7.0})), Q.mT());
  auto e = linalg::eigh(A);
  check_close(e.eigenvalues, {-1.0, 0.5, 2.0, 7.0}, 1e-12);
  CHECK(max_abs_diff(matmul(e.eigenvectors.mT(), e.eigenvectors), eye<double>(4)) < 1e-13);
  CHECK(max_abs_diff(matmul(A, e.eigenvectors), Td(e.eigenvectors * e.eigenvalues)) < 1e-13);
}

TEST_CASE("matrix_exp: the rotation generator within 3e-7 (float) and 2e-15 (double), both in the degree-8 band") {
  auto rot = [](double th) { return tensor<double>({{0.0, -th}, {th, 0.0}}); };
  {
    detail::la::Sq<float> m(2);
    m.v = {0.f, -0.5f, 0.5f, 0.f};
    CHECK(detail::la::expm_one(m).first == 8);
    auto E = linalg::matrix_exp(rot(0.5).to<float>()).to_vector();
    std::vector<double> want{std::cos(0.5), -std::sin(0.5), std::sin(0.5), std::cos(0.5)};
    for (int i = 0; i < 4; ++i) CHECK(std::abs(E[i] - want[i]) <= 3e-7);
  }
  {
    detail::la::Sq<double> m(2);
    m.v = {0, -0.04, 0.04, 0};
    CHECK(detail::la::expm_one(m).first == 8);
    auto E = linalg::matrix_exp(rot(0.04)).to_vector();
    std::vector<double> want{std::cos(0.04), -std::sin(0.04), std::sin(0.04), std::cos(0.04)};
    for (int i = 0; i < 4; ++i) CHECK(std::abs(E[i] - want[i]) <= 2e-15);
  }
}

TEST_CASE("matrix_exp: each Taylor polynomial reproduces the Taylor series of its degree") {
  // For the shift matrix N (ones above the diagonal), p(N)[0][k] is p's coefficient of x^k.
  for (int m : {1, 2, 4, 8, 12, 18}) {
    CAPTURE(m);
    int64_t n = m + 3;
    detail::la::Sq<double> N(n);
    for (int64_t i = 0; i + 1 < n; ++i) N.v[i * n + i + 1] = 1;
    auto P = detail::la::taylor_exp(N, m);
    double fact = 1;
    for (int k = 0; k < n; ++k) {
      if (k > 0) fact *= k;
      double want = k <= m ? 1 / fact : 0.0;
      CAPTURE(k);
      if (k <= m)
        CHECK(P.v[k] == doctest::Approx(want).epsilon(1e-14).scale(0));
      else
        CHECK(std::abs(P.v[k]) < 1e-15);
    }
  }
}

TEST_CASE("matrix_exp: every degree band and scaling and squaring against closed forms, batches of one and many") {
  // exp([[a, b], [0, c]]) = [[e^a, b (e^a - e^c) / (a - c)], [0, e^c]]
  auto closed = [](double a, double b, double c) {
    return std::vector<double>{std::exp(a), b * std::exp(c) * std::expm1(a - c) / (a - c), 0.0, std::exp(c)};
  };
  struct Band {
    double scale;
    int degree;
    int squarings;
  };
  // ||[[a, b], [0, c]] * s||_1 with (a, b, c) = (0.3, 0.5, -0.2): 0.7 s
  std::vector<Band> bands{{1e-16, 1, 0}, {1e-9, 2, 0}, {1e-5, 4, 0}, {0.05, 8, 0}, {0.3, 12, 0},
                          {1.4, 18, 0},  {5.0, 18, 2}, {60.0, 18, 6}};
  std::vector<Td> batch;
  std::vector<double> want;
  for (auto b : bands) {
    CAPTURE(b.scale);
    double a = 0.3 * b.scale, bb = 0.5 * b.scale, c = -0.2 * b.scale;
    detail::la::Sq<double> m(2);
    m.v = {a, bb, 0, c};
    auto used = detail::la::expm_one(m);
    CHECK(used.first == b.degree);
    CHECK(used.second == b.squarings);
    Td A = tensor<double>({{a, bb}, {0.0, c}});
    auto w = closed(a, bb, c);
    auto E = linalg::matrix_exp(A.unsqueeze(0));  // a batch of one
    CHECK(E.sizes() == Shape{1, 2, 2});
    auto e = E.to_vector();
    for (int i = 0; i < 4; ++i) CHECK(e[i] == doctest::Approx(w[i]).epsilon(1e-13).scale(1e-300));
    batch.push_back(A);
    want.insert(want.end(), w.begin(), w.end());
  }
  // all bands in one batch
  auto E = linalg::matrix_exp(stack(batch)).to_vector();
  for (size_t i = 0; i < want.size(); ++i) CHECK(E[i] == doctest::Approx(want[i]).epsilon(1e-13).scale(1e-300));
  // a diagonalizable 3x3: P D P^-1 with P unit upper triangular (P^-1 exact)
  Td P = tensor<double>({{1.0, 2.0, -1.0}, {0.0, 1.0, 3.0}, {0.0, 0.0, 1.0}});
  Td Pi = tensor<double>({{1.0, -2.0, 7.0}, {0.0, 1.0, -3.0}, {0.0, 0.0, 1.0}});
  for (double s : {0.01, 0.2, 3.0}) {
    CAPTURE(s);
    Td Dg = tensor<double>({0.5 * s, -1.0 * s, 0.25 * s});
    Td A = matmul(Td(P * Dg), Pi);
    Td want3 = matmul(Td(P * exp(Dg)), Pi);
    CHECK(max_abs_diff(linalg::matrix_exp(A), want3) < 1e-12 * (1 + std::exp(3 * s)));
  }
  // complex: exp(diag(i t, -i t)) conjugated by P
  Tc Pc = P.to<C>(), Pic = Pi.to<C>();
  Tc Dc = tensor<C>({C(0, 0.7), C(0, -0.7), C(0.1, 0.2)});
  Tc Ac = matmul(Tc(Pc * Dc), Pic);
  auto Ec = linalg::matrix_exp(Ac).to_vector();
  auto Wc = Tc(matmul(Tc(Pc * exp(Dc)), Pic)).to_vector();
  for (size_t i = 0; i < Ec.size(); ++i) CHECK(std::abs(Ec[i] - Wc[i]) < 1e-12);
}

TEST_CASE("bad input: shapes, singular matrices, non-positive-definite, NaN") {
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Td R = zeros<double>({2, 3});
  CHECK_THROWS_AS(linalg::det(R), value_error);
  CHECK(msg([&] { linalg::det(R); }).find("2 by 3") != std::string::npos);
  CHECK_THROWS_AS(linalg::inv(zeros<double>({3})), value_error);
  CHECK_THROWS_AS(linalg::slogdet(R), value_error);
  CHECK_THROWS_AS(linalg::cholesky(R), value_error);
  CHECK_THROWS_AS(linalg::eigh(R), value_error);
  CHECK_THROWS_AS(linalg::matrix_exp(R), value_error);
  Td A = eye<double>(3);
  CHECK_THROWS_AS(linalg::solve(A, zeros<double>({4, 2})), value_error);
  CHECK(msg([&] { linalg::solve(A, zeros<double>({4, 2})); }).find("[4, 2]") != std::string::npos);
  CHECK_THROWS_AS(linalg::solve(zeros<double>({2, 3, 3}), zeros<double>({4, 3, 1})), value_error);
  Td S = tensor<double>({{1.0, 2.0}, {2.0, 4.0}});
  CHECK(msg([&] { linalg::solve(S, tensor<double>({1.0, 1.0})); }).find("singular") != std::string::npos);
  CHECK(msg([&] { linalg::inv(S); }).find("singular") != std::string::npos);
  CHECK(msg([&] { linalg::inv(stack({eye<double>(2), S})); }).find("Batch element 1") != std::string::npos);
  Td notpd = tensor<double>({{1.0, 2.0}, {2.0, 1.0}});
  CHECK(msg([&] { linalg::cholesky(notpd); }).find("leading minor of order 2 is not positive-definite") !=
        std::string::npos);
  CHECK(msg([&] { linalg::cholesky(tensor<double>({{-1.0}})); }).find("order 1") != std::string::npos);
  // NaN in, NaN out; nothing throws or crashes
  double nan = std::numeric_limits<double>::quiet_NaN();
  Td N = tensor<double>({{1.0, nan}, {0.5, 2.0}});
  Td Nh = tensor<double>({{nan, 0.5}, {0.5, 2.0}});
  CHECK(std::isnan(linalg::det(N).item()));
  CHECK(std::isnan(linalg::slogdet(N).logabsdet.item()));
  CHECK(std::isnan(linalg::solve(N, tensor<double>({1.0, 1.0})).to_vector()[0]));
  CHECK(std::isnan(linalg::inv(N).to_vector()[0]));
  CHECK(std::isnan(linalg::cholesky(Nh).to_vector()[0]));
  CHECK(std::isnan(linalg::eigh(Nh).eigenvalues.to_vector()[0]));
  CHECK(std::isnan(linalg::matrix_exp(N).to_vector()[0]));
}

TEST_CASE("Meta tensors: shapes only") {
  auto A = empty<double, Meta>({4, 3, 3});
  CHECK(linalg::det(A).sizes() == Shape{4});
  CHECK(linalg::inv(A).sizes() == Shape{4, 3, 3});
  CHECK(linalg::solve(A, empty<double, Meta>({4, 3})).sizes() == Shape{4, 3});
  CHECK(linalg::eigh(A).eigenvalues.sizes() == Shape{4, 3});
  CHECK(linalg::matrix_exp(A).sizes() == Shape{4, 3, 3});
}
