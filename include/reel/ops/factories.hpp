#pragma once
// Factories. The range factories reproduce PyTorch 2.15's kernels bit for bit (see "ranges"
// below). All index math is 64-bit.
#include "../core/config.hpp"
#include <cmath>
#include <span>
#include <vector>

#include "../random/philox.hpp"
#include "../core/tensor.hpp"

namespace reel::inline REEL_ABI {

template <class T, class D = CPU> Tensor<T, D> empty(Shape s) { return detail::make_tensor<T, D>(std::move(s)); }
template <class T, class D = CPU> Tensor<T, D> full(Shape s, T v) {
  auto t = empty<T, D>(std::move(s));
  t.fill_(v);
  return t;
}
template <class T, class D = CPU> Tensor<T, D> zeros(Shape s) { return full<T, D>(std::move(s), T(0)); }
template <class T, class D = CPU> Tensor<T, D> ones(Shape s) { return full<T, D>(std::move(s), T(1)); }
template <class T, class D = CPU> Tensor<T, D> eye(int64_t n, std::optional<int64_t> m = {}) {
  if constexpr (detail::device_memory_v<D>) return eye<T, CPU>(n, m).template to_device<D>();  // (made on the host)
  int64_t c = m.value_or(n);
  auto t = empty<T, D>({n, c});
  if constexpr (detail::Backend<D>::has_data) {
    detail::kernel_step({t.impl().storage.get()}, [t, n, c] {
      T* p = t.mutable_data_ptr();
      std::fill(p, p + n * c, T(0));
      for (int64_t i = 0; i < std::min(n, c); ++i) p[i * c + i] = T(1);
    });
  }
  return t;
}
template <class T, class D> Tensor<T, D> empty_like(const Tensor<T, D>& t) { return empty<T, D>(t.sizes()); }
template <class T, class D> Tensor<T, D> zeros_like(const Tensor<T, D>& t) { return zeros<T, D>(t.sizes()); }
template <class T, class D> Tensor<T, D> ones_like(const Tensor<T, D>& t) { return ones<T, D>(t.sizes()); }
template <class T, class D> Tensor<T, D> full_like(const Tensor<T, D>& t, T v) { return full<T, D>(t.sizes(), v); }

// ---------------------------------------------------------------- from data
template <class T, class D = CPU>
Tensor<T, D> from_vector(const std::vector<T>& v, Shape shape) {
  REEL_CHECK(detail::numel_of(shape) == static_cast<int64_t>(v.size()), value_error, "from_vector: shape ", shape,
             " needs ", detail::numel_of(shape), " elements but the vector has ", v.size());
  if constexpr (detail::device_memory_v<D>) return from_vector<T, CPU>(v, std::move(shape)).template to_device<D>();  // (made on the host)
  auto t = empty<T, D>(std::move(shape));
  if constexpr (detail::Backend<D>::host_memory) {
    if (detail::CaptureTrace* c = detail::capturing())
      c->record({t.impl().storage.get()}, {}, [t, v] { std::copy(v.begin(), v.end(), t.mutable_data_ptr()); });
    else
      std::copy(v.begin(), v.end(), t.data_ptr());
  }
  return t;
}
template <class T, class D = CPU>
Tensor<T, D> from_vector(const std::vector<T>& v) {
  return from_vector<T, D>(v, Shape{static_cast<int64_t>(v.size())});
}
template <class T, class D = CPU, class U, class... S>
  requires(!std::is_same_v<U, T> && sizeof...(S) <= 1)
Tensor<T, D> from_vector(const std::vector<U>&, const S&...) {
  static_assert(std::is_same_v<U, T>,
                "reel::from_vector<T>: the vector's element type is not T: call from_vector<U> (then .to<T>()) or "
                "build a std::vector<T>");
  return {};
}

namespace detail {
// One literal of a 1-d initializer list. Being a class (its conversion is user-defined)
// it ranks below a nested list of numbers, so `{{1}, {2}}` is 2-d, not two braced scalars;
// its constructor template accepts mixed literals such as `{1, 2.5}`.
template <class T>
struct Literal {
  T v;
  template <class S>
    requires(is_cpp_scalar_v<S> || std::is_same_v<S, T>)
  Literal(S s) : v(convert<T>(s)) {}
};
template <class T> using plain_literal_t = std::conditional_t<is_reduced_float_v<T>, double, T>;
}  // namespace detail

template <class T, class D = CPU>
Tensor<T, D> tensor(std::initializer_list<detail::Literal<T>> l) {
  std::vector<T> v;
  for (const auto& x : l) v.push_back(x.v);
  return from_vector<T, D>(v);
}
template <class T, class D = CPU>
Tensor<T, D> tensor(std::initializer_list<std::initializer_list<detail::plain_literal_t<T>>> l) {
  std::vector<T> v;
  int64_t inner = -1;
  for (const auto& row : l) {
    if (inner < 0) inner = static_cast<int64_t>(row.size());
    REEL_CHECK(inner == static_cast<int64_t>(row.size()), value_error, "tensor: expected sequence of length ", inner,
               " but got ", row.size());
    for (const auto& x : row) v.push_back(convert<T>(x));
  }
  return from_vector<T, D>(v, {static_cast<int64_t>(l.size()), std::max<int64_t>(inner, 0)});
}
template <class T, class D = CPU>
Tensor<T, D> tensor(std::initializer_list<std::initializer_list<std::initializer_list<detail::plain_literal_t<T>>>> l) {
  std::vector<T> v;
  int64_t mid = -1, inner = -1;
  for (const auto& plane : l) {
    if (mid < 0) mid = static_cast<int64_t>(plane.size());
    REEL_CHECK(mid == static_cast<int64_t>(plane.size()), value_error, "tensor: expected sequence of length ", mid,
               " but got ", plane.size());
    for (const auto& row : plane) {
      if (inner < 0) inner = static_cast<int64_t>(row.size());
      REEL_CHECK(inner == static_cast<int64_t>(row.size()), value_error, "tensor: expected sequence of length ", inner,
                 " but got ", row.size());
      for (const auto& x : row) v.push_back(convert<T>(x));
    }
  }
  return from_vector<T, D>(v, {static_cast<int64_t>(l.size()), std::max<int64_t>(mid, 0), std::max<int64_t>(inner, 0)});
}
// A 0-d tensor.
template <class T, class D = CPU> Tensor<T, D> scalar_tensor(T v) { return full<T, D>(Shape{}, v); }

// ---------------------------------------------------------------- ranges
// linspace, logspace and arange give PyTorch 2.15's values bit for bit. PyTorch's CPU and CUDA
// kernels compute differently (for half, bfloat16 and the integer types, and arange's float
// accumulator), so each reel device follows the PyTorch kernel of that device: the CPU's as its
// x86-64 build runs it (AVX2 kernels, whose compiler fuses `a + b * c` into one fused
// multiply-add), CUDA's as nvcc compiles it (fused too, its default). The CPU rules are checked
// element by element against PyTorch 2.15 (tests/reference/ranges.py); the CUDA rules are read
// from PyTorch's sources and run here (detail::*_at<T, true>) to check reel's CUDA kernels.
// PyTorch's CPU arange splits ranges over 32768 elements between its threads, which moves its
// vector boundaries: reel gives what PyTorch gives with one thread.
namespace detail {
// c10::Scalar::to<T>() of a double: half and bfloat16 through float (two roundings), integers
// truncated (saturating where C++ leaves it undefined).
template <class T>
REEL_HD T range_cast(double v) {
  if constexpr (is_reduced_float_v<T>)
    return round_from_double<T>(static_cast<double>(static_cast<float>(v)));
  else
    return convert<T>(v);
}
// Scalar::to<T>() raises where the value overflows T (NaN for integers; a finite value beyond
// the largest for floating types): so do reel's range factories, before any kernel runs.
template <class T>
void check_range_bound(const char* op, double v) {
  using L = std::numeric_limits<T>;
  const bool ok = std::is_integral_v<T> ? (v >= static_cast<double>(L::lowest()) && v <= static_cast<double>(L::max()))
                                        : (!std::isfinite(v) || std::abs(v) <= static_cast<double>(L::max()));
  REEL_CHECK(ok, value_error, op, ": value ", v, " cannot be converted to ", scalar_type_of<T>::name,
             " without overflow");
}
// A double stored into an integer element as PyTorch's x86-64 build does it (logspace's
// results): truncated through int32 (int64 for 64-bit types), an out-of-range or NaN value
// giving that type's lowest value, then wrapped to T.
template <class T>
REEL_HD T trunc_wrap(double v) {
  if constexpr (sizeof(T) == 8) {
    const bool in = v >= -0x1p63 && v < 0x1p63;
    return static_cast<T>(in ? static_cast<int64_t>(v) : std::numeric_limits<int64_t>::lowest());
  } else if constexpr (sizeof(T) == 4 && std::is_unsigned_v<T>) {
    return static_cast<T>(trunc_wrap<int64_t>(v));
  } else {
    const bool in = v > -0x1p31 - 1 && v < 0x1p31;
    return static_cast<T>(in ? static_cast<int32_t>(v) : std::numeric_limits<int32_t>::lowest());
  }
}
// half and bfloat16 arithmetic as c10::Half does it: in float, each result rounded to T.
template <class T>
REEL_HD T from_float(float v) {
  return round_from_double<T>(static_cast<double>(v));
}
template <class T>
REEL_HD float to_float(T v) {
  return static_cast<float>(v);
}
template <class A>
REEL_HD A range_pow(A b, A e) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, float>) return ::powf(b, e);
  else return ::pow(b, e);
#else
  return std::pow(b, e);
#endif
}
// e - s as PyTorch's `scalar_end - scalar_start` (exact for integers: int8..int32 promote;
// reel's unsigned types would wrap, so they subtract in 128 bits).
template <class T>
REEL_HD double range_diff(T e, T s) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<double>(static_cast<__int128>(e) - static_cast<__int128>(s));
  else if constexpr (is_reduced_float_v<T>)
    return static_cast<double>(to_float(from_float<T>(to_float(e) - to_float(s))));
  else
    return static_cast<double>(e - s);
}

