// Expected values come from closed-form decodes written here, from Eigen's own
// half/bfloat16 -> float decode, and from the hardware double -> float
// conversion; never from the code under test.
#include <doctest/doctest.h>

#include <reel/core/float8.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// sign * 2^(e-bias) * (1 + m/2^M), subnormals sign * 2^(1-bias) * (m/2^M).
double closed_form_decode(unsigned b, int E, int M, bool fn_nan) {
  const int emax_field = (1 << E) - 1;
  const bool neg = ((b >> (E + M)) & 1u) != 0;
  const int e = static_cast<int>((b >> M) & static_cast<unsigned>(emax_field));
  const int m = static_cast<int>(b & ((1u << M) - 1));
  const int bias = (1 << (E - 1)) - 1;
  if (fn_nan) {
    if (e == emax_field && m == (1 << M) - 1) return kNaN;
  } else if (e == emax_field) {
    if (m != 0) return kNaN;
    return neg ? -kInf : kInf;
  }
  const double frac = static_cast<double>(m) / static_cast<double>(1 << M);
  const double mag = e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, e - bias);
  return neg ? -mag : mag;
}

// Nearest-value rounding by search over a table of the non-negative finite
// values of a format, in increasing order of code.
struct RefFormat {
  std::vector<double> value;   // value[i] is the value of code codes[i]
  std::vector<unsigned> codes;
  double beyond = 0;           // where the next code would be with an unbounded exponent
  unsigned beyond_code = 0;    // its (virtual) code, for the ties-to-even parity
  unsigned sign_bit = 0;
  unsigned inf_code = 0;       // 0: no infinity
  unsigned nan_code = 0;

  // Returns the expected code; overflow -> inf, NaN, or max when saturating.
  unsigned round(double d, bool saturate) const {
    const unsigned sign = std::signbit(d) ? sign_bit : 0u;
    if (std::isnan(d)) return sign | nan_code;
    const double a = std::fabs(d);
    unsigned code = 0;
    bool overflow = false;
    if (a >= beyond) {
      overflow = true;
    } else {
      const auto it = std::upper_bound(value.begin(), value.end(), a);
      const std::size_t hi = static_cast<std::size_t>(it - value.begin());  // first value > a
      const std::size_t lo = hi - 1;                                        // value[0] == 0 <= a
      if (value[lo] == a) {
        code = codes[lo];
      } else {
        const double hv = hi < value.size() ? value[hi] : beyond;
        const unsigned hc = hi < value.size() ? codes[hi] : beyond_code;
        const double mid = (value[lo] + hv) / 2;  // exact: few significant bits
        if (a < mid) code = codes[lo];
        else if (a > mid) code = hc;
        else code = (codes[lo] & 1u) == 0 ? codes[lo] : hc;
        overflow = hi == value.size() && code == hc;
      }
    }
    if (overflow) {
      if (saturate) return sign | codes.back();
      return sign | (inf_code != 0 ? inf_code : nan_code);
    }
    return sign | code;
  }
};

template <class Decode>
RefFormat make_ref(int total_bits, Decode decode, unsigned inf_code, unsigned nan_code) {
  RefFormat r;
  r.sign_bit = 1u << (total_bits - 1);
  r.inf_code = inf_code;
  r.nan_code = nan_code;
  for (unsigned c = 0; c < r.sign_bit; ++c) {
    const double v = decode(c);
    if (!std::isfinite(v)) break;
    r.value.push_back(v);
    r.codes.push_back(c);
  }
  const std::size_t n = r.value.size();
  r.beyond = r.value[n - 1] + (r.value[n - 1] - r.value[n - 2]);
  r.beyond_code = r.codes[n - 1] + 1;
  return r;
}

