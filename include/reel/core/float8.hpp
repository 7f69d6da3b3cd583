// Exact, single-rounding conversions from double to narrow binary floating
// point formats (binary16, bfloat16, OCP float8 e4m3fn / e5m2), plus the two
// float8 scalar types.
#pragma once
#include "config.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <Eigen/Core>
#include "hd.hpp"

namespace reel::inline REEL_ABI {

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

namespace detail {

// Only the two NaN/inf conventions that real formats use are supported:
// IEEE-like (inf = exp all ones, mantissa 0; NaN = exp all ones, mantissa != 0)
// and e4m3fn-like (no inf; only S.1...1.1...1 is NaN, the rest of the top
// binade is finite).
template <int ExpBits, int ManBits, bool HasInf, bool FnNaN>
struct small_float_format {
  static_assert(ExpBits >= 2 && ExpBits <= 8, "exponent width out of supported range");
  static_assert(ManBits >= 1 && ManBits <= 23, "mantissa width out of supported range");
  static_assert(HasInf != FnNaN, "format must be IEEE-like or e4m3fn-like");

  static constexpr int exp_bits = ExpBits;
  static constexpr int man_bits = ManBits;
  static constexpr bool has_inf = HasInf;
  static constexpr int bias = (1 << (ExpBits - 1)) - 1;
  static constexpr int emin = 1 - bias;
  static constexpr std::uint32_t sign_mask = std::uint32_t{1} << (ExpBits + ManBits);
  static constexpr std::uint32_t man_mask = (std::uint32_t{1} << ManBits) - 1;
  static constexpr std::uint32_t exp_all_ones = ((std::uint32_t{1} << ExpBits) - 1) << ManBits;
  static constexpr std::uint32_t inf_bits = exp_all_ones;  // meaningful only if HasInf
  static constexpr std::uint32_t nan_bits =
      FnNaN ? (exp_all_ones | man_mask) : (exp_all_ones | (std::uint32_t{1} << (ManBits - 1)));
  static constexpr std::uint32_t max_finite_bits = FnNaN ? nan_bits - 1 : exp_all_ones - 1;
};

// std::bit_width, also in CUDA device code: there nvcc 13 folds libstdc++'s std::bit_width
// (a __builtin_clzll underneath) to 0, which broke every device-side rounding to half,
// bfloat16 and float8 until it was seen on a GPU (the PTX computed floor(log2|v|) as e2 - 1).
constexpr int bit_width_u64(std::uint64_t x) noexcept {
#ifdef __CUDA_ARCH__
  if (!std::is_constant_evaluated()) return 64 - __clzll(static_cast<long long>(x));
  int n = 0;
  for (; x != 0; x >>= 1) ++n;
  return n;
#else
  return static_cast<int>(std::bit_width(x));
#endif
}

// 2^k for k in the normal double range, usable in constant expressions
// (std::ldexp is not constexpr in C++20).
constexpr double exact_pow2(int k) noexcept {
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

template <class Fmt>
constexpr std::uint32_t round_double_to_format(double v, bool saturate) noexcept {
  const auto u = std::bit_cast<std::uint64_t>(v);
  const std::uint32_t sign = (u >> 63) != 0 ? Fmt::sign_mask : 0u;
  const int dexp = static_cast<int>((u >> 52) & 0x7FF);
  std::uint64_t sig = u & ((std::uint64_t{1} << 52) - 1);

  if (dexp == 0x7FF) {
    if (sig != 0) return sign | Fmt::nan_bits;
    if (saturate) return sign | Fmt::max_finite_bits;
    return sign | (Fmt::has_inf ? Fmt::inf_bits : Fmt::nan_bits);
  }
  if (dexp == 0 && sig == 0) return sign;

  // v = sig * 2^e2 exactly.
  int e2 = -1074;
  if (dexp != 0) {
    sig |= std::uint64_t{1} << 52;
    e2 = dexp - 1075;
  }
  const int ev = e2 + bit_width_u64(sig) - 1;  // floor(log2|v|)
  // Target spacing is 2^(max(ev, emin) - M); below emin the spacing is fixed,
  // which yields subnormals without a separate code path.
  const int eq = ev > Fmt::emin ? ev : Fmt::emin;
  const int shift = eq - Fmt::man_bits - e2;

  std::uint64_t n = 0;  // |v| / spacing, rounded to nearest even
  if (shift <= 0) {
    n = sig << -shift;  // cannot overflow: shift >= bit_width(sig) - 1 - M
  } else if (shift < 64) {
    n = sig >> shift;
    const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t halfway = std::uint64_t{1} << (shift - 1);
    if (rem > halfway || (rem == halfway && (n & 1) != 0)) ++n;
  }
  // else: |v| < 2^(e2+53) <= half a spacing, so n stays 0.

  // Adding n (which may equal 2^(M+1) after a carry) to the biased exponent
  // field lets the carry propagate into the exponent, and n < 2^M with
  // eq == emin encodes a subnormal, so one formula covers every case.
  const std::uint64_t mag = (static_cast<std::uint64_t>(eq - Fmt::emin) << Fmt::man_bits) + n;
  if (mag > Fmt::max_finite_bits) {
    if (saturate) return sign | Fmt::max_finite_bits;
    return sign | (Fmt::has_inf ? Fmt::inf_bits : Fmt::nan_bits);
  }
  return sign | static_cast<std::uint32_t>(mag);
}

template <class Fmt>
constexpr double decode_format_to_double(std::uint32_t bits) noexcept {
  const bool neg = (bits & Fmt::sign_mask) != 0;
  const std::uint32_t mag = bits & (Fmt::sign_mask - 1);
  const std::uint32_t e = mag >> Fmt::man_bits;
  const std::uint32_t m = mag & Fmt::man_mask;
  double r = 0.0;
  if (!Fmt::has_inf && mag == Fmt::nan_bits) {
    r = std::numeric_limits<double>::quiet_NaN();
  } else if (Fmt::has_inf && mag >= Fmt::inf_bits) {
    r = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    r = static_cast<double>(m) * exact_pow2(Fmt::emin - Fmt::man_bits);
  } else {
    r = static_cast<double>(m | (Fmt::man_mask + 1)) *
        exact_pow2(static_cast<int>(e) - Fmt::bias - Fmt::man_bits);
  }
  return neg ? -r : r;
}

// Rounds v once, to nearest with ties to even, into the format with the given
// exponent/mantissa widths; returns the bit pattern in the low 1+E+M bits.
// saturate=true maps finite overflow and +-inf to +-max finite (OCP "satfinite").
template <int ExpBits, int ManBits, bool HasInf, bool FnNaN>
constexpr std::uint32_t round_double_to_bits(double v, bool saturate = false) noexcept {
  return round_double_to_format<small_float_format<ExpBits, ManBits, HasInf, FnNaN>>(v, saturate);
}

template <int ExpBits, int ManBits, bool HasInf, bool FnNaN>
constexpr double decode_bits_to_double(std::uint32_t bits) noexcept {
  return decode_format_to_double<small_float_format<ExpBits, ManBits, HasInf, FnNaN>>(bits);
}

using binary16_format = small_float_format<5, 10, true, false>;
using bfloat16_format = small_float_format<8, 7, true, false>;
using e4m3fn_format = small_float_format<4, 3, false, true>;
using e5m2_format = small_float_format<5, 2, true, false>;

constexpr std::uint16_t round_to_half_bits(double v) noexcept {
  return static_cast<std::uint16_t>(round_double_to_format<binary16_format>(v, false));
}

constexpr std::uint16_t round_to_bfloat16_bits(double v) noexcept {
  return static_cast<std::uint16_t>(round_double_to_format<bfloat16_format>(v, false));
}

// Eigen's half(double)/bfloat16(double) go through float and so round twice.
REEL_HD inline half round_to_half(double v) noexcept {
  return Eigen::numext::bit_cast<Eigen::half>(round_to_half_bits(v));
}

REEL_HD inline bfloat16 round_to_bfloat16(double v) noexcept {
  return Eigen::numext::bit_cast<Eigen::bfloat16>(round_to_bfloat16_bits(v));
}

// Shared implementation of the float8 types; Derived is the public struct so
// that from_bits and the operators traffic in the concrete type.
template <class Derived, class Fmt>
class float8_base {
 public:
  using format = Fmt;

  constexpr float8_base() noexcept = default;
  constexpr explicit float8_base(double v) noexcept
      : x_(static_cast<std::uint8_t>(round_double_to_format<Fmt>(v, false))) {}
  constexpr explicit float8_base(float v) noexcept : float8_base(static_cast<double>(v)) {}
  // Any integer that fits in a double without rounding is far beyond the
  // float8 range anyway, so the double intermediate cannot change the result.
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  constexpr explicit float8_base(I v) noexcept : float8_base(static_cast<double>(v)) {}

  static constexpr Derived from_bits(std::uint8_t b) noexcept {
    Derived d{};
    static_cast<float8_base&>(d).x_ = b;
    return d;
  }
  constexpr std::uint8_t bits() const noexcept { return x_; }

  constexpr double to_double() const noexcept { return decode_format_to_double<Fmt>(x_); }

  // Every float8 value is exact in float and double; other targets get one
  // rounding (or UB for NaN/out-of-range ints, as with double).
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  constexpr explicit operator T() const noexcept {
    return static_cast<T>(to_double());
  }

  friend constexpr bool operator==(const Derived& a, const Derived& b) noexcept {
    return a.to_double() == b.to_double();
  }
  friend constexpr bool operator!=(const Derived& a, const Derived& b) noexcept {
    return a.to_double() != b.to_double();
  }
  friend constexpr bool operator<(const Derived& a, const Derived& b) noexcept {
    return a.to_double() < b.to_double();
  }
  friend constexpr bool operator<=(const Derived& a, const Derived& b) noexcept {
    return a.to_double() <= b.to_double();
  }
  friend constexpr bool operator>(const Derived& a, const Derived& b) noexcept {
    return a.to_double() > b.to_double();
  }
  friend constexpr bool operator>=(const Derived& a, const Derived& b) noexcept {
    return a.to_double() >= b.to_double();
  }

 private:
  std::uint8_t x_ = 0;
};

}  // namespace detail

// OCP 8-bit float E4M3 "fn": bias 7, no infinities, NaN only at S.1111.111,
// max finite 448.
struct float8_e4m3fn : detail::float8_base<float8_e4m3fn, detail::e4m3fn_format> {
  using detail::float8_base<float8_e4m3fn, detail::e4m3fn_format>::float8_base;
};

// OCP 8-bit float E5M2: IEEE-like (bias 15, infinities, NaNs), max finite 57344.
struct float8_e5m2 : detail::float8_base<float8_e5m2, detail::e5m2_format> {
  using detail::float8_base<float8_e5m2, detail::e5m2_format>::float8_base;
};

static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e5m2) == 1);
static_assert(std::is_trivially_copyable_v<float8_e4m3fn> && std::is_trivially_copyable_v<float8_e5m2>);