// Element i of linspace(start, end, steps): the first half counts up from start, the second
// half down from end (both ends exact), in PyTorch's op-math for the device.
template <class T, bool Cuda>
REEL_HD T linspace_at(double start, double end, int64_t steps, int64_t i) {
  const T s = range_cast<T>(start), e = range_cast<T>(end);
  if (steps == 1) return s;
  const bool up = i < steps / 2;
  const int64_t k = up ? i : steps - 1 - i;  // steps counted from the nearer end
  if constexpr (std::is_integral_v<T>) {
    using A = std::conditional_t<Cuda, float, double>;  // CUDA: float step, CPU: double
    const A step = (static_cast<A>(e) - static_cast<A>(s)) / static_cast<A>(steps - 1);
    return convert<T>(up ? fma_rn(step, static_cast<A>(k), static_cast<A>(s))
                         : fma_rn(-step, static_cast<A>(k), static_cast<A>(e)));
  } else if constexpr (is_reduced_float_v<T> && Cuda) {  // c10::Half arithmetic throughout
    const T step = from_float<T>(static_cast<float>(range_diff(e, s)) /
                                 to_float(from_float<T>(static_cast<float>(steps - 1))));
    const T inc = from_float<T>(to_float(step) * to_float(from_float<T>(static_cast<float>(k))));
    return from_float<T>(up ? to_float(s) + to_float(inc) : to_float(e) - to_float(inc));
  } else if constexpr (is_reduced_float_v<T>) {  // float op-math: fused for bfloat16, not for half
    const float step = (to_float(e) - to_float(s)) / static_cast<float>(steps - 1);
    if constexpr (std::is_same_v<T, bfloat16>)
      return from_float<T>(up ? fma_rn(step, static_cast<float>(k), to_float(s))
                              : fma_rn(-step, static_cast<float>(k), to_float(e)));
    const float inc = mul_rn(step, static_cast<float>(k));
    return from_float<T>(up ? add_rn(to_float(s), inc) : add_rn(to_float(e), -inc));
  } else {  // float, double: in T, fused
    const T step = (e - s) / static_cast<T>(steps - 1);
    return up ? fma_rn(step, static_cast<T>(k), s) : fma_rn(-step, static_cast<T>(k), e);
  }
}

