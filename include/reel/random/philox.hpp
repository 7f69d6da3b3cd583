#pragma once
// Counter-based random number engine for reel (Philox4x32-10).
//
// Everything below is specified exactly so that another implementation (GPU
// kernel, other language, other platform) can reproduce reel's random streams.
//
// Block function
//   philox4x32_10(counter[4], key[2]) is Philox4x32 with 10 rounds from
//   Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3"
//   (SC'11). One round, with M0 = 0xD2511F53, M1 = 0xCD9E8D57:
//     hi0:lo0 = M0 * c0 (64-bit product), hi1:lo1 = M1 * c2
//     (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
//   Before every round but the first the key is bumped by the Weyl constants:
//     k0 += 0x9E3779B9, k1 += 0xBB67AE85 (mod 2^32).
//
// Generator state
//   seed (uint64) and offset (uint64). key = (low32(seed), high32(seed)).
//   offset counts 128-bit blocks already handed out.
//
// Requests
//   A request for n 32-bit words reserves ceil(n / 4) blocks starting at
//   start = offset, then offset += ceil(n / 4). Word i (0-based) of the request
//   is word (i % 4) of philox4x32_10(counter(start + i / 4), key), where
//   counter(b) = (low32(b), high32(b), 0, 0); block indices wrap mod 2^64.
//   Word i depends only on (seed, start, i), so a request can be split across
//   any number of threads in any way and still yield identical numbers.
//
// Conversions (value j of a request; "word k" means word k of that request)
//   uniform float  in [0,1): u = (word j >> 8) * 2^-24                (1 word)
//   uniform double in [0,1): lo = word 2j, hi = word 2j+1,
//                            u = (((uint64)hi << 32 | lo) >> 11) * 2^-53
//                                                                  (2 words)
//   fill_uniform: v = low + (high - low) * u evaluated in double, rounded once
//     to T. If rounding lands on or above T(high) the result is replaced by
//     the largest T below T(high), so every value lies in [T(low), T(high)).
//   fill_normal: values come in Box-Muller pairs; pair p produces values 2p and
//     2p+1 from two uniforms ua, ub of T's own kind (float: words 2p, 2p+1;
//     double: words 4p..4p+1 and 4p+2..4p+3, each combined as above):
//       u1 = 1 - ua (in (0,1], so the log is finite), u2 = ub
//       r = sqrt(-2 ln u1), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2)
//     value = mean + stddev * z computed in double and rounded once to T. A
//     request of n values consumes ceil(n/2) whole pairs (the unused z1 of an
//     odd tail is discarded). Uniform and integer streams are bit-exact across
//     platforms; normals are as exact as the platform's log/sqrt/sin/cos.
//   fill_randint: uniform in [low, high), range R = high - low (as uint64,
//     1 <= R <= 2^64 - 1). Value j draws x = ((uint64)word 2j+1 << 32) | word 2j
//     and applies Lemire's multiply-and-reject method: m = x * R (128-bit),
//     accept when low64(m) >= (2^64 mod R), result = low + high64(m). That is
//     exactly unbiased. A rejected value retries with attempt a = 1, 2, ...:
//     the replacement x is built the same way from words 2*(j%2), 2*(j%2)+1 of
//     philox4x32_10((low32(b), high32(b), a, 0), key), b = start + j/2. The main
//     stream always has counter word 2 == 0, so retries never reuse its bits,
//     and every value still depends only on (seed, start, j): determinism and
//     split-invariance survive rejection. Each value reserves exactly 2 words.
//
// Thread safety
//   Generator::reserve / reserve_blocks / manual_seed / set_offset serialise on
//   a per-generator mutex so a (seed, start) pair is never torn; offset() and
//   seed() are lock-free reads of atomics. The range kernels in reel::detail
//   are pure functions and can run concurrently on disjoint output ranges.
#include "../core/config.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <type_traits>

#include "../core/capture.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

constexpr std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                                std::array<uint32_t, 2> key) noexcept {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * counter[0];
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(p0)};
  }
  return counter;
}

