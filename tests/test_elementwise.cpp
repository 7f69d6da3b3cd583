// Elementwise expressions: values against the C++ standard library, broadcasting, the
// strided and parallel paths, type promotion (test_elementwise_edges.cpp: the exact and edge
// cases).
#include <doctest/doctest.h>

#include <cmath>
#include <reel/reel.hpp>

using namespace reel;

// PyTorch's promotion table (torch.promote_types), resolved at compile time.
static_assert(std::is_same_v<promote_t<uint8_t, int8_t>, int16_t>);
static_assert(std::is_same_v<promote_t<uint8_t, int32_t>, int32_t>);
static_assert(std::is_same_v<promote_t<int32_t, int64_t>, int64_t>);
static_assert(std::is_same_v<promote_t<bool, uint8_t>, uint8_t>);
static_assert(std::is_same_v<promote_t<int64_t, half>, half>);
static_assert(std::is_same_v<promote_t<half, bfloat16>, float>);
static_assert(std::is_same_v<promote_t<half, float>, float>);
static_assert(std::is_same_v<promote_t<float, double>, double>);
static_assert(std::is_same_v<promote_t<std::complex<float>, double>, std::complex<double>>);
static_assert(std::is_same_v<promote_t<std::complex<float>, half>, std::complex<float>>);
static_assert(std::is_same_v<promote_t<uint32_t, uint32_t>, uint32_t>);
static_assert(std::is_same_v<promote_t<uint64_t, float>, float>);
// Scalars are weak: they only matter when of a higher category.
static_assert(std::is_same_v<decltype(tensor<int32_t>({1}) * 2)::value_type, int32_t>);
static_assert(std::is_same_v<decltype(tensor<int32_t>({1}) * 2.5)::value_type, float>);
static_assert(std::is_same_v<decltype(tensor<half>({1}) * 2.5)::value_type, half>);
static_assert(std::is_same_v<decltype(tensor<bool>({true}) + 1)::value_type, int64_t>);
static_assert(std::is_same_v<decltype(tensor<double>({1}) * std::complex<double>(1, 1))::value_type, std::complex<double>>);
static_assert(std::is_same_v<decltype(tensor<int32_t>({1}) / tensor<int32_t>({2}))::value_type, float>);  // true division
static_assert(std::is_same_v<decltype(exp(tensor<int64_t>({1})))::value_type, float>);
static_assert(std::is_same_v<decltype(abs(empty<std::complex<double>>({0})))::value_type, double>);
static_assert(std::is_same_v<decltype(tensor<float>({1}) < 2)::value_type, bool>);

template <class F>
static std::vector<double> apply_std(const std::vector<double>& x, F f) {
  std::vector<double> r;
  for (double v : x) r.push_back(f(v));
  return r;
}