// Element i of logspace: base to the power of linspace's element, with the exponent in double
// on the CPU (step from the endpoints rounded to T), in T (float for integers) on CUDA.
template <class T, bool Cuda>
REEL_HD T logspace_at(double start, double end, int64_t steps, double base, int64_t i) {
  if (steps == 1) return range_cast<T>(range_pow(base, start));  // (fill_ of a double: checked)
  const T s = range_cast<T>(start), e = range_cast<T>(end);
  const bool up = i < steps / 2;
  const int64_t k = up ? i : steps - 1 - i;
  if constexpr (!Cuda) {
    const double step = range_diff(e, s) / static_cast<double>(steps - 1);
    const double inc = mul_rn(step, static_cast<double>(k));
    const double v = range_pow(base, up ? add_rn(static_cast<double>(s), inc) : add_rn(static_cast<double>(e), -inc));
    if constexpr (std::is_integral_v<T>)
      return trunc_wrap<T>(v);
    else
      return range_cast<T>(v);
  } else if constexpr (std::is_integral_v<T>) {
    const float step = static_cast<float>(range_diff(e, s)) / static_cast<float>(steps - 1);
    const float x = up ? fma_rn(step, static_cast<float>(k), static_cast<float>(s))
                       : fma_rn(-step, static_cast<float>(k), static_cast<float>(e));
    return convert<T>(range_pow(static_cast<float>(base), x));
  } else if constexpr (is_reduced_float_v<T>) {
    const T b = range_cast<T>(base);
    const T step = from_float<T>(static_cast<float>(range_diff(e, s)) /
                                 to_float(from_float<T>(static_cast<float>(steps - 1))));
    const T inc = from_float<T>(to_float(step) * to_float(from_float<T>(static_cast<float>(k))));
    const T x = from_float<T>(up ? to_float(s) + to_float(inc) : to_float(e) - to_float(inc));
    return from_float<T>(range_pow(to_float(b), to_float(x)));
  } else {
    const T step = (e - s) / static_cast<T>(steps - 1);
    const T x = up ? fma_rn(step, static_cast<T>(k), s) : fma_rn(-step, static_cast<T>(k), e);
    return range_pow(static_cast<T>(base), x);
  }
}

