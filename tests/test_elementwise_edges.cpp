// Elementwise expressions, the exact and edge cases: integer arithmetic, rounding and
// comparisons, complex values, erf, in-place forms, operand lifetimes, threads, and IEEE
// values on the vectorized paths (test_elementwise.cpp has the float values, broadcasting,
// the strided and parallel paths and type promotion).
#include <doctest/doctest.h>

#include <cmath>
#include <thread>
#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("integer arithmetic") {
  auto a = tensor<int32_t>({7, -7, 3});
  auto b = tensor<int32_t>({2, 2, -2});
  CHECK(Tensor<int32_t>(a + b).to_vector() == std::vector<int32_t>{9, -5, 1});
  CHECK(Tensor<int32_t>(a * b).to_vector() == std::vector<int32_t>{14, -14, -6});
  CHECK(Tensor<float>(a / b).to_vector() == std::vector<float>{3.5f, -3.5f, -1.5f});
  CHECK(Tensor<int32_t>(pow(a, 2)).to_vector() == std::vector<int32_t>{49, 49, 9});
  CHECK(Tensor<int32_t>(abs(a)).to_vector() == std::vector<int32_t>{7, 7, 3});
  CHECK(Tensor<int32_t>(sign(a)).to_vector() == std::vector<int32_t>{1, -1, 1});
  CHECK(Tensor<int16_t>(tensor<uint8_t>({200}) + tensor<int8_t>({-100})).to_vector() == std::vector<int16_t>{100});
  CHECK(Tensor<uint8_t>(tensor<uint8_t>({250}) + 10).to_vector() == std::vector<uint8_t>{4});  // wraps like PyTorch
  // signed overflow wraps too (no undefined behaviour: the sanitizer run checks)
  const int32_t imax = std::numeric_limits<int32_t>::max(), imin = std::numeric_limits<int32_t>::min();
  CHECK(Tensor<int32_t>(tensor<int32_t>({imax}) + 1).to_vector() == std::vector<int32_t>{imin});
  CHECK(Tensor<int32_t>(tensor<int32_t>({imin}) - 1).to_vector() == std::vector<int32_t>{imax});
  CHECK(Tensor<int32_t>(-tensor<int32_t>({imin})).to_vector() == std::vector<int32_t>{imin});
  CHECK(Tensor<int32_t>(abs(tensor<int32_t>({imin}))).to_vector() == std::vector<int32_t>{imin});
  CHECK(Tensor<int64_t>(tensor<int64_t>({int64_t(1) << 62}) * 4).to_vector() == std::vector<int64_t>{0});
  CHECK(Tensor<int16_t>(square(tensor<int16_t>({300}))).to_vector() == std::vector<int16_t>{static_cast<int16_t>(90000 - 65536 * 1)});
}

TEST_CASE("rounding, sign, relu, comparisons, where, nan_to_num") {
  auto x = tensor<double>({-1.5, -0.5, 0.5, 1.5, 2.5, NAN});
  auto r = Tensor<double>(round(x)).to_vector();  // half to even
  CHECK(r[0] == -2);
  CHECK(r[1] == 0);
  CHECK(r[2] == 0);
  CHECK(r[3] == 2);
  CHECK(r[4] == 2);
  CHECK(std::isnan(r[5]));
  CHECK(Tensor<double>(floor(x)).to_vector()[1] == -1);
  CHECK(Tensor<double>(ceil(x)).to_vector()[1] == 0);
  auto s = Tensor<double>(sign(x)).to_vector();
  CHECK(s[0] == -1);
  CHECK(s[3] == 1);
  CHECK(s[5] == 0);  // sign(NaN) is 0 in PyTorch 2.15 (tests/reference/edge_values.hpp)
  CHECK(Tensor<double>(relu(x)).to_vector()[3] == 1.5);
  CHECK(Tensor<double>(relu(x)).to_vector()[0] == 0);
  CHECK(Tensor<bool>(x > 0).to_vector() == std::vector<bool>{false, false, true, true, true, false});
  CHECK(Tensor<bool>(ne(x, x)).to_vector() == std::vector<bool>{false, false, false, false, false, true});
  CHECK(Tensor<bool>(isnan(x)).to_vector()[5]);
  CHECK(Tensor<double>(where(x > 0, x, 0.0)).to_vector()[0] == 0);
  CHECK(Tensor<double>(where(x > 0, x, 0.0)).to_vector()[4] == 2.5);
  auto y = tensor<float>({NAN, INFINITY, -INFINITY, 1});
  CHECK(Tensor<float>(nan_to_num(y)).to_vector() ==
        std::vector<float>{0, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), 1});
  CHECK(Tensor<float>(nan_to_num(y, 1.0, 2.0, -2.0)).to_vector() == std::vector<float>{1, 2, -2, 1});
  CHECK(Tensor<bool>(isinf(y)).to_vector() == std::vector<bool>{false, true, true, false});
  CHECK(Tensor<bool>(isfinite(y)).to_vector() == std::vector<bool>{false, false, false, true});
  CHECK(Tensor<bool>(logical_and(y > 0, isfinite(y))).to_vector() == std::vector<bool>{false, false, false, true});
}

