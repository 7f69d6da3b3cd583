// Reductions, scans, sorting and histograms against plain loops and closed forms.
#include <doctest/doctest.h>

#include <numeric>
#include <sstream>
#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("sum / mean / prod over all elements and over dims") {
  auto a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(a).item() == 21);
  CHECK(sum(a).dim() == 0);
  CHECK(sum(a, {0}).to_vector() == std::vector<double>{5, 7, 9});
  CHECK(sum(a, {1}).to_vector() == std::vector<double>{6, 15});
  CHECK(sum(a, {-1}, true).sizes() == Shape{2, 1});
  CHECK(sum(a, {0, 1}).item() == 21);
  CHECK(mean(a, {0}).to_vector() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(prod(a, {1}).to_vector() == std::vector<double>{6, 120});
  CHECK(a.sum().item() == 21);
  CHECK((a * a).sum().item() == 91);
  CHECK((a * a).mean().item() == doctest::Approx(91.0 / 6));
  // integer and bool sums return int64
  static_assert(std::is_same_v<decltype(sum(tensor<int32_t>({1})))::value_type, int64_t>);
  CHECK(sum(tensor<uint8_t>({200, 200})).item() == 400);
  CHECK(sum(tensor<bool>({true, true, false})).item() == 2);
  CHECK(sum(tensor<half>({1.0, 2.0})).item() == half(3.0f));
  CHECK(sum(zeros<float>({0})).item() == 0);
  CHECK(std::isnan(mean(zeros<float>({0})).item()));
  CHECK_THROWS_AS(sum(a, {2}), index_error);
  CHECK_THROWS_AS(sum(a, {1, 1}), value_error);
  // over a non-contiguous input and a 3-d middle dim
  auto b = arange<int64_t>(24).view({2, 3, 4});
  auto s1 = sum(b, {1}).to_vector();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) CHECK(s1[i * 4 + k] == (i * 12 + k) * 3 + 4 + 8);
  CHECK(sum(b.transpose(0, 2), {0}).sizes() == Shape{3, 2});
}

TEST_CASE("large float sums are accurate (blocked, double-accumulated)") {
  const int64_t n = 10'000'000;
  auto x = full<float>({n}, 0.1f);
  double want = static_cast<double>(0.1f) * n;
  CHECK(sum(x).item() == doctest::Approx(want).epsilon(1e-6));
  auto y = arange<double>(n);
  CHECK(sum(y).item() == static_cast<double>(n) * (n - 1) / 2);
}

TEST_CASE("amax / amin / max / min / argmax / argmin") {
  auto a = from_vector<float>({3, 7, 7, -1, 0, 2}, {2, 3});
  CHECK(amax(a).item() == 7);
  CHECK(amin(a).item() == -1);
  CHECK(amax(a, {1}).to_vector() == std::vector<float>{7, 2});
  CHECK(amin(a, {0}).to_vector() == std::vector<float>{-1, 0, 2});
  CHECK(max(a).item() == 7);
  CHECK(argmax(a).item() == 1);  // first of the ties
  CHECK(argmax(a, 1).to_vector() == std::vector<int64_t>{1, 2});
  CHECK(argmin(a, 0, true).sizes() == Shape{1, 3});
  auto [v, i] = max(a, 1);
  CHECK(v.to_vector() == std::vector<float>{7, 2});
  CHECK(i.to_vector() == std::vector<int64_t>{1, 2});
  auto n = tensor<float>({1, NAN, 3});
  CHECK(std::isnan(amax(n).item()));
  CHECK(argmax(n).item() == 1);
  CHECK(argmin(n).item() == 1);
  CHECK(amax(tensor<int32_t>({-5, 4, 2})).item() == 4);
  CHECK_THROWS_AS(amax(zeros<float>({0})), index_error);
}

