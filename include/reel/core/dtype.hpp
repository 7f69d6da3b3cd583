#pragma once
// Element types, the ScalarType enum, and PyTorch's type promotion resolved at compile time.
#include "config.hpp"
#include <Eigen/Core>
#include <complex>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "errors.hpp"
#include "hd.hpp"
#include "float8.hpp"
#include "float_mx.hpp"

namespace reel::inline REEL_ABI {

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

enum class ScalarType {
  Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
  Half, BFloat16, Float8_e4m3fn, Float8_e5m2, Float, Double, ComplexFloat, ComplexDouble,
  Float8_e8m0fnu, Float4_e2m1fn_x2
};

template <class T> struct scalar_type_of;
#define REEL_DTYPE(T, E, NAME, SIZE)                                     \
  template <> struct scalar_type_of<T> {                                 \
    static constexpr ScalarType value = ScalarType::E;                  \
    static constexpr std::string_view name = NAME;                      \
  };                                                                     \
  namespace detail { template <> struct type_of_impl<ScalarType::E> { using type = T; }; }

namespace detail { template <ScalarType S> struct type_of_impl; }
REEL_DTYPE(bool, Bool, "torch.bool", 1)
REEL_DTYPE(int8_t, Int8, "torch.int8", 1)
REEL_DTYPE(int16_t, Int16, "torch.int16", 2)
REEL_DTYPE(int32_t, Int32, "torch.int32", 4)
REEL_DTYPE(int64_t, Int64, "torch.int64", 8)
REEL_DTYPE(uint8_t, UInt8, "torch.uint8", 1)
REEL_DTYPE(uint16_t, UInt16, "torch.uint16", 2)
REEL_DTYPE(uint32_t, UInt32, "torch.uint32", 4)
REEL_DTYPE(uint64_t, UInt64, "torch.uint64", 8)
REEL_DTYPE(half, Half, "torch.float16", 2)
REEL_DTYPE(bfloat16, BFloat16, "torch.bfloat16", 2)
REEL_DTYPE(float8_e4m3fn, Float8_e4m3fn, "torch.float8_e4m3fn", 1)
REEL_DTYPE(float8_e5m2, Float8_e5m2, "torch.float8_e5m2", 1)
REEL_DTYPE(float, Float, "torch.float32", 4)
REEL_DTYPE(double, Double, "torch.float64", 8)
REEL_DTYPE(std::complex<float>, ComplexFloat, "torch.complex64", 8)
REEL_DTYPE(std::complex<double>, ComplexDouble, "torch.complex128", 16)
REEL_DTYPE(float8_e8m0fnu, Float8_e8m0fnu, "torch.float8_e8m0fnu", 1)
REEL_DTYPE(float4_e2m1fn_x2, Float4_e2m1fn_x2, "torch.float4_e2m1fn_x2", 1)
#undef REEL_DTYPE

template <ScalarType S> using type_of = typename detail::type_of_impl<S>::type;

template <class T> concept Element = requires { scalar_type_of<T>::value; };
template <class T> inline constexpr ScalarType scalar_type_v = scalar_type_of<T>::value;

// Calls f(T{}) with the C++ type of a runtime ScalarType.
template <class F>
decltype(auto) visit_dtype(ScalarType s, F&& f) {
  switch (s) {
#define REEL_CASE(E) case ScalarType::E: return f(type_of<ScalarType::E>{});
    REEL_CASE(Bool) REEL_CASE(Int8) REEL_CASE(Int16) REEL_CASE(Int32) REEL_CASE(Int64)
    REEL_CASE(UInt8) REEL_CASE(UInt16) REEL_CASE(UInt32) REEL_CASE(UInt64) REEL_CASE(Half)
    REEL_CASE(BFloat16) REEL_CASE(Float8_e4m3fn) REEL_CASE(Float8_e5m2) REEL_CASE(Float)
    REEL_CASE(Double) REEL_CASE(ComplexFloat) REEL_CASE(ComplexDouble) REEL_CASE(Float8_e8m0fnu)
    REEL_CASE(Float4_e2m1fn_x2)
#undef REEL_CASE
  }
  raise<value_error>("unknown ScalarType ", static_cast<int>(s));
}

inline std::string_view dtype_name(ScalarType s) {
  return visit_dtype(s, [](auto v) { return scalar_type_of<decltype(v)>::name; });
}
inline int64_t element_size(ScalarType s) {
  return visit_dtype(s, [](auto v) { return static_cast<int64_t>(sizeof(v)); });
}

template <class T> struct is_complex : std::false_type {};
template <class T> struct is_complex<std::complex<T>> : std::true_type {};
template <class T> inline constexpr bool is_complex_v = is_complex<T>::value;

template <class T> inline constexpr bool is_fp8_v =
    std::is_same_v<T, float8_e4m3fn> || std::is_same_v<T, float8_e5m2> || std::is_same_v<T, float8_e8m0fnu>;
// Two FP4 values per element: no arithmetic, no conversions (pack_fp4 / unpack_fp4).
template <class T> inline constexpr bool is_fp4_v = std::is_same_v<T, float4_e2m1fn_x2>;
template <class T> inline constexpr bool is_reduced_float_v =
    std::is_same_v<T, half> || std::is_same_v<T, bfloat16> || is_fp8_v<T>;
template <class T> inline constexpr bool is_floating_v =
    std::is_floating_point_v<T> || is_reduced_float_v<T>;
template <class T> inline constexpr bool is_bool_v = std::is_same_v<T, bool>;
template <class T> inline constexpr bool is_integral_v = std::is_integral_v<T> && !is_bool_v<T>;
// uint16/32/64 are "shell" types in PyTorch: they only promote with themselves and floats.
template <class T> inline constexpr bool is_shell_uint_v =
    std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>;

// 0 bool, 1 integer, 2 floating, 3 complex.
template <class T> inline constexpr int category_v =
    is_bool_v<T> ? 0 : is_integral_v<T> ? 1 : is_floating_v<T> ? 2 : 3;

template <class T> struct real_type { using type = T; };
template <class T> struct real_type<std::complex<T>> { using type = T; };
template <class T> using real_t = typename real_type<T>::type;

template <class T> struct complex_of { using type = std::complex<T>; };
template <> struct complex_of<half> { using type = std::complex<float>; };
template <> struct complex_of<bfloat16> { using type = std::complex<float>; };
template <class T> using complex_of_t = typename complex_of<T>::type;

// Type of results of float-valued functions (exp, sqrt, true division): integers become
// the default float dtype, float32, as in PyTorch.
template <class T> using to_float_t = std::conditional_t<category_v<T> <= 1, float, T>;

// The type arithmetic is carried out in (PyTorch's "opmath"): reduced floats compute in float.
template <class T> using compute_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

namespace detail {
template <class A, class B> struct promote_impl;

template <class A, class B>
constexpr auto promote_pick() {
  static_assert(!is_fp4_v<A> && !is_fp4_v<B>,
                "reel: float4_e2m1fn_x2 packs two FP4 values per element; unpack_fp4() them to compute");
  if constexpr (std::is_same_v<A, B>) {
    return std::type_identity<A>{};
  } else if constexpr (is_fp8_v<A> || is_fp8_v<B>) {
    static_assert(!(is_fp8_v<A> || is_fp8_v<B>),
                  "reel: type promotion of float8 types with other types is not supported "
                  "(as in PyTorch): convert explicitly with .to<float>()");
    return std::type_identity<A>{};
  } else if constexpr (is_bool_v<A>) {
    return std::type_identity<B>{};
  } else if constexpr (is_bool_v<B>) {
    return std::type_identity<A>{};
  } else if constexpr (category_v<A> != category_v<B>) {
    using Hi = std::conditional_t<(category_v<A> > category_v<B>), A, B>;
    using Lo = std::conditional_t<(category_v<A> > category_v<B>), B, A>;
    if constexpr (is_complex_v<Hi> && is_floating_v<Lo>) {
      // complex64 + float64 -> complex128
      using R = typename decltype(promote_pick<real_t<Hi>, Lo>())::type;
      return std::type_identity<complex_of_t<R>>{};
    } else {
      return std::type_identity<Hi>{};
    }
  } else if constexpr (category_v<A> == 1) {
    static_assert(!(is_shell_uint_v<A> || is_shell_uint_v<B>),
                  "reel: promotion of uint16/uint32/uint64 with other integer types is not "
                  "supported (as in PyTorch): convert one operand explicitly with .to<T>()");
    if constexpr (std::is_signed_v<A> == std::is_signed_v<B>) {
      return std::type_identity<std::conditional_t<(sizeof(A) >= sizeof(B)), A, B>>{};
    } else {
      // uint8 with a signed type: the signed type if it is wider, else int16.
      using S = std::conditional_t<std::is_signed_v<A>, A, B>;
      return std::type_identity<std::conditional_t<(sizeof(S) > 1), S, int16_t>>{};
    }
  } else if constexpr (category_v<A> == 2) {
    if constexpr ((std::is_same_v<A, half> && std::is_same_v<B, bfloat16>) ||
                  (std::is_same_v<A, bfloat16> && std::is_same_v<B, half>)) {
      return std::type_identity<float>{};
    } else {
      return std::type_identity<std::conditional_t<(sizeof(A) >= sizeof(B)), A, B>>{};
    }
  } else {
    return std::type_identity<std::conditional_t<(sizeof(A) >= sizeof(B)), A, B>>{};
  }
}
}  // namespace detail

template <class A, class B>
using promote_t = typename decltype(detail::promote_pick<A, B>())::type;

// A C++ scalar combined with a tensor of type T is a "weak" operand, as a Python number is
// in PyTorch: it only changes the result type when it is of a higher category.
template <class T, class S>
constexpr auto weak_promote_pick() {
  constexpr int cs = is_complex_v<S> ? 3 : std::is_floating_point_v<S> ? 2 : std::is_same_v<S, bool> ? 0 : 1;
  if constexpr (cs <= category_v<T>) {
    return std::type_identity<T>{};
  } else if constexpr (cs == 1) {
    return std::type_identity<int64_t>{};  // bool tensor + int -> int64
  } else if constexpr (cs == 2) {
    return std::type_identity<float>{};
  } else if constexpr (category_v<T> == 2) {
    return std::type_identity<complex_of_t<T>>{};
  } else {
    return std::type_identity<std::complex<float>>{};
  }
}
template <class T, class S>
using weak_promote_t = typename decltype(weak_promote_pick<T, S>())::type;

template <class S> inline constexpr bool is_cpp_scalar_v =
    std::is_arithmetic_v<S> || is_complex_v<S>;

// Element conversion used everywhere (casts, copies). Handles complex -> real by taking the
// real part (PyTorch does the same with a warning), and reduced floats through float.
template <class To, class From>
REEL_HD inline To convert(const From& v) {
  static_assert(std::is_same_v<To, From> || (!is_fp4_v<To> && !is_fp4_v<From>),
                "reel: float4_e2m1fn_x2 packs two FP4 values per element; convert with pack_fp4() / unpack_fp4()");
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<From> && !is_complex_v<To>) {
    return convert<To>(v.real());
  } else if constexpr (is_complex_v<To>) {
    if constexpr (is_complex_v<From>)
      return To(static_cast<typename To::value_type>(v.real()), static_cast<typename To::value_type>(v.imag()));
    else
      return To(convert<typename To::value_type>(v), 0);
  } else if constexpr (is_reduced_float_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (is_reduced_float_v<To>) {
    // straight from double: going through float would round twice
    return detail::round_from_double<To>(static_cast<double>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // Out-of-range float -> int is undefined behaviour in C++; saturate instead (NaN -> 0).
    if (!(v == v)) return To(0);
    if (v <= static_cast<From>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace reel
