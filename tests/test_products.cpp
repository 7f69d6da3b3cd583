// matmul family against naive triple loops.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include <reel/reel.hpp>

using namespace reel;

template <class T>
static std::vector<double> naive(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k, int64_t m) {
  std::vector<double> c(n * m, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * m + j] += static_cast<double>(a[i * k + p]) * static_cast<double>(b[p * m + j]);
  return c;
}

// Whether every element of v is within tol * sqrt(k) of w, relative to w's largest element
// (the rounding of a k-term dot product).
template <class U>
static bool close_to(const std::vector<U>& v, const std::vector<double>& w, double tol, int64_t k) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double d = std::abs(double(v[i]) - w[i]);
    if (!(d <= worst)) worst = d;  // (a NaN stays)
    scale = std::max(scale, std::abs(w[i]));
  }
  return worst <= tol * scale * std::sqrt(double(k));
}

TEST_CASE("mm, including transposed operands") {
  Generator g(1);
  auto a = randn<double>({5, 7}, g);
  auto b = randn<double>({7, 3}, g);
  auto c = mm(a, b).to_vector();
  auto want = naive(a.to_vector(), b.to_vector(), 5, 7, 3);
  for (size_t i = 0; i < want.size(); ++i) CHECK(c[i] == doctest::Approx(want[i]).epsilon(1e-13));
  auto at = a.mT().contiguous().mT();  // column-major storage
  auto c2 = mm(at, b).to_vector();
  for (size_t i = 0; i < want.size(); ++i) CHECK(c2[i] == doctest::Approx(want[i]).epsilon(1e-13));
  CHECK_THROWS_AS(mm(a, a), value_error);
}

TEST_CASE("matmul shapes follow torch.matmul") {
  Generator g(2);
  auto v = randn<float>({4}, g);
  auto m = randn<float>({4, 3}, g);
  auto bt = randn<float>({2, 5, 4}, g);
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, m).sizes() == Shape{3});
  CHECK(matmul(m.mT(), v).sizes() == Shape{3});
  CHECK(matmul(bt, m).sizes() == Shape{2, 5, 3});
  CHECK(matmul(bt, v).sizes() == Shape{2, 5});
  auto x = randn<float>({3, 1, 2, 4}, g);
  auto y = randn<float>({5, 4, 6}, g);
  auto z = matmul(x, y);
  CHECK(z.sizes() == Shape{3, 5, 2, 6});
  // element check of one broadcast batch
  auto zb = z.select(0, 2).select(0, 4).contiguous().to_vector();
  auto want = naive(x.select(0, 2).select(0, 0).contiguous().to_vector(), y.select(0, 4).contiguous().to_vector(), 2, 4, 6);
  for (size_t i = 0; i < want.size(); ++i) CHECK(zb[i] == doctest::Approx(want[i]).epsilon(1e-5));
  CHECK(dot(v, v).item() == doctest::Approx(sum(v * v).item()));
  auto o = outer(tensor<float>({1, 2}), tensor<float>({3, 4, 5}));
  CHECK(o.to_vector() == std::vector<float>{3, 4, 5, 6, 8, 10});
  CHECK(bmm(bt, bt.mT()).sizes() == Shape{2, 5, 5});
  CHECK_THROWS_AS(matmul(m, m), value_error);
  CHECK(matmul(zeros<float>({2, 0}), zeros<float>({0, 3})).to_vector() == std::vector<float>(6, 0));
}

TEST_CASE("integer and half matmul") {
  auto a = from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  CHECK(matmul(a, a).to_vector() == std::vector<int32_t>{7, 10, 15, 22});
  auto h = a.to<half>();
  CHECK(matmul(h, h).to<float>().to_vector() == std::vector<float>{7, 10, 15, 22});
}

TEST_CASE("large products go through the blocked kernel, split between threads") {
  Generator g(3);
  for (auto [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{100, 70, 90}, {300, 200, 150}, {33, 1, 40}}) {
    auto a = randn<double>({n, k}, g);
    auto b = randn<double>({k, m}, g);
    auto want = naive(a.to_vector(), b.to_vector(), n, k, m);
    auto c = matmul(a, b).to_vector();
    auto ct = matmul(a.mT().contiguous().mT(), b.mT().contiguous().mT()).to_vector();  // column-major storage
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) err = std::max({err, std::abs(c[i] - want[i]), std::abs(ct[i] - want[i])});
    CHECK(err < 1e-11);
  }
  auto x = randn<float>({4, 64, 48}, g);
  auto y = randn<float>({4, 48, 80}, g);
  auto z = bmm(x, y);
  auto want = naive(x[2].contiguous().to_vector(), y[2].contiguous().to_vector(), 64, 48, 80);
  auto got = z[2].contiguous().to_vector();
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
  auto hi = randint<int32_t>(-5, 5, {50, 60}, g);
  auto hj = randint<int32_t>(-5, 5, {60, 40}, g);
  auto iw = naive(hi.to_vector(), hj.to_vector(), 50, 60, 40);
  auto ig = matmul(hi, hj).to_vector();
  for (size_t i = 0; i < iw.size(); ++i) CHECK(ig[i] == static_cast<int32_t>(iw[i]));
}

