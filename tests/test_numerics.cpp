// The seed's numerics: exact reduced-precision ranges, saturating integer clamps,
// NaN-ignoring fmin/fmax.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <reel/reel.hpp>

#include "fp_contract_probe.hpp"

using namespace reel;

namespace {
// Every finite value of a 16-bit format, sorted, decoded independently of the library:
// half through Eigen's exact half->float, bfloat16 by shifting its bits into a float.
struct Table {
  std::vector<std::pair<double, uint16_t>> v;
};
Table make_table(bool is_half) {
  Table t;
  for (uint32_t b = 0; b < 65536; ++b) {
    double d;
    if (is_half)
      d = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<uint16_t>(b)));
    else
      d = std::bit_cast<float>(b << 16);
    if (std::isfinite(d) && !(d == 0 && std::signbit(d))) t.v.push_back({d, static_cast<uint16_t>(b)});
  }
  std::sort(t.v.begin(), t.v.end());
  return t;
}
// Nearest representable value, ties to the even bit pattern.
double nearest(const Table& t, double x) {
  auto it = std::lower_bound(t.v.begin(), t.v.end(), std::make_pair(x, uint16_t(0)));
  if (it == t.v.begin()) return it->first;
  if (it == t.v.end()) return std::prev(it)->first;
  auto lo = std::prev(it);
  double dl = x - lo->first, dh = it->first - x;
  if (dl < dh) return lo->first;
  if (dh < dl) return it->first;
  return (lo->second & 1) == 0 ? lo->first : it->first;
}
// The exact value start + (end - start) * i / (steps - 1), in long double.
long double closed_form(double start, double end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  long double s = start, e = end;
  return s + (e - s) * static_cast<long double>(i) / static_cast<long double>(steps - 1);
}
// The documented double algorithm (first half from start, second half back from end).
double split_formula(double start, double end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  double step = (end - start) / static_cast<double>(steps - 1);
  return i < steps / 2 ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
}
template <class T>
std::vector<double> as_doubles(const Tensor<T>& t) {
  std::vector<double> r;
  for (auto v : t.to_vector()) r.push_back(static_cast<double>(static_cast<float>(v)));
  return r;
}
}  // namespace

TEST_CASE("linspace<half>(-2, 2, 10) is exact") {
  auto v = as_doubles(linspace<half>(-2, 2, 10));
  std::vector<double> want{-2, -1.5556640625, -1.111328125, -0.66650390625, -0.22216796875,
                           0.22216796875, 0.66650390625, 1.111328125, 1.5556640625, 2};
  CHECK(v == want);
  CHECK(static_cast<double>(static_cast<float>(linspace<half>(0, 1, 11).to_vector()[3])) == 0.300048828125);
}

TEST_CASE("half and bfloat16 linspace equal the double result rounded once, steps 1..2049") {
  const Table th = make_table(true), tb = make_table(false);
  const std::vector<std::pair<double, double>> ranges{{0, 1}, {-2, 2}, {-5.5, 3.25}, {0.1, 0.7}, {1, 1000}, {3, -7}};
  int64_t mismatches = 0, checked = 0, inaccurate = 0;
  for (auto [s, e] : ranges) {
    for (int64_t steps = 1; steps <= 2049; ++steps) {
      auto h = as_doubles(linspace<half>(s, e, steps));
      auto b = as_doubles(linspace<bfloat16>(s, e, steps));
      auto d = linspace<double>(s, e, steps).to_vector();
      REQUIRE(static_cast<int64_t>(h.size()) == steps);
      for (int64_t i = 0; i < steps; ++i) {
        double x = split_formula(s, e, steps, i);
        // the double result is within a few ulp of the exact value (scaled by the range)
        long double exact = closed_form(s, e, steps, i);
        inaccurate += std::abs(static_cast<long double>(x) - exact) > 4e-16L * (std::abs(s) + std::abs(e));
        mismatches += d[i] != x;
        mismatches += h[i] != nearest(th, x);
        mismatches += b[i] != nearest(tb, x);
        checked += 3;
      }
      CHECK(h.front() == nearest(th, s));
      CHECK(h.back() == nearest(th, steps > 1 ? e : s));
    }
  }
  CHECK(checked > 1000000);
  CHECK(mismatches == 0);
  CHECK(inaccurate == 0);
}

TEST_CASE("linspace: float and double, edge cases") {
  CHECK(linspace<double>(0, 1, 5).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace<float>(3, 3, 1).to_vector() == std::vector<float>{3});
  CHECK(linspace<float>(0, 1, 0).numel() == 0);
  CHECK_THROWS_AS(linspace<float>(0, 1, -1), value_error);
  auto d = linspace<double>(-1, 1, 7).to_vector();
  for (int i = 0; i < 7; ++i) CHECK(d[i] == doctest::Approx(-1 + i / 3.0).epsilon(1e-15));
  CHECK(linspace<int32_t>(0, 10, 4).to_vector() == std::vector<int32_t>{0, 3, 6, 10});
  // 64-bit index math of the split formula, far beyond 2^32 elements
  const int64_t n = (int64_t(1) << 33) + 1;
  CHECK(detail::linspace_value<double>(0.0, 1.0, n, n - 1) == 1.0);
  CHECK(detail::linspace_value<double>(0.0, 1.0, n, int64_t(1) << 32) == 0.5);
  CHECK(detail::linspace_value<double>(0.0, 1.0, n, (int64_t(1) << 32) + (int64_t(1) << 31)) == 0.75);
}

