#pragma once
// Factories. Range factories compute in double (float for float, as PyTorch does) and round
// once, filling the first half from `start` and the second half back from `end` so both end
// points are exact. All index math is 64-bit.
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
namespace detail {
template <class T> using range_acc_t = std::conditional_t<std::is_same_v<T, float>, float, double>;

// Element i of linspace(start, end, steps): the first half counts up from start, the
// second half down from end, so both ends are exact and no error accumulates. The product
// and the sum are rounded separately (mul_rn, add_rn), so the CPU and CUDA agree bit for bit.
template <class A>
REEL_HD A linspace_value(A start, A end, int64_t steps, int64_t i) {
  if (steps == 1) return start;
  A step = (end - start) / static_cast<A>(steps - 1);
  int64_t halfway = steps / 2;
  return i < halfway ? add_rn(start, mul_rn(step, static_cast<A>(i)))
                     : add_rn(end, -mul_rn(step, static_cast<A>(steps - 1 - i)));
}
template <class T, class A>
REEL_HD T round_range_value(A v) {
  if constexpr (is_reduced_float_v<T>)
    return round_from_double<T>(static_cast<double>(v));
  else
    return convert<T>(v);
}
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
  static_assert(!is_complex_v<T>, "reel::linspace: complex ranges are not supported");
  REEL_CHECK(steps >= 0, value_error, "linspace: number of steps must be non-negative, got ", steps);
  using A = detail::range_acc_t<T>;
  return detail::fill_by_index<T, D>(steps, [=] REEL_HD(int64_t i) {
    return detail::round_range_value<T>(detail::linspace_value<A>(static_cast<A>(start), static_cast<A>(end), steps, i));
  });
}

template <class T, class D = CPU>
Tensor<T, D> logspace(double start, double end, int64_t steps, double base = 10.0) {
  static_assert(!is_complex_v<T>, "reel::logspace: complex ranges are not supported");
  REEL_CHECK(steps >= 0, value_error, "logspace: number of steps must be non-negative, got ", steps);
  // In double for every T (float too): pow is correctly rounded nowhere (glibc's double pow
  // is within 1 ulp, CUDA's within 2), and a double result rounded once to float (or half)
  // is the correctly rounded float unless it lies within those few double ulps of a halfway
  // point, so the CPU and CUDA agree but for such ties (at most 1 ulp of T apart).
  return detail::fill_by_index<T, D>(steps, [=] REEL_HD(int64_t i) {
    double e = detail::linspace_value<double>(start, end, steps, i);
    return detail::round_range_value<T>(std::pow(base, e));
  });
}

namespace detail {
inline int64_t arange_size(double start, double end, double step) {
  REEL_CHECK(step != 0, value_error, "arange: step must be nonzero");
  REEL_CHECK(std::isfinite(start) && std::isfinite(end), value_error, "arange: unsupported range: ", start, " -> ", end);
  REEL_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), value_error,
             "arange: upper bound and larger bound inconsistent with step sign");
  double n = std::ceil((end - start) / step);
  REEL_CHECK(n < 9.2e18, value_error, "arange: too many elements");
  return static_cast<int64_t>(n);
}
}  // namespace detail

// arange with integer arguments is computed in exact 64-bit integer math; with any
// floating argument in double (value i is start + i * step, rounded once).
template <class T, class D = CPU, class S, class E, class P = int>
  requires(std::is_arithmetic_v<S> && std::is_arithmetic_v<E> && std::is_arithmetic_v<P>)
Tensor<T, D> arange(S start, E end, P step = 1) {
  static_assert(!is_complex_v<T>, "reel::arange: complex ranges are not supported");
  if constexpr (std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<P>) {
    int64_t s = static_cast<int64_t>(start), e = static_cast<int64_t>(end), st = static_cast<int64_t>(step);
    REEL_CHECK(st != 0, value_error, "arange: step must be nonzero");
    REEL_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), value_error,
               "arange: upper bound and larger bound inconsistent with step sign");
    __int128 span = static_cast<__int128>(e) - s;
    int64_t n = static_cast<int64_t>((span + st - (st > 0 ? 1 : -1)) / st);
    return detail::fill_by_index<T, D>(n, [=] REEL_HD(int64_t i) {
      __int128 v = static_cast<__int128>(s) + static_cast<__int128>(i) * st;
      if constexpr (is_floating_v<T>)
        return detail::round_range_value<T>(static_cast<double>(v));
      else
        return static_cast<T>(v);
    });
  } else {
    double s = static_cast<double>(start), e = static_cast<double>(end), st = static_cast<double>(step);
    int64_t n = detail::arange_size(s, e, st);
    return detail::fill_by_index<T, D>(n, [=] REEL_HD(int64_t i) {
      return detail::round_range_value<T>(detail::add_rn(s, detail::mul_rn(static_cast<double>(i), st)));
    });
  }
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