TEST_CASE_TEMPLATE("floor, ceil and round keep the sign of zero on every path", T, float, double) {
  // Against the C++ library's floor / ceil / nearbyint, sign bit included: a long contiguous
  // tensor (Eigen's vectorized kernels) and a strided view of it (the scalar path).
  const T inf = std::numeric_limits<T>::infinity();
  const std::vector<T> pattern{T(-0.0), T(0.0), T(-0.4), T(0.4), T(-0.5), T(0.5), T(-0.6), T(-1.5), T(2.5),
                               T(-2.5), T(1e30), T(-1e30), inf, -inf, std::numeric_limits<T>::quiet_NaN()};
  std::vector<T> v;
  for (int i = 0; v.size() < 4099; ++i) v.push_back(pattern[i % pattern.size()]);
  auto x = from_vector<T>(v);
  auto same = [](T got, T want) {
    return (std::isnan(got) && std::isnan(want)) || (got == want && std::signbit(got) == std::signbit(want));
  };
  auto check = [&](const Tensor<T>& in, const char* name, auto f, const std::vector<T>& got) {
    auto iv = in.to_vector();
    REQUIRE(got.size() == iv.size());
    for (size_t i = 0; i < iv.size(); ++i) {
      INFO(name, "(", iv[i], ")");
      CHECK(same(got[i], f(iv[i])));
    }
  };
  for (const Tensor<T>& in : {x, Tensor<T>(x.slice(0, 0, 4099, 2))}) {
    check(in, "floor", [](T a) { return std::floor(a); }, Tensor<T>(floor(in)).to_vector());
    check(in, "ceil", [](T a) { return std::ceil(a); }, Tensor<T>(ceil(in)).to_vector());
    check(in, "round", [](T a) { return std::nearbyint(a); }, Tensor<T>(round(in)).to_vector());
  }
}

TEST_CASE("complex elementwise") {
  using C = std::complex<double>;
  auto z = from_vector<C>({C(1, 2), C(-3, 4), C(0, -1)});
  auto w = from_vector<C>({C(2, 0), C(1, 1), C(0.5, 0.5)});
  auto p = Tensor<C>(z * w).to_vector();
  CHECK(p[1] == C(-3, 4) * C(1, 1));
  auto e = Tensor<C>(exp(z)).to_vector();
  CHECK(std::abs(e[0] - std::exp(C(1, 2))) < 1e-14);
  CHECK(Tensor<double>(abs(z)).to_vector()[1] == 5);
  CHECK(Tensor<double>(real(z)).to_vector() == std::vector<double>{1, -3, 0});
  CHECK(Tensor<double>(imag(z)).to_vector() == std::vector<double>{2, 4, -1});
  CHECK(Tensor<C>(conj(z)).to_vector()[0] == C(1, -2));
  CHECK(Tensor<double>(angle(z)).to_vector()[2] == doctest::Approx(-M_PI / 2));
  CHECK(Tensor<double>(angle(tensor<double>({-2, 3}))).to_vector() == std::vector<double>{M_PI, 0});
  CHECK(Tensor<C>(sgn(z)).to_vector()[1] == C(-0.6, 0.8));
}