TEST_CASE("logsumexp, norm") {
  auto x = tensor<double>({{1, 2, 3}, {-INFINITY, -INFINITY, -INFINITY}});
  auto l = logsumexp(x, 1).to_vector();
  CHECK(l[0] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  CHECK(l[1] == -INFINITY);
  auto big = tensor<double>({1000, 1000});
  CHECK(logsumexp(big, 0).item() == doctest::Approx(1000 + std::log(2.0)));
  auto v = tensor<double>({3, -4});
  CHECK(norm(v).item() == doctest::Approx(5));
  CHECK(norm(v, 1).item() == 7);
  CHECK(norm(v, INFINITY).item() == 4);
  CHECK(norm(v, -INFINITY).item() == 3);
  CHECK(norm(v, 0).item() == 2);
  CHECK(norm(v, 3).item() == doctest::Approx(std::cbrt(27.0 + 64.0)));
  using C = std::complex<double>;
  CHECK(norm(from_vector<C>({C(3, 4)})).item() == doctest::Approx(5));
}

TEST_CASE("cumsum") {
  auto a = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumsum(a, 1).to_vector() == std::vector<int64_t>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(a, 0).to_vector() == std::vector<int64_t>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(tensor<double>({0.5, 0.25}), 0).to_vector() == std::vector<double>{0.5, 0.75});
}

TEST_CASE("sort is stable, NaN sorts last ascending and first descending") {
  auto x = tensor<double>({3, NAN, 1, 3, 2});
  auto [v, i] = sort(x);
  auto vv = v.to_vector();
  CHECK(vv[0] == 1);
  CHECK(vv[3] == 3);
  CHECK(std::isnan(vv[4]));
  CHECK(i.to_vector() == std::vector<int64_t>{2, 4, 0, 3, 1});
  auto d = sort(x, 0, true);
  CHECK(std::isnan(d.values.to_vector()[0]));
  CHECK(d.indices.to_vector() == std::vector<int64_t>{1, 0, 3, 4, 2});
  auto m = from_vector<int32_t>({3, 1, 2, 9, 8, 7}, {2, 3});
  CHECK(sort(m, 0, true).values.to_vector() == std::vector<int32_t>{9, 8, 7, 3, 1, 2});
  CHECK(sort(m, 1).values.to_vector() == std::vector<int32_t>{1, 2, 3, 7, 8, 9});
}

TEST_CASE("topk") {
  auto x = tensor<float>({5, 1, 4, 2, 3});
  auto t = topk(x, 2);
  CHECK(t.values.to_vector() == std::vector<float>{5, 4});
  CHECK(t.indices.to_vector() == std::vector<int64_t>{0, 2});
  CHECK(topk(x, 2, -1, false).values.to_vector() == std::vector<float>{1, 2});
  auto m = from_vector<float>({1, 9, 5, 7, 3, 8}, {2, 3});
  CHECK(topk(m, 1, 0).values.to_vector() == std::vector<float>{7, 9, 8});
  CHECK_THROWS_AS(topk(x, 6), index_error);
}

TEST_CASE("histc") {
  auto x = tensor<float>({1, 2, 1, 4, 2.5, 10, -1});
  auto h = histc(x, 4, 0, 4);
  CHECK(h.to_vector() == std::vector<float>{0, 2, 2, 1});  // 4 lands in the last bin, 10 and -1 ignored
  auto out = empty<float>({3});
  histc(tensor<float>({1, 2, 3}), 3, 0, 0, out);  // min == max: the data's range
  CHECK(out.to_vector() == std::vector<float>{1, 1, 1});
  CHECK(histc(tensor<double>({5, 5}), 2, 0, 0).to_vector() == std::vector<double>{0, 2});
  CHECK_THROWS_AS(histc(x, 0, 0, 1), value_error);
  CHECK_THROWS_AS(histc(x, 2, 1, 0), value_error);
  CHECK_THROWS_AS(histc(x, 4, 0, 4, out), value_error);  // out has the wrong shape
}

