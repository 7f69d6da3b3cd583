// The element types of the microscaling (MX / NVFP4) recipes, as PyTorch 2.15 defines them:
//   float8_e8m0fnu    an unsigned power of two 2^(b - 127), b = 0..254 (the block scales of
//                     MX formats); 0xFF is NaN; no zero, no infinity, no sign.
//   float4_e2m1fn_x2  two FP4 e2m1 values in one byte (NVFP4 / MXFP4 data), the first in the
//                     low nibble; each is +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; no NaN, no infinity.
#pragma once
#include "config.hpp"

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "float8.hpp"

namespace reel::inline REEL_ABI {

struct float8_e8m0fnu {
  constexpr float8_e8m0fnu() noexcept = default;  // (bits 0: 2^-127, as PyTorch's)
  // From float, as PyTorch rounds: the exponent, plus one where the mantissa's first dropped
  // bit is set and the rest or the implicit bit is (to nearest, ties away from the smaller
  // power for normal numbers); the sign is ignored; NaN, infinities and what rounds past 2^127
  // become NaN; zero and numbers below 2^-127 become 2^-127.
  constexpr explicit float8_e8m0fnu(float v) noexcept : x_(encode(std::bit_cast<std::uint32_t>(v))) {}
  // (a double is rounded to float first, as PyTorch converts float64 tensors)
  constexpr explicit float8_e8m0fnu(double v) noexcept : float8_e8m0fnu(static_cast<float>(v)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  constexpr explicit float8_e8m0fnu(I v) noexcept : float8_e8m0fnu(static_cast<float>(v)) {}

  static constexpr float8_e8m0fnu from_bits(std::uint8_t b) noexcept {
    float8_e8m0fnu r;
    r.x_ = b;
    return r;
  }
  constexpr std::uint8_t bits() const noexcept { return x_; }
  constexpr float to_float() const noexcept {
    if (x_ == 0xFF) return std::bit_cast<float>(std::uint32_t{0x7F800001});  // (PyTorch's NaN bits)
    return std::bit_cast<float>(x_ == 0 ? std::uint32_t{0x00400000} : std::uint32_t{x_} << 23);
  }
  constexpr double to_double() const noexcept { return to_float(); }
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  constexpr explicit operator T() const noexcept {
    return static_cast<T>(to_float());
  }
  friend constexpr bool operator==(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return a.to_float() == b.to_float(); }
  friend constexpr bool operator!=(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return !(a == b); }
  friend constexpr bool operator<(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return a.to_float() < b.to_float(); }
  friend constexpr bool operator<=(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return a.to_float() <= b.to_float(); }
  friend constexpr bool operator>(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return a.to_float() > b.to_float(); }
  friend constexpr bool operator>=(float8_e8m0fnu a, float8_e8m0fnu b) noexcept { return a.to_float() >= b.to_float(); }

 private:
  static constexpr std::uint8_t encode(std::uint32_t f) noexcept {
    const std::uint32_t e = (f >> 23) & 0xFF;
    if (e == 0xFF) return 0xFF;
    const bool guard = (f & 0x400000) != 0, rest = (f & 0x3FFFFF) != 0;
    const bool up = guard && (rest || e > 0);  // e > 0: the implicit leading bit is 1
    return static_cast<std::uint8_t>(e + (up ? 1 : 0));  // 254 rounded up is 255: NaN
  }
  std::uint8_t x_ = 0;
};

struct float4_e2m1fn_x2 {
  constexpr float4_e2m1fn_x2() noexcept = default;
  // Two values, each rounded to e2m1 as encode() does; `first` goes to the low nibble.
  constexpr float4_e2m1fn_x2(float first, float second) noexcept
      : x_(static_cast<std::uint8_t>(encode(first) | (encode(second) << 4))) {}

  static constexpr float4_e2m1fn_x2 from_bits(std::uint8_t b) noexcept {
    float4_e2m1fn_x2 r;
    r.x_ = b;
    return r;
  }
  constexpr std::uint8_t bits() const noexcept { return x_; }
  constexpr float first() const noexcept { return decode(x_ & 0xF); }
  constexpr float second() const noexcept { return decode(x_ >> 4); }