const RefFormat& ref_e4m3fn() {
  static const RefFormat r =
      make_ref(8, [](unsigned c) { return closed_form_decode(c, 4, 3, true); }, 0u, 0x7Fu);
  return r;
}
const RefFormat& ref_e5m2() {
  static const RefFormat r =
      make_ref(8, [](unsigned c) { return closed_form_decode(c, 5, 2, false); }, 0x7Cu, 0x7Eu);
  return r;
}
double eigen_half_decode(unsigned c) {
  return static_cast<double>(static_cast<float>(
      Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(c))));
}
double bf16_decode(unsigned c) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(c) << 16));
}
const RefFormat& ref_half() {
  static const RefFormat r = make_ref(16, eigen_half_decode, 0x7C00u, 0x7E00u);
  return r;
}
const RefFormat& ref_bf16() {
  static const RefFormat r = make_ref(16, bf16_decode, 0x7F80u, 0x7FC0u);
  return r;
}

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Random doubles whose binary exponent is uniform in [lo, hi], random sign and
// all 52 mantissa bits random, so ties and near-ties are hit only rarely; the
// engineered tie cases are tested separately.
std::vector<double> random_doubles(int lo, int hi, int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exp_dist(lo, hi);
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const std::uint64_t mant = rng() & ((std::uint64_t{1} << 52) - 1);
    double d = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -52), exp_dist(rng));
    if (rng() & 1) d = -d;
    out.push_back(d);
  }
  return out;
}

// Values that sit exactly between, just above and just below every pair of
// neighbouring codes (including the overflow boundary), plus special values.
std::vector<double> edge_doubles(const RefFormat& r) {
  std::vector<double> out = {0.0, -0.0, kInf, -kInf, kNaN, -kNaN, 1e300, -1e300, 1e-300,
                             std::numeric_limits<double>::denorm_min(),
                             -std::numeric_limits<double>::denorm_min(),
                             std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::min()};
  std::vector<double> vals = r.value;
  vals.push_back(r.beyond);
  for (std::size_t i = 0; i + 1 < vals.size(); ++i) {
    const double mid = (vals[i] + vals[i + 1]) / 2;
    for (double d : {vals[i], mid, mid * (1 + 0x1p-30), mid * (1 - 0x1p-30), mid * (1 + 0x1p-52),
                     mid * (1 - 0x1p-53)}) {
      out.push_back(d);
      out.push_back(-d);
    }
  }
  out.push_back(r.beyond);
  out.push_back(-r.beyond);
  out.push_back(r.beyond * 4);
  return out;
}

}  // namespace

TEST_CASE("float8: exhaustive decode matches closed form") {
  for (unsigned b = 0; b < 256; ++b) {
    const auto u = static_cast<std::uint8_t>(b);
    CAPTURE(b);
    const double e4 = closed_form_decode(b, 4, 3, true);
    const double e5 = closed_form_decode(b, 5, 2, false);
    CHECK(same_double(static_cast<double>(reel::float8_e4m3fn::from_bits(u)), e4));
    CHECK(same_double(static_cast<double>(reel::float8_e5m2::from_bits(u)), e5));
    CHECK(same_double(static_cast<double>(static_cast<float>(reel::float8_e4m3fn::from_bits(u))), e4));
    CHECK(same_double(static_cast<double>(static_cast<float>(reel::float8_e5m2::from_bits(u))), e5));
    CHECK(reel::isnan(reel::float8_e4m3fn::from_bits(u)) == std::isnan(e4));
    CHECK(reel::isnan(reel::float8_e5m2::from_bits(u)) == std::isnan(e5));
    CHECK(reel::isinf(reel::float8_e5m2::from_bits(u)) == std::isinf(e5));
    CHECK(reel::isfinite(reel::float8_e4m3fn::from_bits(u)) == std::isfinite(e4));
    CHECK(reel::isfinite(reel::float8_e5m2::from_bits(u)) == std::isfinite(e5));
  }
  // Spot values from the OCP spec.
  CHECK(static_cast<double>(reel::float8_e4m3fn::from_bits(0x7E)) == 448.0);
  CHECK(static_cast<double>(reel::float8_e4m3fn::from_bits(0x01)) == 0x1p-9);
  CHECK(static_cast<double>(reel::float8_e5m2::from_bits(0x7B)) == 57344.0);
  CHECK(static_cast<double>(reel::float8_e5m2::from_bits(0x01)) == 0x1p-16);
}

