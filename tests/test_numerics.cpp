// The seed's numerics: PyTorch's range factories bit for bit, saturating integer clamps,
// NaN-ignoring fmin/fmax.
#include <doctest/doctest.h>

#include <cstring>
#include <reel/reel.hpp>
#include <string_view>

#include "fp_contract_probe.hpp"
#include "reference/ranges.hpp"

using namespace reel;

namespace {
template <class T>
uint64_t bits_of(T v) {
  uint64_t r = 0;
  std::memcpy(&r, &v, sizeof(T));  // (little-endian, as the generator reads PyTorch's bytes)
  return r;
}
template <class T>
Tensor<T> make_range(const reel_reference::RangeCase& c) {
  const std::string_view op = c.op;
  if (op == "linspace") return linspace<T>(c.a, c.b, static_cast<int64_t>(c.c));
  if (op == "logspace") return logspace<T>(c.a, c.b, static_cast<int64_t>(c.c), c.base);
  if (c.int_args) return arange<T>(static_cast<int64_t>(c.a), static_cast<int64_t>(c.b), static_cast<int64_t>(c.c));
  return arange<T>(c.a, c.b, c.c);
}
template <class F>
void with_dtype(std::string_view d, F&& f) {
  if (d == "float64") f(double{});
  else if (d == "float32") f(float{});
  else if (d == "float16") f(half{});
  else if (d == "bfloat16") f(bfloat16{});
  else if (d == "int64") f(int64_t{});
  else if (d == "int32") f(int32_t{});
  else if (d == "int16") f(int16_t{});
  else if (d == "int8") f(int8_t{});
  else if (d == "uint8") f(uint8_t{});
  else FAIL("unknown dtype ", d);
}
// Element i of a range as a double, for the messages.
template <class T>
double as_double(T v) {
  return convert<double>(v);
}
}  // namespace

TEST_CASE("linspace, logspace and arange: PyTorch 2.15's values bit for bit (tests/reference/ranges.py)") {
  int64_t failed = 0, elements = 0;
  for (const auto& c : reel_reference::range_cases) {
    with_dtype(c.dtype, [&](auto zero) {
      using T = decltype(zero);
      auto t = make_range<T>(c);
      auto v = t.to_vector();
      uint64_t h = 0xcbf29ce484222325ull;
      for (auto x : v) h = (h ^ bits_of(x)) * 0x100000001b3ull;
      elements += static_cast<int64_t>(v.size());
      bool ok = static_cast<int64_t>(v.size()) == c.n && h == c.fnv;
      for (size_t i = 0; ok && i < c.bits.size(); ++i) ok = bits_of(v[i]) == c.bits[i];
      if (!ok) {
        ++failed;
        size_t i = 0;
        while (i < c.bits.size() && i < v.size() && bits_of(v[i]) == c.bits[i]) ++i;
        MESSAGE(std::string(c.op), "<", std::string(c.dtype), ">(", c.a, ", ", c.b, ", ", c.c, c.int_args ? ", integer arguments" : "", "): ",
                v.size(), " elements (PyTorch ", c.n, ")",
                i < c.bits.size() && i < v.size() ? " first difference at " + std::to_string(i) + ": " +
                                                        std::to_string(as_double(v[i]))
                                                  : std::string(" (hash differs)"));
      }
    });
  }
  CHECK(reel_reference::range_cases.size() > 500);
  CHECK(elements > 1000000);
  CHECK(failed == 0);
}

TEST_CASE("ranges: the issue's examples and edge cases") {
  // float16 linspace(0.1, 0.7, 3): PyTorch's middle element (its endpoints are rounded to half
  // first, the step taken in float op-math)
  CHECK(static_cast<float>(linspace<half>(0.1, 0.7, 3).to_vector()[1]) == 0.400146484375f);
  CHECK(linspace<double>(0, 1, 5).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace<float>(3, 3, 1).to_vector() == std::vector<float>{3});
  CHECK(linspace<float>(0, 1, 0).numel() == 0);
  CHECK_THROWS_AS(linspace<float>(0, 1, -1), value_error);
  CHECK_THROWS_AS(logspace<float>(0, 1, -1), value_error);
  CHECK(linspace<int32_t>(0, 10, 4).to_vector() == std::vector<int32_t>{0, 3, 6, 10});
  CHECK(linspace<int32_t>(0.5, 10.7, 4).to_vector() == std::vector<int32_t>{0, 3, 6, 10});  // endpoints truncated first
  // 64-bit index math of the split formula, far beyond 2^32 elements
  const int64_t n = (int64_t(1) << 33) + 1;
  CHECK(detail::linspace_at<double, false>(0.0, 1.0, n, n - 1) == 1.0);
  CHECK(detail::linspace_at<double, false>(0.0, 1.0, n, int64_t(1) << 32) == 0.5);
  CHECK(detail::linspace_at<double, false>(0.0, 1.0, n, (int64_t(1) << 32) + (int64_t(1) << 31)) == 0.75);
  CHECK(arange<int64_t>(5).to_vector() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange<int64_t>(10, 0, -3).to_vector() == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(arange<uint64_t>(uint64_t(0), uint64_t(3)).to_vector() == std::vector<uint64_t>{0, 1, 2});
  CHECK(arange<double>(0, 1, 0.25).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75});
  // an integer result counts in double and steps by the truncated step (PyTorch 2.15)
  CHECK(arange<int64_t>(0.5, 3.7, 1.0).to_vector() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange<int32_t>(0.0, 1.0, 0.5).to_vector() == std::vector<int32_t>{0, 0});
  CHECK(arange<int8_t>(0.0, 1e6, 1e5).to_vector()[1] == -96);  // wraps
  // an end point that overflows the type raises, as Scalar::to<T>() does in PyTorch
  CHECK_THROWS_AS(linspace<half>(0, 1e6, 3), value_error);
  CHECK_THROWS_AS(linspace<float>(0, 1e39, 3), value_error);
  CHECK_THROWS_AS(linspace<int8_t>(-128.9, 127, 3), value_error);
  CHECK_THROWS_AS(linspace<int32_t>(0, NAN, 3), value_error);
  CHECK_THROWS_AS(logspace<half>(0, 1e6, 3), value_error);
  CHECK(std::isnan(static_cast<float>(linspace<half>(0, INFINITY, 3).to_vector()[0])));
  CHECK(logspace<int32_t>(0, 10, 11).to_vector()[10] == std::numeric_limits<int32_t>::lowest());  // as PyTorch on x86-64
  CHECK_THROWS_AS(arange<float>(0, 1, 0), value_error);
  CHECK_THROWS_AS(arange<float>(1, 0, 1), value_error);
  CHECK_THROWS_AS(arange<float>(0.0, 1.0, NAN), value_error);
  CHECK_THROWS_AS(arange<float>(0.0, INFINITY, 1.0), value_error);
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