  // One e2m1 code (4 bits: sign, 2 exponent bits with bias 1, 1 mantissa bit) from float, as
  // the FP4 data of PyTorch's tests is made (torch.testing's _f32_to_floatx_unpacked):
  // rounded to nearest, ties to even; magnitudes from 6 up (and infinities) saturate to 6.
  // NaN, which e2m1 cannot hold, takes that function's normal-range arithmetic on its bits
  // (+-1, +-1.5 or +-2, by payload).
  static constexpr std::uint8_t encode(float v) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    const std::uint8_t sign = static_cast<std::uint8_t>((u >> 31) << 3);
    const std::uint32_t a = u & 0x7FFFFFFF;
    const float m = std::bit_cast<float>(a);
    std::uint32_t code;
    if (m >= 6.0f) {
      code = 7;
    } else if (m < 1.0f) {
      // subnormal e2m1 (0 and 0.5) and 1.0: m rounded to a multiple of 0.5 by adding 2^22,
      // whose float spacing is 0.5 (one rounding, to nearest even)
      code = std::bit_cast<std::uint32_t>(m + 4194304.0f) - 0x4A800000u;
    } else {  // normal (and NaN): rebias the exponent, round the mantissa to 1 bit, nearest even
      const std::uint32_t odd = (a >> 22) & 1;
      code = ((a - (std::uint32_t{126} << 23) + 0x1FFFFF + odd) >> 22) & 0xF;
    }
    return static_cast<std::uint8_t>((code & 0xF) | sign);
  }
  static constexpr float decode(std::uint8_t c) noexcept {
    constexpr float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = mag[c & 7];
    return (c & 8) ? -m : m;
  }
  friend constexpr bool operator==(float4_e2m1fn_x2 a, float4_e2m1fn_x2 b) noexcept { return a.x_ == b.x_; }
  friend constexpr bool operator!=(float4_e2m1fn_x2 a, float4_e2m1fn_x2 b) noexcept { return a.x_ != b.x_; }

 private:
  std::uint8_t x_ = 0;
};

static_assert(sizeof(float8_e8m0fnu) == 1 && sizeof(float4_e2m1fn_x2) == 1);
static_assert(std::is_trivially_copyable_v<float8_e8m0fnu> && std::is_trivially_copyable_v<float4_e2m1fn_x2>);

constexpr bool isnan(float8_e8m0fnu v) noexcept { return v.bits() == 0xFF; }
constexpr bool isinf(float8_e8m0fnu) noexcept { return false; }
constexpr bool isfinite(float8_e8m0fnu v) noexcept { return v.bits() != 0xFF; }

}  // namespace reel

namespace std {
template <>
struct numeric_limits<reel::float8_e8m0fnu> {
  using T = reel::float8_e8m0fnu;
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = false;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_absent;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 1;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 2;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -126;  // 2^-127 = 0.5 * 2^-126
  static constexpr int min_exponent10 = -38;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr T min() noexcept { return T::from_bits(0x00); }     // 2^-127
  static constexpr T lowest() noexcept { return T::from_bits(0x00); }  // (unsigned: the smallest)
  static constexpr T max() noexcept { return T::from_bits(0xFE); }     // 2^127
  static constexpr T epsilon() noexcept { return T::from_bits(0x80); } // 2: the step from 1
  static constexpr T round_error() noexcept { return T::from_bits(0x7F); }
  static constexpr T infinity() noexcept { return T::from_bits(0xFF); }  // none: NaN
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0xFF); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0xFF); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x00); }
};
}  // namespace std

namespace Eigen {
template <>
struct NumTraits<reel::float8_e8m0fnu> : reel_float8_detail::float8_num_traits<reel::float8_e8m0fnu> {
  enum { IsSigned = 0 };
};
}  // namespace Eigen
