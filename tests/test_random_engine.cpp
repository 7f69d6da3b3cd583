// Tests for the Philox4x32-10 engine and reel::Generator.
//
// Known answers come from the Random123 distribution's kat_vectors file
// (lines "philox4x32 10 <ctr[4]> <key[2]> <out[4]>"), not from this code.

#include <doctest/doctest.h>

#include <reel/random/philox.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <thread>
#include <vector>

namespace {

using reel::Generator;
using reel::detail::philox4x32_10;
using Ctr = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

// Written out from the documented algorithm, word by word, so the chunked
// kernels are checked against something that shares none of their indexing.
uint64_t ref_u64(uint64_t seed, uint64_t start, uint64_t j) {
  const uint32_t lo = reel::detail::philox_word(seed, start, 2 * j);
  const uint32_t hi = reel::detail::philox_word(seed, start, 2 * j + 1);
  return (uint64_t(hi) << 32) | lo;
}

template <class T>
double mean_of(const std::vector<T>& v) {
  double s = 0;
  for (T x : v) s += double(x);
  return s / double(v.size());
}

template <class T>
double var_of(const std::vector<T>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (T x : v) s += (double(x) - m) * (double(x) - m);
  return s / double(v.size());
}

}  // namespace

TEST_CASE("philox4x32_10 matches Random123 known-answer vectors") {
  CHECK(philox4x32_10(Ctr{0, 0, 0, 0}, Key{0, 0}) ==
        Ctr{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10(Ctr{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                      Key{0xffffffff, 0xffffffff}) ==
        Ctr{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10(Ctr{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                      Key{0xa4093822, 0x299f31d0}) ==
        Ctr{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  // constexpr-ness lets callers precompute streams at compile time.
  static_assert(philox4x32_10(Ctr{0, 0, 0, 0}, Key{0, 0})[0] == 0x6627e8d5u);
}

TEST_CASE("philox_word follows the documented counter/key layout") {
  const uint64_t seed = 0x0123456789abcdefULL;
  const uint64_t start = 0xfedcba9876543210ULL;
  for (uint64_t i = 0; i < 40; ++i) {
    const uint64_t b = start + i / 4;
    const auto r = philox4x32_10(Ctr{uint32_t(b), uint32_t(b >> 32), 0, 0},
                                 Key{0x89abcdefu, 0x01234567u});
    CHECK(reel::detail::philox_word(seed, start, i) == r[i % 4]);
  }
  // Zero seed, block 0 is exactly the first KAT vector.
  CHECK(reel::detail::philox_word(0, 0, 0) == 0x6627e8d5u);
  CHECK(reel::detail::philox_word(0, 0, 3) == 0x9b00dbd8u);
}

TEST_CASE("fill_uint32 is split-invariant") {
  const uint64_t seed = 42, start = 7;
  const uint64_t n = 103;
  std::vector<uint32_t> all(n);
  reel::detail::fill_uint32(seed, start, 0, n, all.data());
  for (uint64_t i = 0; i < n; ++i) REQUIRE(all[i] == reel::detail::philox_word(seed, start, i));
  for (uint64_t a : {0, 1, 2, 3, 5, 50, 101}) {
    for (uint64_t b : {a, a + 1, a + 2, a + 7, n}) {
      if (b > n) continue;
      std::vector<uint32_t> part(b - a + 1, 0xdeadbeef);
      reel::detail::fill_uint32(seed, start, a, b, part.data());
      for (uint64_t i = a; i < b; ++i) CHECK(part[i - a] == all[i]);
      CHECK(part[b - a] == 0xdeadbeef);  // no write past end
    }
  }
}

TEST_CASE("Generator state: seed, offset, reserve_blocks, manual_seed") {
  Generator g(0x1122334455667788ULL);
  CHECK(g.seed() == 0x1122334455667788ULL);
  CHECK(g.offset() == 0);
  CHECK(g.reserve_blocks(5) == 0);
  CHECK(g.offset() == 2);
  CHECK(g.reserve_blocks(0) == 2);
  CHECK(g.offset() == 2);
  CHECK(g.reserve_blocks(4) == 2);
  CHECK(g.offset() == 3);
  CHECK(g.reserve_blocks(1) == 3);
  CHECK(g.offset() == 4);
  const auto r = g.reserve(9);
  CHECK(r.seed == 0x1122334455667788ULL);
  CHECK(r.start_block == 4);
  CHECK(g.offset() == 7);
  g.set_offset(100);
  CHECK(g.offset() == 100);
  CHECK(g.reserve_blocks(8) == 100);
  g.manual_seed(5);
  CHECK(g.seed() == 5);
  CHECK(g.offset() == 0);

  Generator copy(g);
  copy.reserve_blocks(4);
  CHECK(copy.offset() == 1);
  CHECK(g.offset() == 0);
  g = copy;
  CHECK(g.offset() == 1);
  CHECK(g.seed() == 5);

  // The request-size -> blocks rule for each distribution.
  Generator h(1);
  std::vector<float> f(7);
  std::vector<double> d(7);
  std::vector<int64_t> k(7);
  reel::fill_uniform(h, f.data(), 5, 0.0, 1.0);  // 5 words
  CHECK(h.offset() == 2);
  reel::fill_uniform(h, d.data(), 3, 0.0, 1.0);  // 6 words
  CHECK(h.offset() == 4);
  reel::fill_normal(h, f.data(), 3, 0.0, 1.0);  // 2 pairs * 2 words
  CHECK(h.offset() == 5);
  reel::fill_normal(h, d.data(), 3, 0.0, 1.0);  // 2 pairs * 4 words
  CHECK(h.offset() == 7);
  reel::fill_randint(h, k.data(), 3, 0, 10);  // 6 words
  CHECK(h.offset() == 9);
  reel::fill_uniform(h, f.data(), 0, 0.0, 1.0);
  CHECK(h.offset() == 9);
}

TEST_CASE("same seed gives same sequence; different seeds differ") {
  Generator a(1234), b(1234), c(1235);
  std::vector<float> fa(1000), fb(1000), fc(1000);
  for (int rep = 0; rep < 3; ++rep) {
    reel::fill_uniform(a, fa.data(), 1000, 0.0, 1.0);
    reel::fill_uniform(b, fb.data(), 1000, 0.0, 1.0);
    reel::fill_uniform(c, fc.data(), 1000, 0.0, 1.0);
    CHECK(fa == fb);
    CHECK(fa != fc);
  }
  // Re-seeding replays from the start.
  Generator d(99);
  std::vector<double> d1(50), d2(50);
  reel::fill_normal(d, d1.data(), 50, 0.0, 1.0);
  d.manual_seed(99);
  reel::fill_normal(d, d2.data(), 50, 0.0, 1.0);
  CHECK(d1 == d2);
  // Advancing the offset by hand skips exactly those blocks.
  Generator e(99), f(99);
  std::vector<float> e1(8), f1(16);
  e.set_offset(2);
  reel::fill_uniform(e, e1.data(), 8, 0.0, 1.0);
  reel::fill_uniform(f, f1.data(), 16, 0.0, 1.0);
  for (int i = 0; i < 8; ++i) CHECK(e1[i] == f1[i + 8]);
}

TEST_CASE("two sequential block-aligned fills equal one fill") {
  const int64_t n = 64;  // multiple of 4 words for every distribution below
  {
    Generator a(7), b(7);
    std::vector<float> whole(n), half(n);
    reel::fill_uniform(a, whole.data(), n, -1.0, 3.0);
    reel::fill_uniform(b, half.data(), n / 2, -1.0, 3.0);
    reel::fill_uniform(b, half.data() + n / 2, n / 2, -1.0, 3.0);
    CHECK(whole == half);
    CHECK(a.offset() == b.offset());
  }
  {
    Generator a(7), b(7);
    std::vector<double> whole(n), half(n);
    reel::fill_normal(a, whole.data(), n, 1.0, 2.0);
    reel::fill_normal(b, half.data(), n / 2, 1.0, 2.0);
    reel::fill_normal(b, half.data() + n / 2, n / 2, 1.0, 2.0);
    CHECK(whole == half);
  }
  {
    Generator a(7), b(7);
    std::vector<int32_t> whole(n), half(n);
    reel::fill_randint(a, whole.data(), n, -5, 1000);
    reel::fill_randint(b, half.data(), n / 2, -5, 1000);
    reel::fill_randint(b, half.data() + n / 2, n / 2, -5, 1000);
    CHECK(whole == half);
  }
}

TEST_CASE("range kernels are split-invariant at any boundary") {
  const uint64_t seed = 0xabcdefULL, start = 3;
  const int64_t n = 1037;  // several chunks, odd length
  const std::vector<int64_t> cuts = {0, 1, 2, 3, 127, 128, 129, 255, 256, 257, 511, 700, 1036, n};

  auto check_splits = [&](auto kernel, auto tag) {
    using T = decltype(tag);
    std::vector<T> whole(n);
    kernel(int64_t{0}, n, whole.data());
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      for (size_t e = c + 1; e < cuts.size(); ++e) {
        const int64_t b0 = cuts[c], b1 = cuts[e];
        std::vector<T> part(size_t(b1 - b0));
        kernel(b0, b1, part.data());
        bool same = true;
        for (int64_t i = b0; i < b1; ++i) same = same && (part[size_t(i - b0)] == whole[size_t(i)]);
        CHECK_MESSAGE(same, "split [" << b0 << ", " << b1 << ")");
      }
    }
    return whole;
  };

  check_splits([&](int64_t b, int64_t e, float* o) {
    reel::detail::uniform_range<float>(seed, start, b, e, o, -2.0, 5.0);
  }, float{});
  check_splits([&](int64_t b, int64_t e, double* o) {
    reel::detail::uniform_range<double>(seed, start, b, e, o, -2.0, 5.0);
  }, double{});
  check_splits([&](int64_t b, int64_t e, float* o) {
    reel::detail::normal_range<float>(seed, start, b, e, o, 0.5, 3.0);
  }, float{});
  check_splits([&](int64_t b, int64_t e, double* o) {
    reel::detail::normal_range<double>(seed, start, b, e, o, 0.5, 3.0);
  }, double{});
  // A range just above 2^63 rejects about half of all draws, so this also
  // checks that retries stay split-invariant.
  const int64_t lo = std::numeric_limits<int64_t>::min() + 12345;
  const int64_t hi = 12346;  // hi - lo = 2^63 + 1
  check_splits([&](int64_t b, int64_t e, int64_t* o) {
    reel::detail::randint_range<int64_t>(seed, start, b, e, o, lo, hi);
  }, int64_t{});
}

TEST_CASE("kernels agree with word-by-word reference of the documented formulas") {
  const uint64_t seed = 2024, start = 11;
  const int64_t n = 301;
  {
    std::vector<float> f(n);
    reel::detail::uniform_range<float>(seed, start, 0, n, f.data(), 0.0, 1.0);
    for (int64_t j = 0; j < n; ++j)
      REQUIRE(f[j] == float(reel::detail::philox_word(seed, start, j) >> 8) * 0x1p-24f);
  }
  {
    std::vector<double> d(n);
    reel::detail::uniform_range<double>(seed, start, 0, n, d.data(), 0.0, 1.0);
    for (int64_t j = 0; j < n; ++j) REQUIRE(d[j] == double(ref_u64(seed, start, j) >> 11) * 0x1p-53);
  }
  {
    std::vector<double> z(n);
    reel::detail::normal_range<double>(seed, start, 0, n, z.data(), 0.0, 1.0);
    const double two_pi = 6.283185307179586;
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t p = uint64_t(j) / 2;
      const double ua = double(ref_u64(seed, start, 2 * p) >> 11) * 0x1p-53;
      const double ub = double(ref_u64(seed, start, 2 * p + 1) >> 11) * 0x1p-53;
      const double r = std::sqrt(-2.0 * std::log(1.0 - ua));
      const double want = (j % 2 == 0) ? r * std::cos(two_pi * ub) : r * std::sin(two_pi * ub);
      REQUIRE(z[j] == doctest::Approx(want).epsilon(1e-12));
    }
  }
  {
    // Small range: rejection is essentially never taken, so this pins the
    // main-stream mapping x -> low + high64(x * R).
    std::vector<int64_t> k(n);
    reel::detail::randint_range<int64_t>(seed, start, 0, n, k.data(), -50, 50);
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t x = ref_u64(seed, start, j);
      uint64_t hi, lo;
      reel::detail::mul_64x64_128(x, 100, hi, lo);
      REQUIRE(lo >= (uint64_t(0) - 100) % 100);
      REQUIRE(k[j] == -50 + int64_t(hi));
    }
  }
  {
    // R = 2^63 + 1 rejects about half the main-stream draws; follow the
    // documented retry counters (attempt in counter word 2) by hand.
    const int64_t lo_v = std::numeric_limits<int64_t>::min(), hi_v = 1;
    const uint64_t range = uint64_t(hi_v) - uint64_t(lo_v);
    const uint64_t threshold = (uint64_t(0) - range) % range;
    std::vector<int64_t> k(n);
    reel::detail::randint_range<int64_t>(seed, start, 0, n, k.data(), lo_v, hi_v);
    int retried = 0;
    for (int64_t j = 0; j < n; ++j) {
      uint64_t x = ref_u64(seed, start, j), hi, lo;
      reel::detail::mul_64x64_128(x, range, hi, lo);
      for (uint32_t a = 1; lo < threshold; ++a) {
        const uint64_t b = start + uint64_t(j) / 2;
        const auto r = philox4x32_10(Ctr{uint32_t(b), uint32_t(b >> 32), a, 0},
                                     Key{uint32_t(seed), uint32_t(seed >> 32)});
        const int w = 2 * int(j % 2);
        x = (uint64_t(r[w + 1]) << 32) | r[w];
        reel::detail::mul_64x64_128(x, range, hi, lo);
        retried += (a == 1);
      }
      REQUIRE(k[j] == int64_t(uint64_t(lo_v) + hi));
    }
    CHECK(retried > n / 4);
  }
}

#ifdef __SIZEOF_INT128__
TEST_CASE("mul_64x64_128 matches native 128-bit multiply") {
  Generator g(5);
  std::vector<int64_t> v(2000);
  reel::fill_randint(g, v.data(), 2000, std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max());
  v.push_back(-1);  // 0xffff...ffff
  v.push_back(0);
  v.push_back(1);
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    const uint64_t a = uint64_t(v[i]), b = uint64_t(v[i + 1]);
    const unsigned __int128 m = (unsigned __int128)a * b;
    uint64_t hi, lo;
    reel::detail::mul_64x64_128(a, b, hi, lo);
    REQUIRE(hi == uint64_t(m >> 64));
    REQUIRE(lo == uint64_t(m));
  }
}
#endif

TEST_CASE("unit conversions hit their documented extremes") {
  CHECK(reel::detail::uint32_to_unit_float(0) == 0.0f);
  CHECK(reel::detail::uint32_to_unit_float(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(reel::detail::uint32_to_unit_float(0x000000ffu) == 0.0f);  // low 8 bits dropped
  CHECK(reel::detail::uint32x2_to_unit_double(0, 0) == 0.0);
  CHECK(reel::detail::uint32x2_to_unit_double(0xffffffffu, 0xffffffffu) == 1.0 - 0x1p-53);
  CHECK(reel::detail::uint32x2_to_unit_double(0, 0x80000000u) == 0.5);
  // Rounding that would land on `high` is pulled back inside the interval.
  const float top = reel::detail::uniform_from_unit<float>(1.0 - 0x1p-24, 1.0, 2.0);
  CHECK(top < 2.0f);
  CHECK(top == std::nextafter(2.0f, 0.0f));
  const double topd = reel::detail::uniform_from_unit<double>(1.0 - 0x1p-53, 1.0, 2.0);
  CHECK(topd < 2.0);
  CHECK(reel::detail::uniform_from_unit<float>(0.7, 3.0, 3.0) == 3.0f);
}

TEST_CASE("uniform statistics") {
  const int64_t n = 100000;
  const double sd_mean = std::sqrt(1.0 / 12.0 / double(n));
  const double sd_var = std::sqrt(1.0 / 180.0 / double(n));  // Var[(U-1/2)^2] = 1/180
  Generator g(31337);
  {
    std::vector<float> v(n);
    reel::fill_uniform(g, v.data(), n, 0.0, 1.0);
    for (float x : v) REQUIRE((x >= 0.0f && x < 1.0f));
    CHECK(std::abs(mean_of(v) - 0.5) < 5 * sd_mean);
    CHECK(std::abs(var_of(v) - 1.0 / 12.0) < 5 * sd_var);
  }
  {
    std::vector<double> v(n);
    reel::fill_uniform(g, v.data(), n, 0.0, 1.0);
    for (double x : v) REQUIRE((x >= 0.0 && x < 1.0));
    CHECK(std::abs(mean_of(v) - 0.5) < 5 * sd_mean);
    CHECK(std::abs(var_of(v) - 1.0 / 12.0) < 5 * sd_var);
  }
  {
    std::vector<float> v(n);
    reel::fill_uniform(g, v.data(), n, -3.0, 5.0);  // width 8
    for (float x : v) REQUIRE((x >= -3.0f && x < 5.0f));
    CHECK(std::abs(mean_of(v) - 1.0) < 5 * 8 * sd_mean);
    CHECK(std::abs(var_of(v) - 64.0 / 12.0) < 5 * 64 * sd_var);
  }
}

TEST_CASE("normal statistics") {
  const int64_t n = 100000;
  const double sd_mean = 1.0 / std::sqrt(double(n));
  const double sd_var = std::sqrt(2.0 / double(n));  // Var[Z^2] = 2
  Generator g(271828);
  {
    std::vector<float> v(n);
    reel::fill_normal(g, v.data(), n, 0.0, 1.0);
    for (float x : v) REQUIRE(std::isfinite(x));
    CHECK(std::abs(mean_of(v)) < 5 * sd_mean);
    CHECK(std::abs(var_of(v) - 1.0) < 5 * sd_var);
  }
  {
    std::vector<double> v(n);
    reel::fill_normal(g, v.data(), n, 0.0, 1.0);
    for (double x : v) REQUIRE(std::isfinite(x));
    CHECK(std::abs(mean_of(v)) < 5 * sd_mean);
    CHECK(std::abs(var_of(v) - 1.0) < 5 * sd_var);
    // Tail mass: P(|Z| > 2) = 0.0455; binomial sd ~ 6.6e-4.
    int64_t tails = 0;
    for (double x : v) tails += std::abs(x) > 2.0;
    CHECK(std::abs(double(tails) / double(n) - 0.0455) < 5 * 6.6e-4);
  }
  {
    std::vector<double> v(n + 1);  // odd length exercises the half-used pair
    reel::fill_normal(g, v.data(), n + 1, 2.0, 3.0);
    CHECK(std::abs(mean_of(v) - 2.0) < 5 * 3 * sd_mean);
    CHECK(std::abs(var_of(v) - 9.0) < 5 * 9 * sd_var);
  }
}

TEST_CASE("randint range and uniformity") {
  const int64_t n = 100000;
  Generator g(8675309);
  {
    const int64_t lo = -3, hi = 7, k = hi - lo;
    std::vector<int32_t> v(n);
    reel::fill_randint(g, v.data(), n, lo, hi);
    std::vector<int64_t> counts(k, 0);
    for (int32_t x : v) {
      REQUIRE(x >= lo);
      REQUIRE(x < hi);
      ++counts[size_t(x - lo)];
    }
    double chi2 = 0;
    const double expect = double(n) / double(k);
    for (int64_t c : counts) {
      CHECK(c > 0);
      chi2 += (double(c) - expect) * (double(c) - expect) / expect;
    }
    // 9 degrees of freedom: mean 9, sd ~4.2; 50 is far out in the tail.
    CHECK(chi2 < 50.0);
  }
  {
    std::vector<int64_t> v(1000);
    reel::fill_randint(g, v.data(), 1000, 5, 6);
    for (int64_t x : v) CHECK(x == 5);
  }
  {
    // Full int64 span: R = 2^64 - 1 must not overflow anywhere.
    const int64_t lo = std::numeric_limits<int64_t>::min();
    const int64_t hi = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> v(n);
    reel::fill_randint(g, v.data(), n, lo, hi);
    int64_t neg = 0;
    std::set<int64_t> distinct;
    for (int64_t x : v) {
      REQUIRE(x < hi);
      neg += x < 0;
      distinct.insert(x);
    }
    CHECK(std::abs(double(neg) / double(n) - 0.5) < 5 * 0.5 / std::sqrt(double(n)));
    CHECK(distinct.size() > size_t(n) - 5);
  }
  {
    // R = 2^63 + 1 forces frequent rejection; results must still be in range
    // and top/bottom halves equally likely.
    const int64_t lo = -(int64_t(1) << 62);
    const int64_t hi = (int64_t(1) << 62) + 1;  // hi - lo = 2^63 + 1
    const int64_t mid = lo + (int64_t(1) << 62);
    std::vector<int64_t> v(n);
    reel::fill_randint(g, v.data(), n, lo, hi);
    int64_t upper = 0;
    for (int64_t x : v) {
      REQUIRE(x >= lo);
      REQUIRE(x < hi);
      upper += x >= mid;
    }
    CHECK(std::abs(double(upper) / double(n) - 0.5) < 5 * 0.5 / std::sqrt(double(n)));
  }
  {
    // Output types narrower than int64 receive the exact value.
    std::vector<uint8_t> v(2000);
    reel::fill_randint(g, v.data(), 2000, 0, 256);
    std::set<int> seen(v.begin(), v.end());
    CHECK(seen.size() == 256);
  }
}

TEST_CASE("invalid arguments throw and do not advance the generator") {
  Generator g(1);
  std::vector<float> f(4);
  std::vector<int64_t> k(4);
  CHECK_THROWS_AS(reel::fill_uniform(g, f.data(), -1, 0.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(reel::fill_uniform(g, f.data(), 4, 2.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(reel::fill_normal(g, f.data(), 4, 0.0, -1.0), std::invalid_argument);
  CHECK_THROWS_AS(reel::fill_randint(g, k.data(), 4, 3, 3), std::invalid_argument);
  CHECK(g.offset() == 0);
}

TEST_CASE("concurrent reserve_blocks hands out disjoint blocks") {
  Generator g(3);
  const int threads = 4, per_thread = 500;
  std::vector<std::vector<uint64_t>> starts(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) starts[size_t(t)].push_back(g.reserve_blocks(8));
    });
  for (auto& th : pool) th.join();
  std::set<uint64_t> all;
  for (const auto& s : starts) all.insert(s.begin(), s.end());
  CHECK(all.size() == size_t(threads * per_thread));
  CHECK(g.offset() == uint64_t(threads * per_thread * 2));
  for (uint64_t s : all) CHECK(s % 2 == 0);
}

TEST_CASE("a fill split across threads equals the serial fill") {
  const int64_t n = 10007;
  Generator serial(77), par(77);
  std::vector<double> want(n), got(n);
  reel::fill_normal(serial, want.data(), n, 0.0, 1.0);
  const auto r = par.reserve(reel::detail::normal_words<double>(n));
  const int64_t cuts[] = {0, 2501, 5000, 7777, n};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      reel::detail::normal_range<double>(r.seed, r.start_block, cuts[t], cuts[t + 1],
                                         got.data() + cuts[t], 0.0, 1.0);
    });
  for (auto& th : pool) th.join();
  CHECK(got == want);
  CHECK(par.offset() == serial.offset());
}

TEST_CASE("default generator") {
  CHECK(reel::default_seed == 67280421310721ULL);
  reel::manual_seed(2718);
  CHECK(reel::default_generator().seed() == 2718);
  CHECK(reel::default_generator().offset() == 0);
  std::vector<float> a(10), b(10);
  reel::fill_uniform(reel::default_generator(), a.data(), 10, 0.0, 1.0);
  CHECK(reel::default_generator().offset() == 3);
  reel::manual_seed(2718);
  reel::fill_uniform(reel::default_generator(), b.data(), 10, 0.0, 1.0);
  CHECK(a == b);
  CHECK(&reel::default_generator() == &reel::default_generator());
  reel::manual_seed(reel::default_seed);  // leave global state as a fresh process would
}