TEST_CASE("unary float ops match the standard library (double, contiguous and strided)") {
  std::vector<double> xs{0.1, 0.5, 0.9, 1.3, 2.0, 0.25};
  auto x = from_vector<double>(xs);
  auto xt = from_vector<double>(xs, {2, 3}).transpose(0, 1);  // strided path
  std::vector<double> xs_t{xs[0], xs[3], xs[1], xs[4], xs[2], xs[5]};
  auto check = [&](auto expr_fn, auto std_fn) {
    Tensor<double> r = expr_fn(x);
    Tensor<double> rt = expr_fn(xt);
    auto want = apply_std(xs, std_fn);
    auto want_t = apply_std(xs_t, std_fn);
    for (size_t i = 0; i < xs.size(); ++i) {
      CHECK(r.to_vector()[i] == doctest::Approx(want[i]).epsilon(1e-14));
      CHECK(rt.to_vector()[i] == doctest::Approx(want_t[i]).epsilon(1e-14));
    }
  };
  check([](auto& t) { return exp(t); }, [](double v) { return std::exp(v); });
  check([](auto& t) { return log(t); }, [](double v) { return std::log(v); });
  check([](auto& t) { return log1p(t); }, [](double v) { return std::log1p(v); });
  check([](auto& t) { return expm1(t); }, [](double v) { return std::expm1(v); });
  check([](auto& t) { return sqrt(t); }, [](double v) { return std::sqrt(v); });
  check([](auto& t) { return rsqrt(t); }, [](double v) { return 1 / std::sqrt(v); });
  check([](auto& t) { return sin(t); }, [](double v) { return std::sin(v); });
  check([](auto& t) { return cos(t); }, [](double v) { return std::cos(v); });
  check([](auto& t) { return tan(t); }, [](double v) { return std::tan(v); });
  check([](auto& t) { return tanh(t); }, [](double v) { return std::tanh(v); });
  check([](auto& t) { return sigmoid(t); }, [](double v) { return 1 / (1 + std::exp(-v)); });
  check([](auto& t) { return reciprocal(t); }, [](double v) { return 1 / v; });
  check([](auto& t) { return square(t); }, [](double v) { return v * v; });
  check([](auto& t) { return pow(t, 1.5); }, [](double v) { return std::pow(v, 1.5); });
  check([](auto& t) { return pow(2.0, t); }, [](double v) { return std::pow(2.0, v); });
  check([](auto& t) { return -t * 3 + t / 2 - 1; }, [](double v) { return -v * 3 + v / 2 - 1; });
  check([](auto& t) { return exp(sin(t) * t) - sqrt(t); }, [](double v) { return std::exp(std::sin(v) * v) - std::sqrt(v); });
}

TEST_CASE("float ops (Eigen's vectorized kernels) are accurate to float precision") {
  auto x = linspace<float>(-3, 3, 1001);
  auto xs = x.to_vector();
  auto check = [&](auto f, auto ref, double tol) {
    Tensor<float> r = f(x);
    auto a = r.to_vector();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(ref(static_cast<double>(xs[i]))).epsilon(tol).scale(1));
  };
  check([](auto& t) { return exp(t); }, [](double v) { return std::exp(v); }, 1e-6);
  check([](auto& t) { return tanh(t); }, [](double v) { return std::tanh(v); }, 1e-6);
  check([](auto& t) { return sin(t) * cos(t); }, [](double v) { return std::sin(v) * std::cos(v); }, 1e-6);
  check([](auto& t) { return sigmoid(t); }, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-6);
  check([](auto& t) { return log1p(abs(t)); }, [](double v) { return std::log1p(std::abs(v)); }, 1e-6);
}

TEST_CASE("half and bfloat16 compute in float and round once") {
  // a C++ number stays a float (PyTorch's op-math), only the result is rounded
  auto h = tensor<half>({1.0, 2.0, 3.0});
  Tensor<half> r = h * 0.1 + 1;
  for (int i = 0; i < 3; ++i) {
    float want = static_cast<float>(h.to_vector()[i]) * 0.1f + 1.0f;
    CHECK(static_cast<float>(r.to_vector()[i]) == static_cast<float>(half(want)));
  }
  CHECK(static_cast<float>(Tensor<half>(tensor<half>({3.0}) * 0.1).item()) == static_cast<float>(half(3.0f * 0.1f)));
  CHECK(static_cast<float>(half(3.0f * 0.1f)) == 0.300048828125f);  // (PyTorch's value; 0.2998046875 rounding 0.1 first)
  auto big = Tensor<half>(tensor<half>({1.0, -1.0, 0.5, 0.0}) * 70000).to_vector();  // 70000 is inf in half
  CHECK(std::isinf(static_cast<float>(big[0])));
  CHECK(static_cast<float>(big[1]) == -std::numeric_limits<float>::infinity());
  CHECK(static_cast<float>(big[2]) == 35008.0f);
  CHECK(static_cast<float>(big[3]) == 0.0f);
  auto bf = Tensor<bfloat16>(tensor<bfloat16>({3.0}) / 3.3).item();
  CHECK(static_cast<float>(bf) == static_cast<float>(bfloat16(3.0f / 3.3f)));
  Tensor<bfloat16> b = exp(tensor<bfloat16>({0.0, 1.0}));
  CHECK(static_cast<float>(b.to_vector()[1]) == static_cast<float>(bfloat16(std::exp(1.0f))));
}