#ifdef REEL_WITH_BLAS
TEST_CASE("the BLAS steps aside when OpenBLAS runs fallback kernels on an AVX2 CPU") {
  using detail::blas::fallback_core;
  CHECK(fallback_core("Prescott", true));  // OpenBLAS 0.3.21 on a CPU newer than itself
  CHECK(fallback_core("Nehalem", true));
  CHECK_FALSE(fallback_core("Prescott", false));  // an old CPU: these are its kernels
  CHECK_FALSE(fallback_core("SkylakeX", true));
  CHECK_FALSE(fallback_core("Haswell", true));
  CHECK_FALSE(fallback_core("Zen", true));
  CHECK_FALSE(fallback_core(nullptr, true));  // not OpenBLAS (BLIS)
}
#endif

TEST_CASE_TEMPLATE("float and double GEMM, every transposition and accumulation (BLAS when built with one)", T, float,
                   double) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  Generator g(9);
  // ({40, 1000, 96}: few rows, many columns, a long k: threads split the columns)
  for (auto [n, k, m] : {std::array<int64_t, 3>{70, 90, 50}, {129, 33, 257}, {1, 300, 2}, {40, 1000, 96}}) {
    auto a = randn<T>({n, k}, g), b = randn<T>({k, m}, g);
    auto want = naive(a.to_vector(), b.to_vector(), n, k, m);
    auto at = a.mT().contiguous().mT(), bt = b.mT().contiguous().mT();  // column-major storage
    // row-major with a leading dimension past the row, column-major likewise, and a layout
    // no GEMM reads in place (every other column: copied first)
    auto wide = zeros<T>({n, k + 5}), tall = zeros<T>({m, k + 4}), step = zeros<T>({n, 2 * k});
    auto a_ld = wide.narrow(1, 2, k), b_ld = tall.narrow(1, 0, k).mT(), a_step = step.slice(1, 0, 2 * k, 2);
    a_ld.copy_(a);
    b_ld.copy_(b);
    a_step.copy_(a);
    for (const auto& c : {mm(a, b), mm(at, b), mm(a, bt), mm(at, bt), mm(a_ld, b_ld), mm(a_step, bt), mm(at, b_ld)}) {
      CHECK(close_to(c.to_vector(), want, tol, k));
    }
    // a batch of products: small ones run in parallel (never a nested BLAS call), large ones not
    auto ab = randn<T>({3, n, k}, g), bb = randn<T>({3, k, m}, g);
    auto cb = bmm(ab, bb);
    for (int64_t q = 0; q < 3; ++q) {
      auto w = naive(ab.select(0, q).contiguous().to_vector(), bb.select(0, q).contiguous().to_vector(), n, k, m);
      CHECK(close_to(cb.select(0, q).contiguous().to_vector(), w, tol, k));
    }
  }
}

TEST_CASE_TEMPLATE("batched products read transposed operands (a backward's .mT() views) in place", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  Generator g(11);
  // small (the plain loop), large (the blocked kernel) and a single product; a broadcast batch
  for (auto [B, n, k, m] : {std::array<int64_t, 4>{3, 5, 7, 4}, {2, 70, 40, 90}, {1, 130, 64, 64}}) {
    auto a = randn<T>({B, n, k}, g), b = randn<T>({B, k, m}, g);
    auto at = a.mT().contiguous().mT(), bt = b.mT().contiguous().mT();  // each matrix column-major
    auto b0 = b.select(0, 0).unsqueeze(0).expand({B, k, m});             // batch stride 0
    auto bt0 = bt.select(0, 0).unsqueeze(0).expand({B, k, m});
    for (int which = 0; which < 5; ++which) {
      const bool shared = which >= 3;
      Tensor<T> c = which == 0   ? bmm(at, b)
                    : which == 1 ? bmm(a, bt)
                    : which == 2 ? bmm(at, bt)
                    : which == 3 ? bmm(at, bt0)
                                 : bmm(a, b0);
      CAPTURE(which);
      for (int64_t q = 0; q < B; ++q) {
        auto w = naive(a.select(0, q).contiguous().to_vector(), b.select(0, shared ? 0 : q).contiguous().to_vector(), n, k, m);
        CHECK(close_to(c.select(0, q).contiguous().to_vector(), w, tol, k));
      }
    }
  }
}