TEST_CASE("float8: every non-NaN code round-trips through double and float") {
  for (unsigned b = 0; b < 256; ++b) {
    CAPTURE(b);
    const double e4 = closed_form_decode(b, 4, 3, true);
    const double e5 = closed_form_decode(b, 5, 2, false);
    if (!std::isnan(e4)) {
      CHECK(reel::float8_e4m3fn(e4).bits() == b);
      CHECK(reel::float8_e4m3fn(static_cast<float>(e4)).bits() == b);
      CHECK(reel::to_float8_e4m3fn(e4, true).bits() == b);
    }
    if (!std::isnan(e5)) {
      CHECK(reel::float8_e5m2(e5).bits() == b);
      CHECK(reel::float8_e5m2(static_cast<float>(e5)).bits() == b);
      if (std::isfinite(e5)) CHECK(reel::to_float8_e5m2(e5, true).bits() == b);
    }
  }
}

TEST_CASE("float8: ties to even at every midpoint, and just off the midpoints") {
  for (const RefFormat* r : {&ref_e4m3fn(), &ref_e5m2()}) {
    const bool is_e4 = r == &ref_e4m3fn();
    std::size_t ties = 0;
    for (std::size_t i = 0; i + 1 < r->value.size(); ++i) {
      const double lo = r->value[i], hi = r->value[i + 1];
      const unsigned even = (r->codes[i] & 1u) == 0 ? r->codes[i] : r->codes[i + 1];
      const double mid = (lo + hi) / 2;
      for (double sgn : {1.0, -1.0}) {
        const unsigned s = sgn < 0 ? 0x80u : 0u;
        CAPTURE(mid * sgn);
        const auto enc = [&](double d) {
          return is_e4 ? reel::float8_e4m3fn(d).bits() : reel::float8_e5m2(d).bits();
        };
        CHECK(enc(sgn * mid) == (s | even));
        CHECK(enc(sgn * std::nextafter(mid, kInf)) == (s | r->codes[i + 1]));
        CHECK(enc(sgn * std::nextafter(mid, 0.0)) == (s | r->codes[i]));
      }
      ++ties;
    }
    CHECK(ties == r->value.size() - 1);
  }
  // Sub-denorm_min: half of it ties to +-0, anything above goes to denorm_min.
  CHECK(reel::float8_e4m3fn(0x1p-10).bits() == 0x00);
  CHECK(reel::float8_e4m3fn(-0x1p-10).bits() == 0x80);
  CHECK(reel::float8_e4m3fn(0x1p-10 * (1 + 0x1p-40)).bits() == 0x01);
  CHECK(reel::float8_e5m2(0x1p-17).bits() == 0x00);
  CHECK(reel::float8_e5m2(0x1p-17 * (1 + 0x1p-40)).bits() == 0x01);
  CHECK(reel::float8_e5m2(-0x1p-17 * (1 + 0x1p-40)).bits() == 0x81);
}