TEST_CASE("broadcasting") {
  auto a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto row = tensor<float>({10, 20, 30});
  auto col = tensor<float>({{100}, {200}});
  Tensor<float> r = a + row + col;
  CHECK(r.to_vector() == std::vector<float>{111, 122, 133, 214, 225, 236});
  Tensor<float> outer = col * row;
  CHECK(outer.sizes() == Shape{2, 3});
  Tensor<float> s = a * scalar_tensor<float>(2);
  CHECK(s.to_vector() == std::vector<float>{2, 4, 6, 8, 10, 12});
  Tensor<float> e = zeros<float>({0, 3}) + row;
  CHECK(e.sizes() == Shape{0, 3});
}

TEST_CASE("large tensors take the parallel path and give the same values") {
  const int64_t n = 1 << 20;
  auto x = arange<float>(n);
  Tensor<float> y = x * 2 + 1;
  auto v = y.to_vector();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && v[i] == 2.0f * static_cast<float>(i) + 1.0f;
  CHECK(ok);
  // broadcast + strided, large
  auto m = x.view({1024, 1024});
  Tensor<float> z = m.transpose(0, 1) - m.select(0, 3);
  auto zv = z.to_vector();
  bool ok2 = true;
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t j = 0; j < 1024; ++j)
      ok2 = ok2 && zv[i * 1024 + j] == static_cast<float>(j * 1024 + i) - static_cast<float>(3 * 1024 + j);
  CHECK(ok2);
}

// Reference for the loop-order tests: element (i, j, k) of a [n0, n1, n2] result.
template <class F>
static std::vector<double> grid3(int64_t n0, int64_t n1, int64_t n2, F f) {
  std::vector<double> r;
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      for (int64_t k = 0; k < n2; ++k) r.push_back(f(i, j, k));
  return r;
}