constexpr float8_e4m3fn to_float8_e4m3fn(double v, bool saturate) noexcept {
  return float8_e4m3fn::from_bits(
      static_cast<std::uint8_t>(detail::round_double_to_format<detail::e4m3fn_format>(v, saturate)));
}

constexpr float8_e5m2 to_float8_e5m2(double v, bool saturate) noexcept {
  return float8_e5m2::from_bits(
      static_cast<std::uint8_t>(detail::round_double_to_format<detail::e5m2_format>(v, saturate)));
}

constexpr bool isnan(float8_e4m3fn v) noexcept { return (v.bits() & 0x7F) == 0x7F; }
constexpr bool isnan(float8_e5m2 v) noexcept { return (v.bits() & 0x7F) > 0x7C; }
constexpr bool isinf(float8_e4m3fn) noexcept { return false; }
constexpr bool isinf(float8_e5m2 v) noexcept { return (v.bits() & 0x7F) == 0x7C; }
constexpr bool isfinite(float8_e4m3fn v) noexcept { return !isnan(v); }
constexpr bool isfinite(float8_e5m2 v) noexcept { return (v.bits() & 0x7F) < 0x7C; }

template <class T>
struct is_float8 : std::bool_constant<std::is_same_v<std::remove_cv_t<T>, float8_e4m3fn> ||
                                      std::is_same_v<std::remove_cv_t<T>, float8_e5m2>> {};