constexpr std::array<uint32_t, 2> philox_key(uint64_t seed) noexcept {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// counter word 2 is the rejection-retry attempt (0 for the main stream).
constexpr std::array<uint32_t, 4> philox_counter(uint64_t block, uint32_t attempt = 0) noexcept {
  return {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), attempt, 0u};
}

// Blocks a request of nwords reserves; written to avoid overflow at 2^64-1.
constexpr uint64_t philox_blocks_for_words(uint64_t nwords) noexcept {
  return nwords / 4 + (nwords % 4 != 0 ? 1 : 0);
}

inline uint32_t philox_word(uint64_t seed, uint64_t start_block, uint64_t i) noexcept {
  return philox4x32_10(philox_counter(start_block + i / 4), philox_key(seed))[i % 4];
}

// Writes words [begin, end) of the request starting at start_block; out[0] is
// word `begin`. Each block is computed once even when begin/end are unaligned.
REEL_INLINE void fill_uint32(uint64_t seed, uint64_t start_block, uint64_t begin, uint64_t end,
                        uint32_t* out) noexcept;

constexpr float uint32_to_unit_float(uint32_t w) noexcept {
  // 24 bits fill a float mantissa exactly, so the product is exact and < 1.
  return static_cast<float>(w >> 8) * 0x1p-24f;
}

constexpr double uint32x2_to_unit_double(uint32_t lo, uint32_t hi) noexcept {
  const uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * 0x1p-53;
}