// arange's accumulator: int64 for integers, float for half and bfloat16, and for float double
// on the CPU, float on CUDA.
template <class T, bool Cuda>
using arange_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t,
                                        std::conditional_t<is_reduced_float_v<T> || (Cuda && std::is_same_v<T, float>),
                                                           float, double>>;
template <class T, class A>
REEL_HD T arange_round(A v) {
  if constexpr (is_reduced_float_v<T>)
    return from_float<T>(v);
  else
    return convert<T>(v);
}
// Element i of arange from the accumulator's start and step. On the CPU, PyTorch fills each
// full pair of 32-byte vectors from the vector's first element, rounded to T, plus j * step;
// the rest (and all of CUDA) is start + i * step.
template <class T, bool Cuda, class A>
REEL_HD T arange_at(A s, A st, int64_t n, int64_t i) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(s) + static_cast<uint64_t>(st) * static_cast<uint64_t>(i));  // wraps
  } else {
    constexpr int64_t lanes = 32 / static_cast<int64_t>(sizeof(T));
    if (!Cuda && i % lanes != 0 && i < n - n % (2 * lanes)) {
      const int64_t j = i % lanes;
      const A first = static_cast<A>(arange_round<T>(fma_rn(st, static_cast<A>(i - j), s)));
      return arange_round<T>(fma_rn(static_cast<A>(j), st, first));
    }
    return arange_round<T>(fma_rn(st, static_cast<A>(i), s));
  }
}
// f: a function object with a REEL_HD operator()(int64_t), never a __host__ __device__ lambda:
// nvcc keeps such a lambda's wrapper state in each translation unit, while the templates it is
// passed to are shared between them, so a program of several .cu files could launch through
// another file's never-set wrapper (the first run on a GPU crashed so, in arange).
template <class T, bool Dev>
struct LinspaceAt {
  double start, end;
  int64_t steps;
  REEL_HD T operator()(int64_t i) const { return linspace_at<T, Dev>(start, end, steps, i); }
};
template <class T, bool Dev>
struct LogspaceAt {
  double start, end;
  int64_t steps;
  double base;
  REEL_HD T operator()(int64_t i) const { return logspace_at<T, Dev>(start, end, steps, base, i); }
};
template <class T, bool Dev, class A>
struct ArangeAt {
  A s, st;
  int64_t n;
  REEL_HD T operator()(int64_t i) const { return arange_at<T, Dev>(s, st, n, i); }
};
template <class T, class D, class F>
Tensor<T, D> fill_by_index(int64_t n, F&& f) {
  auto t = empty<T, D>({n});
  if constexpr (device_memory_v<D>) {
    Backend<D>::fill_by_index(t.data_ptr(), n, f);  // f is __host__ __device__ under nvcc
  } else if constexpr (Backend<D>::has_data) {
    kernel_step({t.impl().storage.get()}, [t, n, f] {
      T* p = t.mutable_data_ptr();
      parallel_range(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) p[i] = f(i);
      });
    });
  }
  return t;
}
}  // namespace detail

