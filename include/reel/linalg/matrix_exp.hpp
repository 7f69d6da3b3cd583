#pragma once
// matrix_exp: scaling and squaring with the Taylor degrees of Bader, Blanes and Casas, and
// its Frechet derivative for the rules.
#include "../core/config.hpp"
#include "eigh.hpp"

namespace reel::inline REEL_ABI::detail::la {

// ------------------------------------------------------------------ matrix_exp
// Taylor polynomials of degree 1, 2, 4, 8, 12, 18 evaluated with 0, 1, 2, 3, 4, 5 products
// (Bader, Blanes, Casas: "Computing the matrix exponential with an optimized Taylor
// polynomial approximation", Mathematics 7 (2019) 1174), the degree chosen by the 1-norm,
// scaling and squaring above the degree-18 threshold. Coefficients: the paper's; the test
// suite checks that each polynomial reproduces the Taylor series of its degree.
template <class R>
struct ExpThetas;
template <>
struct ExpThetas<float> {
  static constexpr double v[6] = {1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                                  5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00};
};
template <>
struct ExpThetas<double> {
  static constexpr double v[6] = {2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                                  4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00};
};
inline constexpr int kExpDegrees[6] = {1, 2, 4, 8, 12, 18};

// Dense n x n row-major matrices for the polynomial evaluation.
template <class T>
struct Sq {
  int64_t n;
  std::vector<T> v;
  explicit Sq(int64_t n_, T diag = T(0)) : n(n_), v(n_ * n_, T(0)) {
    for (int64_t i = 0; i < n; ++i) v[i * n + i] = diag;
  }
  friend Sq operator*(const Sq& a, const Sq& b) {
    Sq c(a.n);
    gemm<T>(a.n, a.n, a.n, a.v.data(), a.n, b.v.data(), a.n, c.v.data(), a.n);
    return c;
  }
};
// c0 I + sum_k c_k M_k
template <class T>
Sq<T> lin(int64_t n, double c0, std::initializer_list<std::pair<double, const Sq<T>*>> terms) {
  Sq<T> r(n, T(c0));
  for (auto& [c, m] : terms)
    if (c != 0)
      for (size_t i = 0; i < r.v.size(); ++i) r.v[i] += T(c) * m->v[i];
  return r;
}

// The degree-m Taylor polynomial of exp at A (m one of kExpDegrees).
template <class T>
Sq<T> taylor_exp(const Sq<T>& A, int m) {
  int64_t n = A.n;
  if (m == 1) return lin<T>(n, 1, {{1, &A}});
  Sq<T> A2 = A * A;
  if (m == 2) return lin<T>(n, 1, {{1, &A}, {0.5, &A2}});
  if (m == 4) {
    Sq<T> t = lin<T>(n, 1, {{1.0 / 3, &A}, {1.0 / 12, &A2}});
    Sq<T> u = A2 * t;
    return lin<T>(n, 1, {{1, &A}, {0.5, &u}});
  }
  if (m == 8) {
    const double s = std::sqrt(177.0), x3 = 2.0 / 3;
    const double x1 = x3 * (1 + s) / 88, x2 = x3 * (1 + s) / 352;
    const double x4 = (-271 + 29 * s) / (315 * x3), x5 = 11 * (-1 + s) / (1260 * x3), x6 = 11 * (-9 + s) / (5040 * x3),
                 x7 = (89 - s) / (5040 * x3 * x3);
    const double y2 = (857 - 58 * s) / 630;
    Sq<T> A4 = A2 * lin<T>(n, 0, {{x1, &A}, {x2, &A2}});
    Sq<T> A8 = lin<T>(n, 0, {{x3, &A2}, {1, &A4}}) * lin<T>(n, x4, {{x5, &A}, {x6, &A2}, {x7, &A4}});
    return lin<T>(n, 1, {{1, &A}, {y2, &A2}, {1, &A8}});
  }
  Sq<T> A3 = A2 * A;
  if (m == 12) {
    static constexpr double a[4][4] = {
        {-1.86023205146205532243437300433e-02, 4.6, 2.11693118299809442949323323336e-01, 0},
        {-5.00702322573317730979741843919e-03, 9.92875103538486836140479571505e-01, 1.58224384715726725371768893252e-01,
         -1.31810610138301840156819349464e-01},
        {-5.73420122960522263905952420789e-01, -1.32445561052799638845074997454e-01, 1.65635169436727415011171668419e-01,
         -2.02785554058925907933568229945e-02},
        {-1.33399693943892059700768926983e-01, 1.7299e-03, 1.07862779315792425026320640108e-02,
         -6.75951846863086359778560766482e-03}};
    auto q = [&](int j) { return lin<T>(n, a[0][j], {{a[1][j], &A}, {a[2][j], &A2}, {a[3][j], &A3}}); };
    Sq<T> q1 = q(0), q2 = q(1), q3 = q(2), q4 = q(3);
    Sq<T> q44 = q4 * q4;
    Sq<T> q61 = lin<T>(n, 0, {{1, &q3}, {1, &q44}});
    Sq<T> p = lin<T>(n, 0, {{1, &q2}, {1, &q61}}) * q61;
    return lin<T>(n, 0, {{1, &q1}, {1, &p}});
  }
  // m == 18
  static constexpr double a[4] = {0, -1.00365581030144620014614939405e-01, -8.02924648241156960116919515244e-03,
                                  -8.92138498045729955685466128049e-04};
  // rows: coefficients of I, A, A2, A3, A6 in q61, q62, q63, q64
  static constexpr double b[4][5] = {
      {0, 3.97849749499645076145196127710e-01, 1.36783778460411719922523706878e+00, 4.98289622525382677556858817262e-01,
       -6.37898194594723309241550056492e-04},
      {-1.09676396052962062593517462675e+01, 1.68015813878906197182785401725e+00, 5.71779846478865512702871713225e-02,
       -6.98210122488052084290466483802e-03, 3.34975017086070538313367340668e-05},
      {-9.04316832390810561971468877018e-02, -6.76404519071381907560079900380e-02, 6.75961301770459646082799195079e-02,
       2.95552570429315527426069182242e-02, -1.39180257516060701124739979344e-05},
      {0, 0, -9.23364619367118592764570775143e-02, -1.69364939002081717191385115723e-02,
       -1.40086798182036159794363205726e-05}};
  Sq<T> A6 = A3 * A3;
  auto q = [&](int r) { return lin<T>(n, b[r][0], {{b[r][1], &A}, {b[r][2], &A2}, {b[r][3], &A3}, {b[r][4], &A6}}); };
  Sq<T> q31 = lin<T>(n, a[0], {{a[1], &A}, {a[2], &A2}, {a[3], &A3}});
  Sq<T> q61 = q(0), q62 = q(1), q63 = q(2), q64 = q(3);
  Sq<T> t = q31 * q64;
  Sq<T> q91 = lin<T>(n, 0, {{1, &t}, {1, &q63}});
  Sq<T> p = lin<T>(n, 0, {{1, &q62}, {1, &q91}}) * q91;
  return lin<T>(n, 0, {{1, &q61}, {1, &p}});
}

template <class T>
double norm1(const Sq<T>& A) {
  double best = 0;
  for (int64_t j = 0; j < A.n; ++j) {
    double c = 0;
    for (int64_t i = 0; i < A.n; ++i) c += std::abs(A.v[i * A.n + j]);
    if (!(c <= best)) best = c;  // NaN wins
  }
  return best;
}
// exp(A) for one matrix; returns the degree used and the number of squarings.
template <class T>
std::pair<int, int> expm_one(Sq<T>& A) {
  const double* th = ExpThetas<real_t<T>>::v;
  double nrm = norm1(A);
  if (!std::isfinite(nrm)) {
    std::fill(A.v.begin(), A.v.end(), T(std::numeric_limits<real_t<T>>::quiet_NaN()));
    return {0, 0};
  }
  for (int k = 0; k < 6; ++k)
    if (nrm <= th[k]) {
      A = taylor_exp(A, kExpDegrees[k]);
      return {kExpDegrees[k], 0};
    }
  int s = static_cast<int>(std::ceil(std::log2(nrm / th[5])));
  double scale = std::ldexp(1.0, -s);
  for (auto& x : A.v) x *= T(scale);
  A = taylor_exp(A, 18);
  for (int i = 0; i < s; ++i) A = A * A;
  return {18, s};
}

template <class T, class D>
Tensor<T, D> matrix_exp3(const Tensor<T, D>& A);

// The derivative of exp at X along E (or its adjoint, with X = A^H): the upper right block
// of exp([[X, E], [0, X]]). E is scaled to X's norm first (the result is linear in E), so the
// block's degree and scaling follow X.
template <class T, class D>
Tensor<T, D> exp_frechet(const Tensor<T, D>& X, const Tensor<T, D>& E) {
  int64_t n = X.size(-1);
  double nx = 0, ne = 0;
  {
    auto x = plain3(X), e = plain3(E);
    for (auto v : x.to_vector()) nx = std::max<double>(nx, std::abs(v));
    for (auto v : e.to_vector()) ne = std::max<double>(ne, std::abs(v));
  }
  double c = (nx > 0 && ne > 0 && std::isfinite(nx) && std::isfinite(ne)) ? nx / ne : 1.0;
  Tensor<T, D> Es = c == 1.0 ? E : Tensor<T, D>(E * c);
  auto top = cat({X, Es}, -1);
  auto bottom = cat({zeros_like(X), X}, -1);
  auto M = cat({top, bottom}, -2);
  Tensor<T, D> r = matrix_exp3(M).narrow(-2, 0, n).narrow(-1, n, n);
  return c == 1.0 ? r : Tensor<T, D>(r * (1.0 / c));
}

template <class T, class D>
Tensor<T, D> matrix_exp3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto out = empty<T, D>({nb, n, n});
  if constexpr (!detail::Backend<D>::has_data) {
    return out;
  } else {
    auto a = plain3(A);
    for_batch(nb, n, [&](int64_t b) {
      Sq<T> m(n);
      std::copy_n(a.data_ptr() + b * n * n, n * n, m.v.data());
      expm_one(m);
      std::copy_n(m.v.data(), n * n, out.mutable_data_ptr() + b * n * n);
    });
    if (!records<T, D>(A)) return out;
    return record_fn(
        out, "LinalgMatrixExpBackward", {A}, {A},
        [A](const Tensor<T, D>& G) { return std::vector<Tensor<T, D>>{exp_frechet(mH(A), G)}; },
        [A](const std::vector<Tensor<T, D>>& t) { return exp_frechet(A, t[0]); });
  }
}

}  // namespace reel::detail::la