template <class T>
inline constexpr bool is_float8_v = is_float8<T>::value;

namespace detail {

// Conversion from double that rounds exactly once for every reel scalar.
template <class T>
REEL_HD inline T round_from_double(double v) {
  if constexpr (std::is_same_v<T, half>) {
    return round_to_half(v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return round_to_bfloat16(v);
  } else if constexpr (std::is_same_v<T, float8_e4m3fn>) {
    return to_float8_e4m3fn(v, false);
  } else if constexpr (std::is_same_v<T, float8_e5m2>) {
    return to_float8_e5m2(v, false);
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace detail
}  // namespace reel

namespace std {

template <>
struct numeric_limits<reel::float8_e4m3fn> {
  using T = reel::float8_e4m3fn;

  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = false;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 4;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 3;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -5;
  static constexpr int min_exponent10 = -1;
  static constexpr int max_exponent = 9;
  static constexpr int max_exponent10 = 2;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() noexcept { return T::from_bits(0x08); }  // 2^-6
  static constexpr T lowest() noexcept { return T::from_bits(0xFE); }  // -448
  static constexpr T max() noexcept { return T::from_bits(0x7E); }  // 448
  static constexpr T epsilon() noexcept { return T::from_bits(0x20); }  // 2^-3
  static constexpr T round_error() noexcept { return T::from_bits(0x30); }  // 0.5
  // No infinity exists; NaN (rather than the conventional zero) keeps code
  // that uses infinity() as a sentinel from silently producing finite results.
  static constexpr T infinity() noexcept { return T::from_bits(0x7F); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7F); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7F); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x01); }  // 2^-9
};

template <>
struct numeric_limits<reel::float8_e5m2> {
  using T = reel::float8_e5m2;

  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr float_denorm_style has_denorm = denorm_present;
  static constexpr bool has_denorm_loss = false;
  static constexpr float_round_style round_style = round_to_nearest;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 3;
  static constexpr int digits10 = 0;
  static constexpr int max_digits10 = 2;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;