template <class T, class D = CPU>
Tensor<T, D> linspace(double start, double end, int64_t steps) {
  static_assert(!is_complex_v<T> && !is_fp8_v<T> && !std::is_same_v<T, bool>,
                "reel::linspace: complex, float8 and bool ranges are not supported (as in PyTorch): make a float range "
                "and convert it");
  REEL_CHECK(steps >= 0, value_error, "linspace: number of steps must be non-negative, got ", steps);
  if (steps > 0) detail::check_range_bound<T>("linspace", start);
  if (steps > 1) detail::check_range_bound<T>("linspace", end);
  return detail::fill_by_index<T, D>(steps, detail::LinspaceAt<T, detail::device_memory_v<D>>{start, end, steps});
}

template <class T, class D = CPU>
Tensor<T, D> logspace(double start, double end, int64_t steps, double base = 10.0) {
  static_assert(!is_complex_v<T> && !is_fp8_v<T> && !std::is_same_v<T, bool>,
                "reel::logspace: complex, float8 and bool ranges are not supported (as in PyTorch): make a float range "
                "and convert it");
  REEL_CHECK(steps >= 0, value_error, "logspace: number of steps must be non-negative, got ", steps);
  if (steps == 1) detail::check_range_bound<T>("logspace", std::pow(base, start));
  if (steps > 1) {
    detail::check_range_bound<T>("logspace", start);
    detail::check_range_bound<T>("logspace", end);
  }
  return detail::fill_by_index<T, D>(steps, detail::LogspaceAt<T, detail::device_memory_v<D>>{start, end, steps, base});
}

namespace detail {
// arange's length as PyTorch computes it: ceil((end - start) / step) in double, exact in
// integers where all three bounds are integers.
template <class S, class E, class P>
int64_t arange_size(S start, E end, P step) {
  const double s = static_cast<double>(start), e = static_cast<double>(end), st = static_cast<double>(step);
  REEL_CHECK(st != 0 && st == st, value_error, "arange: step must be nonzero");
  REEL_CHECK(std::isfinite(s) && std::isfinite(e), value_error, "arange: unsupported range: ", s, " -> ", e);
  REEL_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), value_error,
             "arange: upper bound and larger bound inconsistent with step sign");
  if constexpr (std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<P>) {
    const __int128 a = start, b = end, c = step;
    return static_cast<int64_t>((b - a + c - (c > 0 ? 1 : -1)) / c);
  } else {
    const double n = std::ceil((e - s) / st);
    REEL_CHECK(n <= 9.2e18, value_error, "arange: too many elements");
    return static_cast<int64_t>(n);
  }
}
}  // namespace detail

// arange(start, end, step): PyTorch's values and length for T (see above); integer bounds stay
// exact in 64-bit integer math.
template <class T, class D = CPU, class S, class E, class P = int>
  requires(std::is_arithmetic_v<S> && std::is_arithmetic_v<E> && std::is_arithmetic_v<P>)
Tensor<T, D> arange(S start, E end, P step = 1) {
  static_assert(!is_complex_v<T> && !is_fp8_v<T> && !std::is_same_v<T, bool>,
                "reel::arange: complex, float8 and bool ranges are not supported (as in PyTorch): make a float range "
                "and convert it");
  const int64_t n = detail::arange_size(start, end, step);
  using A = detail::arange_acc_t<T, detail::device_memory_v<D>>;
  auto acc = [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)> && std::is_integral_v<A>)
      return static_cast<A>(v);
    else
      return detail::range_cast<A>(static_cast<double>(v));
  };
  if constexpr (!std::is_same_v<A, double>) {  // start.to<acc>(), step.to<acc>(): checked
    detail::check_range_bound<A>("arange", static_cast<double>(start));
    detail::check_range_bound<A>("arange", static_cast<double>(step));
  }
  const A s = acc(start), st = acc(step);
  return detail::fill_by_index<T, D>(n, detail::ArangeAt<T, detail::device_memory_v<D>, A>{s, st, n});
}
template <class T, class D = CPU, class E>
  requires std::is_arithmetic_v<E>