TEST_CASE("float8: overflow, saturation, NaN and signed zero") {
  const RefFormat& r4 = ref_e4m3fn();
  const RefFormat& r5 = ref_e5m2();
  const double max4 = r4.value.back();
  const double max5 = r5.value.back();
  CHECK(max4 == 448.0);
  CHECK(max5 == 57344.0);
  const double mid4 = (max4 + r4.beyond) / 2;  // 464: tie between 448 (even) and the NaN slot
  const double mid5 = (max5 + r5.beyond) / 2;  // 61440: tie between 57344 and 2^16 (even) -> inf
  CHECK(mid4 == 464.0);
  CHECK(mid5 == 61440.0);

  using reel::float8_e4m3fn;
  using reel::float8_e5m2;
  using reel::to_float8_e4m3fn;
  using reel::to_float8_e5m2;

  CHECK(float8_e4m3fn(mid4).bits() == 0x7E);
  CHECK(float8_e4m3fn(-mid4).bits() == 0xFE);
  CHECK(reel::isnan(float8_e4m3fn(std::nextafter(mid4, kInf))));
  CHECK(reel::isnan(float8_e4m3fn(470.0)));
  CHECK(reel::isnan(float8_e4m3fn(480.0)));
  CHECK(reel::isnan(float8_e4m3fn(1e6)));
  CHECK(reel::isnan(float8_e4m3fn(-1e6)));
  CHECK(reel::isnan(float8_e4m3fn(kInf)));
  CHECK(reel::isnan(float8_e4m3fn(-kInf)));
  CHECK(to_float8_e4m3fn(470.0, true).bits() == 0x7E);
  CHECK(to_float8_e4m3fn(1e6, true).bits() == 0x7E);
  CHECK(to_float8_e4m3fn(-1e6, true).bits() == 0xFE);
  CHECK(to_float8_e4m3fn(kInf, true).bits() == 0x7E);
  CHECK(to_float8_e4m3fn(-kInf, true).bits() == 0xFE);
  CHECK(static_cast<double>(to_float8_e4m3fn(1e6, true)) == 448.0);
  CHECK(reel::isnan(to_float8_e4m3fn(1e6, false)));

  CHECK(float8_e5m2(std::nextafter(mid5, 0.0)).bits() == 0x7B);
  CHECK(float8_e5m2(mid5).bits() == 0x7C);
  CHECK(float8_e5m2(-mid5).bits() == 0xFC);
  CHECK(float8_e5m2(1e6).bits() == 0x7C);
  CHECK(float8_e5m2(-1e6).bits() == 0xFC);
  CHECK(float8_e5m2(kInf).bits() == 0x7C);
  CHECK(to_float8_e5m2(mid5, true).bits() == 0x7B);
  CHECK(to_float8_e5m2(1e6, true).bits() == 0x7B);
  CHECK(to_float8_e5m2(-1e6, true).bits() == 0xFB);
  CHECK(to_float8_e5m2(kInf, true).bits() == 0x7B);
  CHECK(to_float8_e5m2(-kInf, true).bits() == 0xFB);
  CHECK(static_cast<double>(to_float8_e5m2(1e6, true)) == 57344.0);
  CHECK(static_cast<double>(to_float8_e5m2(1e6, false)) == kInf);

  for (bool sat : {false, true}) {
    CHECK(reel::isnan(to_float8_e4m3fn(kNaN, sat)));
    CHECK(reel::isnan(to_float8_e4m3fn(-kNaN, sat)));
    CHECK(reel::isnan(to_float8_e5m2(kNaN, sat)));
    CHECK(reel::isnan(to_float8_e5m2(-kNaN, sat)));
    CHECK(to_float8_e4m3fn(-0.0, sat).bits() == 0x80);
    CHECK(to_float8_e5m2(-0.0, sat).bits() == 0x80);
    CHECK(to_float8_e4m3fn(0.0, sat).bits() == 0x00);
    CHECK(to_float8_e5m2(0.0, sat).bits() == 0x00);
    CHECK(to_float8_e4m3fn(-1e-300, sat).bits() == 0x80);
  }
  CHECK(reel::isnan(float8_e4m3fn(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::signbit(static_cast<double>(float8_e4m3fn(-0.0))));
  CHECK(std::signbit(static_cast<float>(float8_e5m2(-0.0f))));
  CHECK(float8_e4m3fn().bits() == 0);
  CHECK(float8_e5m2().bits() == 0);
}

TEST_CASE("float8: rounding of edge and random doubles matches table search") {
  for (const RefFormat* r : {&ref_e4m3fn(), &ref_e5m2()}) {
    const bool is_e4 = r == &ref_e4m3fn();
    std::vector<double> inputs = edge_doubles(*r);
    const auto rnd = is_e4 ? random_doubles(-12, 10, 20000, 1) : random_doubles(-19, 17, 20000, 2);
    inputs.insert(inputs.end(), rnd.begin(), rnd.end());
    for (double d : inputs) {
      for (bool sat : {false, true}) {
        CAPTURE(d);
        CAPTURE(sat);
        const unsigned got =
            is_e4 ? reel::to_float8_e4m3fn(d, sat).bits() : reel::to_float8_e5m2(d, sat).bits();
        CHECK(got == r->round(d, sat));
      }
      const unsigned ctor = is_e4 ? reel::float8_e4m3fn(d).bits() : reel::float8_e5m2(d).bits();
      CHECK(ctor == r->round(d, false));
    }
  }
}

TEST_CASE("float8: comparisons follow IEEE semantics of the decoded values") {
  for (unsigned a = 0; a < 256; ++a) {
    for (unsigned b = 0; b < 256; ++b) {
      const auto x4 = reel::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(a));
      const auto y4 = reel::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(b));
      const auto x5 = reel::float8_e5m2::from_bits(static_cast<std::uint8_t>(a));
      const auto y5 = reel::float8_e5m2::from_bits(static_cast<std::uint8_t>(b));
      const double p4 = closed_form_decode(a, 4, 3, true), q4 = closed_form_decode(b, 4, 3, true);
      const double p5 = closed_form_decode(a, 5, 2, false), q5 = closed_form_decode(b, 5, 2, false);
      const bool ok4 = (x4 == y4) == (p4 == q4) && (x4 != y4) == (p4 != q4) &&
                       (x4 < y4) == (p4 < q4) && (x4 <= y4) == (p4 <= q4) &&
                       (x4 > y4) == (p4 > q4) && (x4 >= y4) == (p4 >= q4);
      const bool ok5 = (x5 == y5) == (p5 == q5) && (x5 != y5) == (p5 != q5) &&
                       (x5 < y5) == (p5 < q5) && (x5 <= y5) == (p5 <= q5) &&
                       (x5 > y5) == (p5 > q5) && (x5 >= y5) == (p5 >= q5);
      if (!ok4 || !ok5) {
        CAPTURE(a);
        CAPTURE(b);
        CHECK(ok4);
        CHECK(ok5);
      }
    }
  }
  const auto nan = std::numeric_limits<reel::float8_e4m3fn>::quiet_NaN();
  CHECK_FALSE(nan == nan);
  CHECK(nan != nan);
  CHECK(reel::float8_e4m3fn(0.0) == reel::float8_e4m3fn(-0.0));
  CHECK(reel::float8_e5m2(0.0) == reel::float8_e5m2(-0.0));
}