TEST_CASE("short inner dims, broadcasts and permuted outputs: every loop order gives the same values") {
  // pair differences (the physics pattern: a length-3 last dim, blocks of short rows), for
  // sizes around the short-row and Eigen-row thresholds and above the parallel threshold
  for (int64_t n : {1, 2, 5, 38, 120}) {
    for (int64_t c : {1, 2, 3, 7, 8, 16, 17}) {
      Tensor<double> P = arange<double>(n * c).reshape({n, c}) * 0.5 - 3.0;
      Tensor<double> d = P.unsqueeze(1) - P.unsqueeze(0);
      auto pv = P.to_vector();
      CHECK(d.to_vector() == grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) { return pv[i * c + k] - pv[j * c + k]; }));
      Tensor<double> e = exp(P.unsqueeze(0) * 0.1) * P.unsqueeze(1);  // unary + broadcast on both sides
      auto ev = e.to_vector();
      auto ex = grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) { return std::exp(pv[j * c + k] * 0.1) * pv[i * c + k]; });
      double worst = 0;
      for (size_t q = 0; q < ex.size(); ++q) worst = std::max(worst, std::abs(ev[q] - ex[q]) / (std::abs(ex[q]) + 1e-300));
      CHECK(worst <= 1e-15);
    }
  }
  // blocks of short rows evaluated as one flat run: operands of mixed element sizes, and a
  // transposed (strided) operand gathered into the run
  for (int64_t c : {2, 3, 4}) {
    auto I = arange<int32_t>(0, 10 * c).reshape({10, c});
    Tensor<float> F = arange<float>(0, 10 * c).reshape({10, c}) * 0.25f;
    auto D = arange<double>(0, 10 * c).reshape({10, c});
    Tensor<double> m = (I.unsqueeze(1) + F.unsqueeze(0)) * D.unsqueeze(1);
    CHECK(m.to_vector() == grid3(10, 10, c, [&](int64_t i, int64_t j, int64_t k) {
            return double(float(i * c + k) + float(j * c + k) * 0.25f) * double(i * c + k);
          }));
    auto Q = arange<double>(0, c * 10).reshape({c, 10});  // Q.t(): [10, c] with strides (1, 10)
    Tensor<double> t = D.unsqueeze(1) - Q.t().unsqueeze(0) * 2.0;
    CHECK(t.to_vector() == grid3(10, 10, c, [&](int64_t i, int64_t j, int64_t k) {
            return double(i * c + k) - double(k * 10 + j) * 2.0;
          }));
  }
  // a broadcast row read as fixed-length runs of its repeated pattern: float and double
  // results, mixed element sizes, every row length dividing the run, more planes than are
  // gathered ahead at once (42), a row broadcast along both dims; and an in-place update
  // whose output is an operand (which must not take the overlapping last run)
  for (int64_t n : {10, 17, 50})
    for (int64_t c : {1, 2, 3, 4, 6}) {
      auto I = arange<int32_t>(0, n * c).reshape({n, c});
      Tensor<float> F = arange<float>(0, n * c).reshape({n, c}) * 0.25f;
      auto D = arange<double>(0, n * c).reshape({n, c});
      Tensor<double> m = (I.unsqueeze(1) + F.unsqueeze(0)) * D.unsqueeze(1) - 0.5;
      CHECK(m.to_vector() == grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) {
              return double(float(i * c + k) + float(j * c + k) * 0.25f) * double(i * c + k) - 0.5;
            }));
      Tensor<float> f = F.unsqueeze(0) * 2.0f - F.unsqueeze(1);
      auto fv = f.to_vector();
      CHECK(std::vector<double>(fv.begin(), fv.end()) == grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) {
              return double(float(j * c + k) * 0.5f - float(i * c + k) * 0.25f);
            }));
      Tensor<double> row = D.slice(0, 0, 1).unsqueeze(0);  // [1, 1, c]: the same row everywhere
      Tensor<double> g = D.unsqueeze(1) - D.unsqueeze(0) + row;
      CHECK(g.to_vector() == grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) { return double(i * c - j * c + k); }));
      Tensor<double> h = zeros<double>({n, n, c}) + D.unsqueeze(0);
      h.add_(D.unsqueeze(1));
      CHECK(h.to_vector() == grid3(n, n, c, [&](int64_t i, int64_t j, int64_t k) { return double(j * c + k + i * c + k); }));
    }
  // long rows whose operands are strided (a transposed view) or broadcast (stride 0) along
  // them (no vectorized row: the element loop), operands of mixed element sizes
  for (int64_t n : {16, 37, 512, 600}) {
    auto A = arange<double>(0, 3 * n).reshape({n, 3});              // A.t(): [3, n], strides (1, 3)
    Tensor<float> B = arange<float>(0, 3).reshape({3, 1}) * 0.75f;  // one value per row
    Tensor<double> r = A.t() * 2.0 - B + A.t();
    auto rv = r.to_vector();
    bool ok = r.sizes() == Shape{3, n};
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t j = 0; j < n; ++j)
        ok = ok && rv[k * n + j] == double(j * 3 + k) * 2.0 - double(float(k) * 0.75f) + double(j * 3 + k);
    CHECK(ok);
  }
  // whole slabs of blocks in one kernel call ([a, b, 6, c]: blocks of 6 short rows, planes
  // along b): a permuted operand gathered anew for every plane, a broadcast one gathered once
  // and reused; small, and large enough to be split between threads in mid-slab
  for (int64_t a : {2, 64})
    for (int64_t c : {2, 3, 4}) {
      const int64_t b = a == 2 ? 5 : 32;
      auto Y = arange<double>(a * 6 * b * c).reshape({a, 6, b, c});  // permuted to [a, b, 6, c]
      auto Z = arange<double>(a * c).reshape({a, 1, 1, c}) * 0.5 + 7.0;
      Tensor<double> w = Y.permute({0, 2, 1, 3}) * 3.0 - Z;
      auto wv = w.to_vector();
      bool ok = w.sizes() == Shape{a, b, 6, c};
      for (int64_t i = 0, q = 0; i < a; ++i)
        for (int64_t j = 0; j < b; ++j)
          for (int64_t r = 0; r < 6; ++r)
            for (int64_t k = 0; k < c; ++k, ++q)
              ok = ok && wv[q] == double(((i * 6 + r) * b + j) * c + k) * 3.0 - (double(i * c + k) * 0.5 + 7.0);
      CHECK(ok);
    }
  // a permuted, sliced input and a transposed output (written along its unit stride)
  auto x = arange<double>(4 * 6 * 5).reshape({4, 6, 5});
  auto xv = x.to_vector();
  Tensor<double> y = x.permute({2, 0, 1}).slice(2, 1, 6, 2) * 2.0 + 1.0;  // [5, 4, 3]
  CHECK(y.to_vector() == grid3(5, 4, 3, [&](int64_t i, int64_t j, int64_t k) { return xv[j * 30 + (1 + 2 * k) * 5 + i] * 2 + 1; }));
  auto out = zeros<double>({3, 4, 5});
  out.permute({2, 1, 0}).copy_(y);  // out[k, j, i] = y[i, j, k]
  CHECK(out.to_vector() == grid3(3, 4, 5, [&](int64_t k, int64_t j, int64_t i) { return xv[j * 30 + (1 + 2 * k) * 5 + i] * 2 + 1; }));
  // a negative-stride-free but non-contiguous output with a broadcast column
  auto big = zeros<double>({6, 10});
  auto col = tensor<double>({1, 2, 3});
  big.slice(0, 0, 6, 2).slice(1, 1, 10, 3).copy_(col.unsqueeze(1) * tensor<double>({10, 20, 30}));
  auto bv = big.to_vector();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 10; ++j) {
      bool hit = i % 2 == 0 && j % 3 == 1;
      CHECK(bv[i * 10 + j] == (hit ? double((i / 2 + 1) * 10 * (j / 3 + 1)) : 0.0));
    }
}