Tensor<T, D> arange(E end) {
  return arange<T, D>(E(0), end, 1);
}

// ---------------------------------------------------------------- random
// CUDA tensors are drawn on the CPU and copied: the same seed gives the same values on
// either device.
// Uniform [0, 1). half and bfloat16 take their significand bits straight from the random
// word, so no value rounds up to 1.
template <class T, class D = CPU>
Tensor<T, D> rand(Shape shape, Generator& gen = default_generator()) {
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::rand: needs a floating point element type");
  if constexpr (detail::device_memory_v<D>) return rand<T, CPU>(std::move(shape), gen).template to_device<D>();  // (made on the host)
  auto t = empty<T, D>(std::move(shape));
  if constexpr (detail::Backend<D>::has_data) {
    int64_t n = t.numel();
    T* p = t.data_ptr();
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      auto r = gen.reserve(static_cast<uint64_t>(n) * detail::uniform_words_per_value<T>);
      detail::parallel_range(n, [&](int64_t b, int64_t e) { detail::uniform_range<T>(r.seed, r.start_block, b, e, p + b, 0.0, 1.0); });
    } else if constexpr (is_complex_v<T>) {
      using R = typename T::value_type;
      auto re = rand<R, CPU>({2 * n}, gen);
      for (int64_t i = 0; i < n; ++i) p[i] = T(re.data_ptr()[2 * i], re.data_ptr()[2 * i + 1]);
    } else {
      constexpr int bits = std::is_same_v<T, half> ? 11 : std::is_same_v<T, bfloat16> ? 8
                           : std::is_same_v<T, float8_e4m3fn> ? 4 : 3;
      auto r = gen.reserve(static_cast<uint64_t>(n));
      detail::parallel_range(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          uint32_t w = detail::philox_word(r.seed, r.start_block, static_cast<uint64_t>(i));
          p[i] = detail::round_from_double<T>(std::ldexp(static_cast<double>(w >> (32 - bits)), -bits));
        }
      });
    }
  }
  return t;
}

template <class T, class D = CPU>
Tensor<T, D> randn(Shape shape, Generator& gen = default_generator()) {
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::randn: needs a floating point element type");
  if constexpr (detail::device_memory_v<D>) return randn<T, CPU>(std::move(shape), gen).template to_device<D>();  // (made on the host)
  auto t = empty<T, D>(std::move(shape));
  if constexpr (detail::Backend<D>::has_data) {
    int64_t n = t.numel();
    T* p = t.data_ptr();
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      fill_normal<T>(gen, p, n, 0.0, 1.0);
    } else if constexpr (is_complex_v<T>) {
      // real and imaginary parts each have variance 1/2, as torch.randn
      using R = typename T::value_type;
      auto re = randn<R, CPU>({2 * n}, gen);
      const R s = static_cast<R>(std::sqrt(0.5));
      for (int64_t i = 0; i < n; ++i) p[i] = T(s * re.data_ptr()[2 * i], s * re.data_ptr()[2 * i + 1]);
    } else {
      std::vector<double> tmp(n);
      fill_normal<double>(gen, tmp.data(), n, 0.0, 1.0);
      for (int64_t i = 0; i < n; ++i) p[i] = detail::round_from_double<T>(tmp[i]);
    }
  }
  return t;
}

template <class T, class D = CPU>
Tensor<T, D> randint(int64_t low, int64_t high, Shape shape, Generator& gen = default_generator()) {
  REEL_CHECK(low < high, value_error, "randint: expects 'low' < 'high', got low=", low, ", high=", high);
  if constexpr (detail::device_memory_v<D>) return randint<T, CPU>(low, high, std::move(shape), gen).template to_device<D>();  // (made on the host)
  auto t = empty<T, D>(std::move(shape));
  if constexpr (detail::Backend<D>::has_data) {
    int64_t n = t.numel();
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      fill_randint<T>(gen, t.data_ptr(), n, low, high);
    } else {
      std::vector<int64_t> tmp(n);
      fill_randint<int64_t>(gen, tmp.data(), n, low, high);
      for (int64_t i = 0; i < n; ++i) t.data_ptr()[i] = convert<T>(tmp[i]);
    }
  }
  return t;
}

}  // namespace reel