TEST_CASE("float8: numeric_limits agree with the decoded tables") {
  using L4 = std::numeric_limits<reel::float8_e4m3fn>;
  using L5 = std::numeric_limits<reel::float8_e5m2>;
  const auto& r4 = ref_e4m3fn();
  const auto& r5 = ref_e5m2();
  const auto d = [](auto v) { return static_cast<double>(v); };

  // Smallest normal: first value whose exponent field is 1.
  const auto first_normal = [](const RefFormat& r, int M) {
    for (std::size_t i = 0; i < r.codes.size(); ++i)
      if ((r.codes[i] >> M) == 1u) return r.value[i];
    return 0.0;
  };
  const auto after_one = [](const RefFormat& r) {
    const auto it = std::upper_bound(r.value.begin(), r.value.end(), 1.0);
    return *it - 1.0;
  };

  static_assert(L4::is_specialized && L5::is_specialized);
  CHECK(d(L4::max()) == r4.value.back());
  CHECK(d(L4::lowest()) == -r4.value.back());
  CHECK(d(L4::min()) == first_normal(r4, 3));
  CHECK(d(L4::denorm_min()) == r4.value[1]);
  CHECK(d(L4::epsilon()) == after_one(r4));
  CHECK(d(L4::round_error()) == 0.5);
  CHECK(reel::isnan(L4::quiet_NaN()));
  CHECK_FALSE(L4::has_infinity);
  CHECK(L4::digits == 4);
  CHECK(d(L4::min()) == std::ldexp(1.0, L4::min_exponent - 1));
  CHECK(std::ldexp(1.0, L4::max_exponent - 1) <= d(L4::max()));
  CHECK(std::ldexp(1.0, L4::max_exponent) > d(L4::max()));

  CHECK(d(L5::max()) == r5.value.back());
  CHECK(d(L5::lowest()) == -r5.value.back());
  CHECK(d(L5::min()) == first_normal(r5, 2));
  CHECK(d(L5::denorm_min()) == r5.value[1]);
  CHECK(d(L5::epsilon()) == after_one(r5));
  CHECK(d(L5::round_error()) == 0.5);
  CHECK(d(L5::infinity()) == kInf);
  CHECK(reel::isnan(L5::quiet_NaN()));
  CHECK(reel::isnan(L5::signaling_NaN()));
  CHECK(L5::has_infinity);
  CHECK(L5::digits == 3);
  CHECK(d(L5::min()) == std::ldexp(1.0, L5::min_exponent - 1));
  CHECK(std::ldexp(1.0, L5::max_exponent - 1) <= d(L5::max()));
  CHECK(std::ldexp(1.0, L5::max_exponent) > d(L5::max()));

  // The limits are usable in constant expressions.
  static_assert(L4::max().bits() == 0x7E && L5::max().bits() == 0x7B);
  static_assert(reel::float8_e4m3fn(448.0).bits() == 0x7E);
  static_assert(reel::to_float8_e5m2(1e9, true).bits() == 0x7B);
  static_assert(static_cast<float>(reel::float8_e5m2::from_bits(0x3C)) == 1.0f);
}