// The blocked kernel zeroes C strip by strip right before its first depth block adds into it
// (detail::gemm_block): what C held before must not show through (NaN included), and with
// accumulate it must be added to. Sizes cross the strips (96 rows of C^T), the kernel's
// panels and remainders, and a depth longer than one depth block; every transposition;
// complex too (other panel heights).
TEST_CASE_TEMPLATE("the blocked kernel overwrites or accumulates into C, whatever C held", T, float, double,
                   std::complex<double>) {
  using R = real_t<T>;
  const double tol = std::is_same_v<R, float> ? 2e-5 : 1e-12;
  Generator g(13);
  // ({37, 45, 301}: wider than one block of C's rows; {250, 64, 200}; {40, 800, 50}: deeper
  // than one depth block (Eigen's kc is 300-600 here); then small or thin ones
  // (detail::gemm_thin): rows of C of 8 or more, split by rows or by columns, shorter rows
  // with A stored either way, and a depth of 0 for both)
  std::vector<std::array<int64_t, 3>> sizes{{37, 45, 301}, {250, 64, 200}, {40, 800, 50}, {1030, 2, 64}, {2, 200, 300},
                                            {600, 64, 3},  {300, 64, 1},   {5, 3, 7},     {9, 0, 11},   {9, 0, 3}};
#ifdef REEL_WITH_BLAS
  // The BLAS path's own sizes: past the size it splits between threads (one BLAS call), and
  // deep for their C, split by depth with an OpenMP OpenBLAS
  if constexpr (!is_complex_v<T>) sizes.insert(sizes.end(), {{130, 1500, 97}, {16, 512, 16}, {70, 512, 2}});
#endif
  for (auto size : sizes) {
    const int64_t m = size[0], k = size[1], n = size[2];
    auto a = randn<T>({m, k}, g), b = randn<T>({k, n}, g), c0 = randn<T>({m, n}, g);
    const auto av = a.to_vector(), bv = b.to_vector(), cv = c0.to_vector();
    std::vector<T> at(m * k), bt(k * n);  // A stored [k, m], B stored [n, k]
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) at[p * m + i] = av[i * k + p];
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) bt[j * k + p] = bv[p * n + j];
    std::vector<T> want(m * n, T(0));  // in long double / complex<long double>
    double scale = 0;
    using W = std::conditional_t<is_complex_v<T>, std::complex<long double>, long double>;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        W s = 0;
        for (int64_t p = 0; p < k; ++p) s += W(av[i * k + p]) * W(bv[p * n + j]);
        if constexpr (is_complex_v<T>)
          want[i * n + j] = T(R(s.real()), R(s.imag()));
        else
          want[i * n + j] = T(s);
        scale = std::max(scale, double(std::abs(s)));
      }
    for (int variant = 0; variant < 8; ++variant) {
      const bool ta = variant & 1, tb = variant & 2, accumulate = variant & 4;
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      CAPTURE(variant);
      // C with a leading dimension past its rows (ldc = n + 3): the 3 extra columns hold 7s
      const int64_t ldc = n + 3;
      std::vector<T> c(m * ldc, T(7));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? cv[i * n + j] : T(std::numeric_limits<R>::quiet_NaN());
      const T* pa = ta ? at.data() : av.data();
      const T* pb = tb ? bt.data() : bv.data();
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      if (ta && tb)
        detail::gemm_ex<T, true, true>(m, n, k, pa, lda, pb, ldb, c.data(), ldc, accumulate);
      else if (ta)
        detail::gemm_ex<T, true, false>(m, n, k, pa, lda, pb, ldb, c.data(), ldc, accumulate);
      else if (tb)
        detail::gemm_ex<T, false, true>(m, n, k, pa, lda, pb, ldb, c.data(), ldc, accumulate);
      else
        detail::gemm_ex<T, false, false>(m, n, k, pa, lda, pb, ldb, c.data(), ldc, accumulate);
      const double bound = tol * scale * std::sqrt(double(k));
      int64_t off = 0;  // (a NaN left in C counts: no comparison with it holds)
      for (int64_t i = 0; i < m * n; ++i)
        off += !(std::abs(c[i / n * ldc + i % n] - want[i] - (accumulate ? cv[i] : T(0))) <= bound);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n; j < ldc; ++j) off += c[i * ldc + j] != T(7);
      CHECK(off == 0);
    }
  }
}