  static constexpr T min() noexcept { return T::from_bits(0x04); }  // 2^-14
  static constexpr T lowest() noexcept { return T::from_bits(0xFB); }  // -57344
  static constexpr T max() noexcept { return T::from_bits(0x7B); }  // 57344
  static constexpr T epsilon() noexcept { return T::from_bits(0x34); }  // 2^-2
  static constexpr T round_error() noexcept { return T::from_bits(0x38); }  // 0.5
  static constexpr T infinity() noexcept { return T::from_bits(0x7C); }
  static constexpr T quiet_NaN() noexcept { return T::from_bits(0x7E); }
  static constexpr T signaling_NaN() noexcept { return T::from_bits(0x7D); }
  static constexpr T denorm_min() noexcept { return T::from_bits(0x01); }  // 2^-16
};

}  // namespace std

namespace Eigen {

namespace reel_float8_detail {
template <class T>
struct float8_num_traits {
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 1,
    MulCost = 1
  };
  using Real = T;
  using NonInteger = T;
  using Literal = T;
  using Nested = T;

  static constexpr int digits10() { return std::numeric_limits<T>::digits10; }
  static constexpr int max_digits10() { return std::numeric_limits<T>::max_digits10; }
  static constexpr int digits() { return std::numeric_limits<T>::digits; }
  static constexpr int min_exponent() { return std::numeric_limits<T>::min_exponent; }
  static constexpr int max_exponent() { return std::numeric_limits<T>::max_exponent; }
  static constexpr T epsilon() { return std::numeric_limits<T>::epsilon(); }
  // Two ulps at 1: anything tighter is below the format's own resolution.
  static constexpr T dummy_precision() {
    return T(2.0 * static_cast<double>(std::numeric_limits<T>::epsilon()));
  }
  static constexpr T highest() { return (std::numeric_limits<T>::max)(); }
  static constexpr T lowest() { return std::numeric_limits<T>::lowest(); }
  static constexpr T infinity() { return std::numeric_limits<T>::infinity(); }
  static constexpr T quiet_NaN() { return std::numeric_limits<T>::quiet_NaN(); }
};
}  // namespace reel_float8_detail

template <>
struct NumTraits<reel::float8_e4m3fn> : reel_float8_detail::float8_num_traits<reel::float8_e4m3fn> {};
template <>
struct NumTraits<reel::float8_e5m2> : reel_float8_detail::float8_num_traits<reel::float8_e5m2> {};

}  // namespace Eigen