TEST_CASE("pow with small integer and half exponents stays within 2 ulp of std::pow") {
  std::vector<double> xs = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-3, 1e300, -7.25, 1e-160, 3.0e15,
                            std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::denorm_min()};
  for (int i = 0; i < 200; ++i) xs.push_back(std::ldexp(1.0 + i / 200.0, i % 40 - 20) * (i % 3 ? 1 : -1));
  auto x = from_vector<double>(xs, {int64_t(xs.size())});
  for (double e : {-4.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 2.5, -1.5}) {
    auto v = Tensor<double>(pow(x, e)).to_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      double want = std::pow(xs[i], e), got = v[i];
      // +-0.5 are sqrt and 1/sqrt, as in PyTorch 2.15 (checked there): (-inf)^(+-0.5) = nan,
      // (-0)^0.5 = -0, (-0)^-0.5 = -inf
      if (std::abs(e) == 0.5 && xs[i] == -std::numeric_limits<double>::infinity()) want = std::nan("");
      if (e == 0.5 && xs[i] == 0.0) want = xs[i];
      if (e == -0.5 && xs[i] == 0.0) want = 1 / xs[i];
      INFO("x = ", xs[i], ", exponent ", e);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else if (std::isinf(want) || want == 0 || std::abs(want) < std::numeric_limits<double>::min()) {
        CHECK(got == want);
        CHECK(std::signbit(got) == std::signbit(want));
      } else {
        CHECK(std::abs(got - want) <= 2 * std::abs(std::nextafter(want, 2 * want) - want));
      }
    }
  }
  // float and a tensor exponent take the same rule
  auto xf = tensor<float>({1.5f, -2.0f, 0.25f});
  CHECK(Tensor<float>(pow(xf, tensor<float>({-3.0f, 4.0f, 0.5f}))).to_vector() ==
        std::vector<float>{1 / (1.5f * 1.5f * 1.5f), 16.0f, 0.5f});
}