TEST_CASE("erf against tabulated values (Abramowitz and Stegun 7.1), and erf_ in place") {
  auto x = tensor<double>({0.0, 0.5, 1.0, -2.0, 3.5});
  const std::vector<double> want{0.0, 0.5204998778130465, 0.8427007929497149, -0.9953222650189527, 0.9999992569016276};
  Tensor<double> r = erf(x);
  for (size_t i = 0; i < want.size(); ++i) CHECK(r.to_vector()[i] == doctest::Approx(want[i]).epsilon(1e-15));
  auto xf = tensor<float>({0.5f, -1.0f});
  erf_(xf);
  CHECK(xf.to_vector()[0] == doctest::Approx(0.5204998778130465).epsilon(1e-7));
  CHECK(xf.to_vector()[1] == doctest::Approx(-0.8427007929497149).epsilon(1e-7));
}

TEST_CASE("in-place unary forms write into storage") {
  auto x = tensor<float>({1, 4, 9});
  auto alias = x;
  sqrt_(x);
  CHECK(alias.to_vector() == std::vector<float>{1, 2, 3});
  neg_(x.slice(0, 1, 3));
  CHECK(alias.to_vector() == std::vector<float>{1, -2, -3});
  clamp_(x, -2.5, 0.5);
  CHECK(alias.to_vector() == std::vector<float>{0.5, -2, -2.5});
}

TEST_CASE("expressions hold operands by value and never dangle") {
  auto make = [] {
    auto a = tensor<float>({1, 2});
    auto b = tensor<float>({3, 4});
    return a * b + 1;  // a and b go out of scope here
  };
  auto e = make();
  Tensor<float> r = e;
  CHECK(r.to_vector() == std::vector<float>{4, 9});
  CHECK((tensor<float>({1, 2}) * 2).sum().item() == 6);
}

TEST_CASE("independent computations on two std::threads (each using the thread pool)") {
  auto work = [](float seed, std::vector<float>& out) {
    auto x = full<float>({1 << 18}, seed);
    for (int i = 0; i < 20; ++i) x = Tensor<float>(x * 0.5f + 1.0f);
    out = {sum(x).item(), amax(x).item()};
  };
  std::vector<float> r1, r2;
  std::thread t1(work, 1.0f, std::ref(r1)), t2(work, 3.0f, std::ref(r2));
  t1.join();
  t2.join();
  // x_k = 2 + (x0 - 2) / 2^k
  const double k = 1.0 / (1 << 20);
  CHECK(r1[1] == doctest::Approx(2 - 1 * k));
  CHECK(r2[1] == doctest::Approx(2 + 1 * k));
  CHECK(r1[0] == doctest::Approx((2 - k) * (1 << 18)));
  CHECK(r2[0] == doctest::Approx((2 + k) * (1 << 18)));
}

TEST_CASE("vectorized sqrt, rsqrt, exp, log and sigmoid keep IEEE values at inf, -0, denormals and underflow") {
  auto run = [](auto zero) {
    using T = decltype(zero);
    using L = std::numeric_limits<T>;
    const std::vector<T> edge = {L::infinity(), -L::infinity(), T(0), -T(0), L::denorm_min(), L::min() / 8, T(-800),
                                 T(800), T(-120), T(100), T(1e-3), T(2), L::quiet_NaN(), L::max(), T(-L::max())};
    std::vector<T> v;
    for (int i = 0; i < 70; ++i) v.push_back(edge[(i * 7) % edge.size()]);  // at every lane position
    auto x = from_vector<T>(v);
    auto same = [](T got, T want, double tol) {
      if (std::isnan(want)) return std::isnan(got);
      if (want == 0 || std::isinf(want)) return got == want && std::signbit(got) == std::signbit(want);
      return std::abs(static_cast<double>(got) - static_cast<double>(want)) <= tol * std::abs(static_cast<double>(want));
    };
    const double tol = std::is_same_v<T, float> ? 4e-7 : 1e-15;
    auto s = Tensor<T>(sqrt(x)).to_vector(), r = Tensor<T>(rsqrt(x)).to_vector(), e = Tensor<T>(exp(x)).to_vector();
    auto l = Tensor<T>(log(x)).to_vector(), g = Tensor<T>(sigmoid(x)).to_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      CAPTURE(v[i]);
      CHECK(same(s[i], std::sqrt(v[i]), 0));  // correctly rounded, as IEEE sqrt
      CHECK(same(r[i], T(1) / std::sqrt(v[i]), tol));
      CHECK(same(e[i], std::exp(v[i]), 4 * tol));
      CHECK(same(l[i], std::log(v[i]), 4 * tol));
      CHECK(same(g[i], T(1) / (T(1) + std::exp(-v[i])), 4 * tol));
    }
  };
  run(0.0f);
  run(0.0);
}