TEST_CASE("float8: Eigen arrays, casts and NumTraits") {
  using F8 = reel::float8_e4m3fn;
  Eigen::Array<F8, Eigen::Dynamic, 1> a(4);
  a << F8(0.5), F8(-3.0), F8(448.0), F8(0.1);
  const Eigen::ArrayXf f = a.cast<float>();
  CHECK(f(0) == 0.5f);
  CHECK(f(1) == -3.0f);
  CHECK(f(2) == 448.0f);
  CHECK(static_cast<double>(f(3)) == ref_e4m3fn().value[ref_e4m3fn().round(0.1, false)]);
  const Eigen::ArrayXd dd = a.cast<double>();
  CHECK(dd(1) == -3.0);

  const Eigen::Array<reel::float8_e5m2, Eigen::Dynamic, 1> b = f.cast<reel::float8_e5m2>();
  CHECK(b(2).bits() == reel::float8_e5m2(448.0).bits());

  static_assert(Eigen::NumTraits<F8>::IsComplex == 0);
  static_assert(Eigen::NumTraits<F8>::IsInteger == 0);
  static_assert(Eigen::NumTraits<F8>::IsSigned == 1);
  static_assert(std::is_same_v<Eigen::NumTraits<F8>::Real, F8>);
  CHECK(static_cast<double>(Eigen::NumTraits<F8>::highest()) == 448.0);
  CHECK(static_cast<double>(Eigen::NumTraits<F8>::lowest()) == -448.0);
  CHECK(static_cast<double>(Eigen::NumTraits<F8>::epsilon()) == 0.125);
  CHECK(static_cast<double>(Eigen::NumTraits<reel::float8_e5m2>::infinity()) == kInf);
  CHECK(reel::isnan(Eigen::NumTraits<F8>::quiet_NaN()));
  CHECK((Eigen::numext::isnan)(Eigen::NumTraits<reel::float8_e5m2>::quiet_NaN()));

  // Conversions to and from Eigen's 16-bit types are exact here.
  CHECK(static_cast<float>(static_cast<Eigen::half>(F8(-0.375))) == -0.375f);
  CHECK(F8(static_cast<float>(Eigen::half(0.75f))).bits() == F8(0.75).bits());
}

TEST_CASE("generic rounding reproduces hardware double->float conversion") {
  // binary32 through the same template: an oracle that cannot share our bugs.
  std::vector<double> inputs = random_doubles(-160, 130, 20000, 3);
  for (double d : {0.0, -0.0, kInf, -kInf, 0x1p-150, 0x1p-150 * (1 + 0x1p-40), 0x1.8p-149,
                   0x1.fffffe8p127, 0x1.fffffep127, 0x1.ffffffp127, 1e300, 1e-300})
    inputs.push_back(d);
  for (double d : inputs) {
    CAPTURE(d);
    CHECK(reel::detail::round_double_to_bits<8, 23, true, false>(d) ==
          std::bit_cast<std::uint32_t>(static_cast<float>(d)));
  }
  CHECK((reel::detail::round_double_to_bits<8, 23, true, false>(kNaN) & 0x7FC00000u) == 0x7FC00000u);
}