// sum over `red` dims of a [4, 5, 3] tensor given by value(i, j, k), as a plain loop
template <class T, class F>
static std::vector<T> naive_sum(const std::vector<bool>& red, F value) {
  int64_t n[3] = {4, 5, 3};
  std::vector<T> out;
  for (int64_t i = 0; i < (red[0] ? 1 : n[0]); ++i)
    for (int64_t j = 0; j < (red[1] ? 1 : n[1]); ++j)
      for (int64_t k = 0; k < (red[2] ? 1 : n[2]); ++k) {
        T acc{};
        for (int64_t a = 0; a < (red[0] ? n[0] : 1); ++a)
          for (int64_t b = 0; b < (red[1] ? n[1] : 1); ++b)
            for (int64_t c = 0; c < (red[2] ? n[2] : 1); ++c) acc += value(red[0] ? a : i, red[1] ? b : j, red[2] ? c : k);
        out.push_back(acc);
      }
  return out;
}

TEST_CASE_TEMPLATE("sum and mean over any dims of small strided tensors (read in place)", T, float, double,
                   std::complex<double>) {
  // contiguous, permuted and sliced layouts of the same logical [4, 5, 3] values
  auto base = arange<double>(4 * 5 * 6).reshape({4, 5, 6});
  std::vector<Tensor<T>> layouts;
  auto val = [](int64_t i, int64_t j, int64_t k) { return T(double(i * 30 + j * 6 + 2 * k + 1) * 0.25); };
  Tensor<T> full = (base.to<T>() * T(0.25));
  layouts.push_back(full.slice(2, 1, 6, 2));                              // strided last dim
  layouts.push_back(full.slice(2, 1, 6, 2).contiguous());                 // contiguous
  layouts.push_back(full.slice(2, 1, 6, 2).permute({2, 0, 1}).contiguous().permute({1, 2, 0}));  // dim 2 outermost
  for (const auto& x : layouts) {
    for (int mask = 1; mask < 8; ++mask) {
      std::vector<bool> red = {bool(mask & 1), bool(mask & 2), bool(mask & 4)};
      Shape dims;
      int64_t cnt = 1;
      for (int d = 0; d < 3; ++d)
        if (red[d]) {
          dims.push_back(d);
          cnt *= x.size(d);
        }
      auto want = naive_sum<T>(red, val);
      auto got = sum(x, dims).contiguous().to_vector();
      auto got_mean = mean(x, dims).contiguous().to_vector();
      REQUIRE(got.size() == want.size());
      for (size_t q = 0; q < want.size(); ++q) {
        INFO("mask ", mask, " element ", q);
        CHECK(std::abs(got[q] - want[q]) <= 1e-6 * std::abs(want[q]));
        CHECK(std::abs(got_mean[q] - want[q] / T(double(cnt))) <= 1e-6 * std::abs(want[q] / T(double(cnt))));
      }
      CHECK(sum(x, dims, true).dim() == 3);
    }
  }
}

TEST_CASE("sum and mean over a short trailing dim of a contiguous tensor (each output written once)") {
  for (int64_t w : {2, 3, 4}) {
    INFO("w ", w);
    Tensor<double> x = arange<double>(2 * 7 * w).reshape({2, 7, w}) * 0.75 - 9.0;
    auto xv = x.to_vector();
    auto s = sum(x, Shape{2}).to_vector(), m = mean(x, Shape{-1}).to_vector();
    auto sf = sum(x.to<float>(), Shape{2}).to_vector();
    REQUIRE(s.size() == 14);
    for (size_t r = 0; r < 14; ++r) {
      double want = 0;
      for (int64_t j = 0; j < w; ++j) want += xv[r * w + j];
      CHECK(s[r] == want);
      CHECK(m[r] == doctest::Approx(want / double(w)).epsilon(1e-15));
      CHECK(sf[r] == float(want));
    }
    // float accumulates in double: 1e8 + 1 - 1e8 is 1 (float accumulation would give 0)
    std::vector<float> v(static_cast<size_t>(w), 0.0f);
    v[0] = 1e8f;
    v[1] = 1.0f;
    if (w > 2) v[2] = -1e8f; else v[0] = 0.0f;
    v.insert(v.end(), v.begin(), v.end());  // two rows (one row takes the full-sum path)
    CHECK(sum(from_vector<float>(v, {2, w}), Shape{1}).to_vector() == std::vector<float>{1.0f, 1.0f});
    // a sum of negative zeros is +0, as in PyTorch
    auto z = sum(full<double>({3, w}, -0.0), Shape{1}).to_vector();
    for (double q : z) CHECK(!std::signbit(q));
  }
}