// Portable 64x64->128 multiply: reel must not depend on __int128 so that the
// documented integer stream is reproducible with any compiler.
constexpr void mul_64x64_128(uint64_t a, uint64_t b, uint64_t& hi, uint64_t& lo) noexcept {
  const uint64_t a_lo = static_cast<uint32_t>(a), a_hi = a >> 32;
  const uint64_t b_lo = static_cast<uint32_t>(b), b_hi = b >> 32;
  const uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
  const uint64_t mid = (p0 >> 32) + static_cast<uint32_t>(p1) + static_cast<uint32_t>(p2);
  lo = (mid << 32) | static_cast<uint32_t>(p0);
  hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

template <class T>
inline constexpr bool is_philox_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

// Words consumed per value (uniform, randint) or per Box-Muller pair (normal).
template <class T>
inline constexpr uint64_t uniform_words_per_value = std::is_same_v<T, float> ? 1 : 2;
template <class T>
inline constexpr uint64_t normal_words_per_pair = std::is_same_v<T, float> ? 2 : 4;
inline constexpr uint64_t randint_words_per_value = 2;

// Number of 32-bit words a request of n values reserves; pass to
// Generator::reserve when splitting a fill across threads by hand.
template <class T>
constexpr uint64_t uniform_words(int64_t n) noexcept {
  return static_cast<uint64_t>(n) * uniform_words_per_value<T>;
}
template <class T>
constexpr uint64_t normal_words(int64_t n) noexcept {
  return (static_cast<uint64_t>(n) / 2 + static_cast<uint64_t>(n) % 2) * normal_words_per_pair<T>;
}
constexpr uint64_t randint_words(int64_t n) noexcept {
  return static_cast<uint64_t>(n) * randint_words_per_value;
}

template <class T>
T uniform_from_unit(double u, double low, double high) noexcept {
  const T v = static_cast<T>(low + (high - low) * u);
  const T top = static_cast<T>(high);
  // Rounding (to double, then possibly to float) can reach `high`; keeping the
  // interval half-open matters to callers that use the value as an index.
  if (v >= top && static_cast<T>(low) < top) return std::nextafter(top, static_cast<T>(low));
  return v;
}

// Scratch size for chunked kernels: big enough to amortise call overhead,
// small enough to live on the stack of any worker thread.
inline constexpr int64_t kPhiloxChunkWords = 256;

// Values [begin, end) of a uniform request starting at start_block; out[0] is
// value `begin`. Precondition: low <= high.
template <class T>
void uniform_range(uint64_t seed, uint64_t start_block, int64_t begin, int64_t end, T* out,
                   double low, double high) {
  static_assert(is_philox_real_v<T>, "uniform_range supports float and double");
  constexpr int64_t wpv = static_cast<int64_t>(uniform_words_per_value<T>);
  constexpr int64_t per_chunk = kPhiloxChunkWords / wpv;
  std::array<uint32_t, kPhiloxChunkWords> buf;
  for (int64_t v0 = begin; v0 < end;) {
    const int64_t v1 = end - v0 > per_chunk ? v0 + per_chunk : end;
    fill_uint32(seed, start_block, static_cast<uint64_t>(v0) * wpv, static_cast<uint64_t>(v1) * wpv,
                buf.data());
    for (int64_t v = v0; v < v1; ++v) {
      const uint32_t* w = buf.data() + (v - v0) * wpv;
      double u;
      if constexpr (std::is_same_v<T, float>)
        u = uint32_to_unit_float(w[0]);
      else
        u = uint32x2_to_unit_double(w[0], w[1]);
      out[v - begin] = uniform_from_unit<T>(u, low, high);
    }
    v0 = v1;
  }
}

// Values [begin, end) of a normal request; out[0] is value `begin`.
template <class T>
void normal_range(uint64_t seed, uint64_t start_block, int64_t begin, int64_t end, T* out,
                  double mean, double stddev) {
  static_assert(is_philox_real_v<T>, "normal_range supports float and double");
  if (begin >= end) return;
  constexpr int64_t wpp = static_cast<int64_t>(normal_words_per_pair<T>);
  constexpr int64_t per_chunk = kPhiloxChunkWords / wpp;
  constexpr double two_pi = 2.0 * std::numbers::pi;
  std::array<uint32_t, kPhiloxChunkWords> buf;
  const int64_t pair_end = (end - 1) / 2 + 1;
  for (int64_t p0 = begin / 2; p0 < pair_end;) {
    const int64_t p1 = pair_end - p0 > per_chunk ? p0 + per_chunk : pair_end;
    fill_uint32(seed, start_block, static_cast<uint64_t>(p0) * wpp, static_cast<uint64_t>(p1) * wpp,
                buf.data());
    for (int64_t p = p0; p < p1; ++p) {
      const uint32_t* w = buf.data() + (p - p0) * wpp;
      double ua, ub;
      if constexpr (std::is_same_v<T, float>) {
        ua = uint32_to_unit_float(w[0]);
        ub = uint32_to_unit_float(w[1]);
      } else {
        ua = uint32x2_to_unit_double(w[0], w[1]);
        ub = uint32x2_to_unit_double(w[2], w[3]);
      }
      const double r = std::sqrt(-2.0 * std::log(1.0 - ua));
      const double theta = two_pi * ub;
      const int64_t i0 = 2 * p, i1 = 2 * p + 1;
      if (i0 >= begin) out[i0 - begin] = static_cast<T>(mean + stddev * (r * std::cos(theta)));
      if (i1 < end) out[i1 - begin] = static_cast<T>(mean + stddev * (r * std::sin(theta)));
    }
    p0 = p1;
  }
}

// Values [begin, end) of a randint request; out[0] is value `begin`.
// Precondition: low < high.
template <class T>
void randint_range(uint64_t seed, uint64_t start_block, int64_t begin, int64_t end, T* out,
                   int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  // 2^64 mod range: the count of low products that would over-represent some
  // outputs; rejecting exactly those makes every output equally likely.
  const uint64_t threshold = (uint64_t{0} - range) % range;
  const auto key = philox_key(seed);
  constexpr int64_t per_chunk = kPhiloxChunkWords / static_cast<int64_t>(randint_words_per_value);
  std::array<uint32_t, kPhiloxChunkWords> buf;
  for (int64_t v0 = begin; v0 < end;) {
    const int64_t v1 = end - v0 > per_chunk ? v0 + per_chunk : end;
    fill_uint32(seed, start_block, static_cast<uint64_t>(v0) * 2, static_cast<uint64_t>(v1) * 2,
                buf.data());
    for (int64_t v = v0; v < v1; ++v) {
      const uint32_t* w = buf.data() + (v - v0) * 2;
      uint64_t x = (static_cast<uint64_t>(w[1]) << 32) | w[0];
      uint64_t hi, lo;
      mul_64x64_128(x, range, hi, lo);
      for (uint32_t attempt = 1; lo < threshold; ++attempt) {
        const uint64_t j = static_cast<uint64_t>(v);
        const auto r = philox4x32_10(philox_counter(start_block + j / 2, attempt), key);
        const unsigned k = 2 * static_cast<unsigned>(j % 2);
        x = (static_cast<uint64_t>(r[k + 1]) << 32) | r[k];
        mul_64x64_128(x, range, hi, lo);
      }
      out[v - begin] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + hi));
    }
    v0 = v1;
  }
}

}  // namespace detail