TEST_CASE("half and bfloat16: single rounding from double matches table search") {
  for (const RefFormat* r : {&ref_half(), &ref_bf16()}) {
    const bool is_half = r == &ref_half();
    std::vector<double> inputs = edge_doubles(*r);
    const auto rnd = is_half ? random_doubles(-27, 17, 20000, 4) : random_doubles(-137, 129, 20000, 5);
    inputs.insert(inputs.end(), rnd.begin(), rnd.end());
    for (double d : inputs) {
      CAPTURE(d);
      const unsigned want = r->round(d, false);
      if (is_half) {
        CHECK(reel::detail::round_to_half_bits(d) == want);
        CHECK(Eigen::numext::bit_cast<std::uint16_t>(reel::detail::round_to_half(d)) == want);
        CHECK(Eigen::numext::bit_cast<std::uint16_t>(reel::detail::round_from_double<reel::half>(d)) == want);
      } else {
        CHECK(reel::detail::round_to_bfloat16_bits(d) == want);
        CHECK(Eigen::numext::bit_cast<std::uint16_t>(reel::detail::round_to_bfloat16(d)) == want);
        CHECK(Eigen::numext::bit_cast<std::uint16_t>(reel::detail::round_from_double<reel::bfloat16>(d)) == want);
      }
    }
  }
  static_assert(reel::detail::round_to_half_bits(1.0) == 0x3C00);
  static_assert(reel::detail::round_to_bfloat16_bits(-2.0) == 0xC000);
}

TEST_CASE("half and bfloat16: just off a tie, direct rounding differs from rounding via float") {
  for (const RefFormat* r : {&ref_half(), &ref_bf16()}) {
    const bool is_half = r == &ref_half();
    std::size_t via_float_wrong = 0;
    for (std::size_t i = 0; i + 1 < r->value.size(); ++i) {
      const double t = (r->value[i] + r->value[i + 1]) / 2;
      REQUIRE(static_cast<double>(static_cast<float>(t)) == t);  // the tie is a float
      const double up = t + t * 0x1p-40;
      const double down = t - t * 0x1p-40;
      REQUIRE(static_cast<double>(static_cast<float>(up)) == t);  // float collapses it onto the tie
      const unsigned got_up = is_half ? reel::detail::round_to_half_bits(up) : reel::detail::round_to_bfloat16_bits(up);
      const unsigned got_down = is_half ? reel::detail::round_to_half_bits(down) : reel::detail::round_to_bfloat16_bits(down);
      if (got_up != r->codes[i + 1] || got_down != r->codes[i]) {
        CAPTURE(t);
        CHECK(got_up == r->codes[i + 1]);
        CHECK(got_down == r->codes[i]);
      }
      const unsigned via_float_up =
          is_half ? Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(static_cast<float>(up)))
                  : Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(static_cast<float>(up)));
      if (via_float_up != got_up) ++via_float_wrong;
    }
    // Half of all ties have the even neighbour below, where float double-rounds.
    CHECK(via_float_wrong >= (r->value.size() - 1) / 2 - 1);
  }
  // A concrete case: 1 + 2^-11 is the tie between 1 and 1 + 2^-10 in half.
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  CHECK(static_cast<float>(Eigen::half(d)) == 1.0f);  // Eigen via float: double rounding
  CHECK(static_cast<double>(static_cast<float>(reel::detail::round_to_half(d))) == 1.0 + 0x1p-10);
}

TEST_CASE("round_from_double dispatches per type") {
  CHECK(reel::detail::round_from_double<reel::float8_e4m3fn>(1e6).bits() == 0x7F);
  CHECK(reel::detail::round_from_double<reel::float8_e5m2>(1e6).bits() == 0x7C);
  CHECK(reel::detail::round_from_double<float>(0.1) == 0.1f);
  CHECK(reel::detail::round_from_double<double>(0.1) == 0.1);
  CHECK(reel::detail::round_from_double<int>(3.0) == 3);
}