TEST_CASE("large float sums with a kept dim 0 (threads split dim 0) accumulate in double") {
  const int64_t n = int64_t(1) << 21;
  auto x = full<float>({2, n}, 0.1f);
  const double want = static_cast<double>(n) * static_cast<double>(0.1f);
  for (float v : sum(x, {1}).to_vector()) CHECK(std::abs(v - want) <= 1e-6 * want);
  auto y = full<float>({4, 3, n / 8}, 0.1f);  // a reduced middle dim too
  for (float v : sum(y, {1, 2}).to_vector()) CHECK(std::abs(v - 3 * want / 8) <= 1e-6 * want);
  for (float v : mean(y, {2}).to_vector()) CHECK(std::abs(v - 0.1f) <= 1e-7);
}

TEST_CASE("large sums over leading or middle dims read in place (no permuted copy), with the right values") {
  Generator gen(23);
  // a bias gradient's sum over the batch, a transposed input, a middle dim, and a mean
  auto x = randn<double>({1024, 64}, gen), y = randn<double>({64, 700}, gen).t(), z = randn<double>({40, 30, 50}, gen);
  auto xv = x.to_vector(), yv = y.contiguous().to_vector(), zv = z.to_vector();
  std::vector<double> sx(64, 0.0), sy(700, 0.0), sz(40 * 50, 0.0);
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t j = 0; j < 64; ++j) sx[j] += xv[i * 64 + j];
  for (int64_t i = 0; i < 700; ++i)
    for (int64_t j = 0; j < 64; ++j) sy[i] += yv[i * 64 + j];
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t j = 0; j < 30; ++j)
      for (int64_t k = 0; k < 50; ++k) sz[i * 50 + k] += zv[(i * 30 + j) * 50 + k];
  auto check = [](const std::vector<double>& got, const std::vector<double>& want, double div) {
    REQUIRE(got.size() == want.size());
    for (size_t q = 0; q < want.size(); ++q) CHECK(got[q] == doctest::Approx(want[q] / div).epsilon(1e-12));
  };
  check(sum(x, {0}).to_vector(), sx, 1);
  check(mean(x, {0}).to_vector(), sx, 1024);
  check(sum(y, {1}).to_vector(), sy, 1);
  check(sum(z, {1}).contiguous().to_vector(), sz, 1);
  // float accumulates in double: the sums of the float values to double precision
  auto xf = x.to<float>();
  auto xfv = xf.to<double>().to_vector();
  std::vector<double> sf(64, 0.0);
  for (int64_t i = 0; i < 1024; ++i)
    for (int64_t j = 0; j < 64; ++j) sf[j] += xfv[i * 64 + j];
  auto got = sum(xf, {0}).to_vector();
  for (size_t q = 0; q < 64; ++q) CHECK(got[q] == static_cast<float>(sf[q]));
}

TEST_CASE("cat and stack") {
  auto a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  auto b = from_vector<float>({5, 6}, {1, 2});
  CHECK(cat({a, b}, 0).to_vector() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(cat({a, a}, 1).to_vector() == std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4});
  std::vector<Tensor<float>> v{a, empty<float>({0}), a};
  CHECK(cat(v, -1).sizes() == Shape{2, 4});
  CHECK(cat(std::span<const Tensor<float>>(v), 0).sizes() == Shape{4, 2});
  CHECK(stack({a, a}, 0).sizes() == Shape{2, 2, 2});
  CHECK(stack({a, a}, 2).to_vector() == std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4});
  CHECK_THROWS_AS(cat({a, b}, 1), value_error);
  CHECK_THROWS_AS(stack({a, b}, 0), value_error);
}