class Generator {
 public:
  // A consistent snapshot of what a request may use; pass both to the
  // reel::detail range kernels.
  struct Reservation {
    uint64_t seed;
    uint64_t start_block;
  };

  explicit Generator(uint64_t seed) noexcept : seed_(seed), offset_(0) {}

  // Copies snapshot the other generator's state; the mutex is never shared.
  Generator(const Generator& other) : seed_(0), offset_(0) {
    std::lock_guard<std::mutex> lock(other.mu_);
    seed_.store(other.seed_.load());
    offset_.store(other.offset_.load());
  }
  Generator& operator=(const Generator& other) {
    if (this != &other) {
      std::scoped_lock lock(mu_, other.mu_);
      seed_.store(other.seed_.load());
      offset_.store(other.offset_.load());
    }
    return *this;
  }

  uint64_t seed() const noexcept { return seed_.load(); }
  uint64_t offset() const noexcept { return offset_.load(); }

  void set_offset(uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    offset_.store(offset);
  }

  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_.store(seed);
    offset_.store(0);
  }

  Reservation reserve(uint64_t nwords) {
    detail::capture_refuse("the function draws random numbers (a replay would repeat them)");
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t start = offset_.load();
    offset_.store(start + detail::philox_blocks_for_words(nwords));
    return {seed_.load(), start};
  }

  uint64_t reserve_blocks(uint64_t nwords) { return reserve(nwords).start_block; }

 private:
  mutable std::mutex mu_;
  std::atomic<uint64_t> seed_;
  std::atomic<uint64_t> offset_;
};

// Fills out[0..n) with uniform values in [low, high). Throws
// std::invalid_argument if n < 0 or !(low <= high).
template <class T>
void fill_uniform(Generator& gen, T* out, int64_t n, double low, double high) {
  static_assert(detail::is_philox_real_v<T>, "fill_uniform supports float and double");
  if (n < 0) throw std::invalid_argument("reel::fill_uniform: negative count");
  if (!(low <= high)) throw std::invalid_argument("reel::fill_uniform: requires low <= high");
  const auto r = gen.reserve(detail::uniform_words<T>(n));
  detail::uniform_range<T>(r.seed, r.start_block, 0, n, out, low, high);
}

// Fills out[0..n) with N(mean, stddev^2) samples. Throws std::invalid_argument
// if n < 0 or !(stddev >= 0).
template <class T>
void fill_normal(Generator& gen, T* out, int64_t n, double mean, double stddev) {
  static_assert(detail::is_philox_real_v<T>, "fill_normal supports float and double");
  if (n < 0) throw std::invalid_argument("reel::fill_normal: negative count");
  if (!(stddev >= 0.0)) throw std::invalid_argument("reel::fill_normal: requires stddev >= 0");
  const auto r = gen.reserve(detail::normal_words<T>(n));
  detail::normal_range<T>(r.seed, r.start_block, 0, n, out, mean, stddev);
}

// Fills out[0..n) with integers uniform in [low, high), converted to T.
// Throws std::invalid_argument if n < 0 or low >= high.
template <class T>
void fill_randint(Generator& gen, T* out, int64_t n, int64_t low, int64_t high) {
  if (n < 0) throw std::invalid_argument("reel::fill_randint: negative count");
  if (low >= high) throw std::invalid_argument("reel::fill_randint: requires low < high");
  const auto r = gen.reserve(detail::randint_words(n));
  detail::randint_range<T>(r.seed, r.start_block, 0, n, out, low, high);
}

// Same default seed as PyTorch's CPU generator, for familiarity.
inline constexpr uint64_t default_seed = 67280421310721ULL;

REEL_INLINE Generator& default_generator();

inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "philox-inl.hpp"
#endif