TEST_CASE("mul_rn / add_rn round twice even where the compiler contracts a * b + c into an FMA") {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("fma")) {
    MESSAGE("no FMA instructions on this CPU: nothing to contract");
    return;
  }
#endif
  // a * b = 1 + 2^-11 + 2^-24 (exactly, in double): rounded to float the 2^-24 is lost, fused it
  // survives the subtraction of 1.
  const float a = 1.0f + 0x1p-12f, b = 1.0f + 0x1p-12f, c = -1.0f;
  volatile float p = a * b;  // (a store: rounded to float here, never fused)
  const float twice = p + c, once = std::fma(a, b, c);
  REQUIRE(twice != once);
  CHECK(probe_plain_mad(a, b, c) == once);  // the probe's flags do contract
  CHECK(probe_rn_mad(a, b, c) == twice);
  const double ad = 1.0 + 0x1p-27, cd = -1.0;
  volatile double pd = ad * ad;
  CHECK(probe_rn_mad(ad, ad, cd) == pd + cd);
  CHECK(probe_rn_mad(ad, ad, cd) != std::fma(ad, ad, cd));
}

TEST_CASE("logspace and arange in half round once") {
  const Table th = make_table(true);
  auto l = as_doubles(logspace<half>(0, 2, 9));
  for (int i = 0; i < 9; ++i) {
    long double e = static_cast<long double>(i) / 4;
    CHECK(l[i] == nearest(th, static_cast<double>(powl(10.0L, e))));  // no ties near these values
  }
  CHECK(as_doubles(logspace<bfloat16>(0, 3, 4, 2.0)) == std::vector<double>{1, 2, 4, 8});
  auto a = as_doubles(arange<half>(0.0, 3.0, 0.1));
  REQUIRE(a.size() == 30);
  for (int i = 0; i < 30; ++i) CHECK(a[i] == nearest(th, 0.1 * i));  // start + i * step in double, rounded once
  // above 2048 half cannot count by one; each value is still the nearest to the exact one
  auto big = as_doubles(arange<half>(2040, 2060));
  for (int i = 0; i < 20; ++i) CHECK(big[i] == nearest(th, 2040.0 + i));
  CHECK(arange<int64_t>(5).to_vector() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange<int64_t>(10, 0, -3).to_vector() == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(arange<uint64_t>(uint64_t(0), uint64_t(3)).to_vector() == std::vector<uint64_t>{0, 1, 2});
  CHECK(arange<double>(0, 1, 0.25).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK_THROWS_AS(arange<float>(0, 1, 0), value_error);
  CHECK_THROWS_AS(arange<float>(1, 0, 1), value_error);
}

TEST_CASE_TEMPLATE("integer clamp saturates out-of-range bounds", T, int8_t, int16_t, int32_t, int64_t, uint8_t,
                   uint16_t, uint32_t, uint64_t) {
  using L = std::numeric_limits<T>;
  auto x = from_vector<T>({L::lowest(), T(0), T(10), L::max()});
  // bounds beyond the type's range on either side leave values unchanged
  CHECK(Tensor<T>(clamp(x, -1e30, 1e30)).to_vector() == x.to_vector());
  CHECK(Tensor<T>(clamp_min(x, std::numeric_limits<int64_t>::lowest())).to_vector() == x.to_vector());
  CHECK(Tensor<T>(clamp_max(x, std::numeric_limits<uint64_t>::max())).to_vector() == x.to_vector());
  // in-range bounds clamp
  CHECK(Tensor<T>(clamp(x, 0, 5)).to_vector() == std::vector<T>{T(0), T(0), T(5), T(5)});
  // min > max: every element becomes max
  CHECK(Tensor<T>(clamp(x, 7, 3)).to_vector() == std::vector<T>(4, T(3)));
  // maximum/minimum
  auto y = from_vector<T>({T(1), T(1), T(1), T(1)});
  CHECK(Tensor<T>(maximum(x, y)).to_vector() == std::vector<T>{T(1), T(1), T(10), L::max()});
  CHECK(Tensor<T>(minimum(x, y)).to_vector() == std::vector<T>{L::lowest(), T(0), T(1), T(1)});
}

TEST_CASE("the seed's clamp examples") {
  auto u = tensor<uint8_t>({0, 10, 255});
  CHECK(Tensor<uint8_t>(clamp(u, -255, std::nullopt)).to_vector() == u.to_vector());
  CHECK(Tensor<uint8_t>(clamp_min(u, -255)).to_vector() == u.to_vector());
  CHECK(Tensor<uint8_t>(clamp_min(u, 256)).to_vector() == std::vector<uint8_t>{255, 255, 255});
  auto i8 = tensor<int8_t>({-128, 0, 127});
  CHECK(Tensor<int8_t>(clamp(i8, std::nullopt, 1000)).to_vector() == i8.to_vector());
  CHECK(Tensor<int8_t>(clamp(i8, std::optional<double>(-1000.0), std::optional<double>())).to_vector() == i8.to_vector());
  // uint64 near 2^64: no rounding through double when the bound is an integer
  const uint64_t big = std::numeric_limits<uint64_t>::max();
  auto v = from_vector<uint64_t>({big, big - 1, big - 2, 0});
  CHECK(Tensor<uint64_t>(clamp(v, std::nullopt, big - 1)).to_vector() == std::vector<uint64_t>{big - 1, big - 1, big - 2, 0});
  CHECK(Tensor<uint64_t>(clamp_min(v, big - 1)).to_vector() == std::vector<uint64_t>{big, big - 1, big - 1, big - 1});
  CHECK(Tensor<uint64_t>(clamp(v, -5, std::nullopt)).to_vector() == v.to_vector());
  // a double bound of 2^64 saturates rather than wrapping to 0
  CHECK(Tensor<uint64_t>(clamp_max(v, 18446744073709551616.0)).to_vector() == v.to_vector());
  const int64_t imin = std::numeric_limits<int64_t>::lowest();
  auto w = from_vector<int64_t>({imin, imin + 1, 0});
  CHECK(Tensor<int64_t>(clamp_min(w, imin + 1)).to_vector() == std::vector<int64_t>{imin + 1, imin + 1, 0});
  CHECK(Tensor<int64_t>(clamp(w, std::nullopt, uint64_t(1) << 63)).to_vector() == w.to_vector());
  // fractional bounds on integers stay inside the bounds
  CHECK(Tensor<int32_t>(clamp(tensor<int32_t>({0, 5, 10}), 2.5, 7.5)).to_vector() == std::vector<int32_t>{3, 5, 7});
  CHECK_THROWS_AS(clamp(u, std::nullopt, std::nullopt), value_error);
  CHECK_THROWS_AS(clamp(u, NAN, std::nullopt), value_error);
}

TEST_CASE("hardtanh saturates like clamp") {
  CHECK(Tensor<uint8_t>(nn::functional::hardtanh(tensor<uint8_t>({0, 5, 200}))).to_vector() == std::vector<uint8_t>{0, 1, 1});
  CHECK(Tensor<int8_t>(nn::functional::hardtanh(tensor<int8_t>({-100, 0, 100}), -1000, 1000)).to_vector() ==
        std::vector<int8_t>{-100, 0, 100});
  CHECK(Tensor<float>(nn::functional::hardtanh(tensor<float>({-3, 0.5, 3}))).to_vector() == std::vector<float>{-1, 0.5, 1});
}

TEST_CASE("float clamp propagates NaN and accepts infinite bounds") {
  auto x = tensor<double>({-2, NAN, 0.5, 3});
  auto r = Tensor<double>(clamp(x, -1, 1)).to_vector();
  CHECK(r[0] == -1);
  CHECK(std::isnan(r[1]));
  CHECK(r[2] == 0.5);
  CHECK(r[3] == 1);
  auto h = Tensor<half>(clamp(tensor<half>({-70000.0, 1.0}), -1e10, std::nullopt)).to_vector();
  CHECK(static_cast<float>(h[1]) == 1.0f);
  CHECK(Tensor<float>(clamp(tensor<float>({1, 5}), 3, 2)).to_vector() == std::vector<float>{2, 2});
}

TEST_CASE("fmin/fmax ignore NaN; maximum/minimum propagate it") {
  auto x = tensor<double>({1, NAN, 3, NAN, 2});
  auto y = tensor<double>({2, 2, NAN, NAN, 2});
  auto fmn = Tensor<double>(fmin(x, y)).to_vector();
  auto fmx = Tensor<double>(fmax(x, y)).to_vector();
  CHECK(fmn[0] == 1);
  CHECK(fmn[1] == 2);
  CHECK(fmn[2] == 3);
  CHECK(std::isnan(fmn[3]));
  CHECK(fmx[0] == 2);
  CHECK(fmx[1] == 2);
  CHECK(fmx[2] == 3);
  CHECK(std::isnan(fmx[3]));
  auto mx = Tensor<double>(maximum(x, y)).to_vector();
  CHECK(mx[0] == 2);
  CHECK(std::isnan(mx[1]));
  CHECK(std::isnan(mx[2]));
  // float, large enough for the vectorized path
  auto xf = full<float>({1000}, NAN);
  auto yf = full<float>({1000}, 4);
  CHECK(Tensor<float>(fmin(xf, yf)).to_vector() == std::vector<float>(1000, 4));
  CHECK(Tensor<float>(fmax(yf, xf)).to_vector() == std::vector<float>(1000, 4));
  auto m = Tensor<float>(minimum(xf, yf)).to_vector();
  CHECK(std::all_of(m.begin(), m.end(), [](float v) { return std::isnan(v); }));
}