TEST_CASE("reduced-precision element types reduce in float and print") {
  auto b = tensor<bfloat16>({1.0, 2.0, 3.5});
  CHECK(static_cast<float>(sum(b).item()) == 6.5f);
  CHECK(static_cast<float>(amax(b).item()) == 3.5f);
  CHECK(argmin(b).item() == 0);
  auto f8 = tensor<float>({0.5, 1.5, -2}).to<float8_e4m3fn>();
  CHECK(static_cast<float>(sum(f8).item()) == 0.0f);
  CHECK(static_cast<float>(amin(f8).item()) == -2.0f);
  std::ostringstream os;
  os << f8;
  CHECK(os.str() == "tensor([ 0.5000,  1.5000, -2.0000], dtype=torch.float8_e4m3fn)");
}

TEST_CASE("prod of integer tensors: int64 result, wrapping modulo 2^64 (PyTorch)") {
  static_assert(std::is_same_v<decltype(prod(tensor<int32_t>({1})))::value_type, int64_t>);
  static_assert(std::is_same_v<decltype(prod(tensor<bool>({true})))::value_type, int64_t>);
  CHECK(prod(tensor<int32_t>({100000, 100000, 100000})).item() == 1000000000000000LL);
  // 2^31 * 2^31 * 3 = 3 * 2^62 = 2^63 + 2^62, which wraps to -2^62
  CHECK(prod(tensor<int64_t>({int64_t(1) << 31, int64_t(1) << 31, 3})).item() == -(int64_t(1) << 62));
  CHECK(prod(from_vector<uint8_t>({2, 3, 4, 5}, {2, 2}), {1}).to_vector() == std::vector<int64_t>{6, 20});
  CHECK(prod(tensor<bool>({true, false})).item() == 0);
}

TEST_CASE_TEMPLATE("sums and means of expressions are reduced as they are evaluated, with the values of the "
                   "materialized reduction", T, float, double, std::complex<double>) {
  Generator gen(11);
  // sum and mean of e over each of `dims_list`, with and without keepdim: the shapes and
  // values of the same reductions of e materialized
  auto same_as_materialized = [](const auto& e, std::initializer_list<Shape> dims_list) {
    Tensor<T> m = e;
    for (const Shape& dims : dims_list)
      for (bool keep : {false, true}) {
        INFO("dims ", dims.size() ? dims[0] : -9, " keepdim ", keep);
        auto s = sum(e, dims, keep), sm = sum(m, dims, keep);
        CHECK(s.sizes() == sm.sizes());
        CHECK(s.to_vector() == sm.to_vector());
        auto mu = mean(e, dims, keep), mm = mean(m, dims, keep);
        CHECK(mu.sizes() == mm.sizes());
        CHECK(mu.to_vector() == mm.to_vector());
      }
  };
  // trailing runs of 1 to 5 (short loops), 20 and 700 (blocked sums); the last dim too long
  // for a tile (the materialized path); broadcast operands (a [n, n, w] pair difference)
  for (int64_t w : {1, 2, 3, 4, 5, 20, 700, 2100}) {
    INFO("w ", w);
    const int64_t n = w > 100 ? 3 : 24;
    Tensor<T> a = randn<T>({n, 1, w}, gen), b = randn<T>({1, n, w}, gen);
    same_as_materialized((a - b) * (a - b) + 0.5,
                         {Shape{2}, Shape{-1}, Shape{1, 2}, Shape{}, Shape{0, 1, 2}, Shape{0}, Shape{1}});
  }
  // two trailing dims of 2 reduced (4 values per output), with operands broadcast along the
  // kept dims, transposed within the reduced dims, and broadcast along one reduced dim
  Tensor<T> c = randn<T>({6, 2, 2}, gen), r = randn<T>({1, 2, 2}, gen), h = randn<T>({6, 1, 2}, gen);
  const auto last_two = {Shape{1, 2}, Shape{2}, Shape{-1, -2}};
  same_as_materialized(c * r - 1.0, last_two);
  same_as_materialized(c.transpose(1, 2) * r, last_two);
  same_as_materialized(c * h, last_two);
  same_as_materialized(c.transpose(1, 2) - h + r.expand({6, 2, 2}).transpose(1, 2), last_two);
  // several tiles of a full sum, and a 0-d expression
  Tensor<T> big = randn<T>({5000}, gen);
  CHECK(sum(big * 2.0 - 1.0).item() == sum(Tensor<T>(big * 2.0 - 1.0)).item());
  CHECK(mean(big * big).item() == mean(Tensor<T>(big * big)).item());
  Tensor<T> one = full<T>({}, T(3));
  CHECK(sum(one * one).item() == T(9));
  CHECK(sum(one * one).dim() == 0);
}

TEST_CASE("a fused sum of an expression: closed forms, no materialized operand, gradients, no_grad, compile") {
  // short float runs accumulate in double (1e8 + 1 - 1e8 = 1), and a sum of -0.0 is +0.0, as
  // when materialized
  auto v = from_vector<float>({1e8f, 1.0f, -1e8f, 1e8f, 1.0f, -1e8f}, {2, 3});
  CHECK(sum(v * 1.0f, Shape{1}).to_vector() == std::vector<float>{1.0f, 1.0f});
  auto z = sum(full<double>({4, 3}, 0.0) * -1.0, Shape{1}).to_vector();
  for (double q : z) CHECK((q == 0 && !std::signbit(q)));
  CHECK(!std::signbit(sum(full<double>({40}, 0.0) * -1.0).item()));
  // sum over xyz of the squared pair differences: |x_i - x_j|^2, from a closed form
  Tensor<double> x = from_vector<double>({0, 0, 0, 1, 2, 2, -1, 0, 3}, {3, 3});
  auto d = x.unsqueeze(1) - x.unsqueeze(0);
  CHECK(sum(d * d, Shape{2}).to_vector() == std::vector<double>{0, 9, 10, 9, 0, 9, 10, 9, 0});
  CHECK(mean(d * d).item() == doctest::Approx(56.0 / 27.0).epsilon(1e-15));
  // only the result is allocated: a [60, 60, 3] expression (86.4 kB) summed over xyz
  Generator gen(3);
  Tensor<double> p = randn<double>({60, 3}, gen);
  {
    auto pd = p.unsqueeze(1) - p.unsqueeze(0);
    const int64_t base = memory_allocated();
    reset_peak_memory_stats();
    auto r2 = sum(pd * pd, Shape{2});
    CHECK(max_memory_allocated() - base < 60 * 60 * 3 * 8);
    CHECK(r2.to_vector() == sum(Tensor<double>(pd * pd), Shape{2}).to_vector());
  }
  // an operand that needs a gradient: recorded (materialized), the gradient as for a tensor
  Tensor<double> q = p.detach().requires_grad_(true);
  auto e = sum(square(q.unsqueeze(1) - q.unsqueeze(0)));
  e.backward();
  // d/dx_i sum_{a,b} |x_a - x_b|^2 = 4 sum_b (x_i - x_b) = 4 (n x_i - sum_b x_b)
  Tensor<double> want = 4.0 * (60.0 * p - sum(p, Shape{0}, true));
  CHECK(max(abs(q.grad() - want)).item() < 1e-11);
  {
    autograd::no_grad g;  // nothing to record: fused
    CHECK(sum(square(q.unsqueeze(1) - q.unsqueeze(0))).item() == doctest::Approx(e.item()).epsilon(1e-14));
  }
  // captured by compile and replayed on new values
  auto f = [](const Tensor<double>& y) { return sum(square(y.unsqueeze(1) - y.unsqueeze(0)), Shape{2}); };
  auto fc = autograd::compile(f);
  CHECK(fc(p).to_vector() == f(p).to_vector());
  Tensor<double> p2 = p * 2.0 + 1.0;
  CHECK(fc(p2).to_vector() == f(p2).to_vector());
}
