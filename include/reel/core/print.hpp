#pragma once
// operator<< in PyTorch's style: `tensor([[1., 2.],\n        [3., 4.]])`, with a dtype
// suffix when the dtype is not the default one for its kind, summarized past 1000 elements.
// Only the element formatting depends on T; the layout is shared by all types (compile time).
#include "config.hpp"
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "tensor.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

struct FloatFormat {
  bool int_mode = true;  // every finite value is an integer: print "1." style
  bool sci = false;
  int precision = 4;
};

REEL_INLINE std::string format_real(double v, const FloatFormat& f);

// PyTorch's choice: fixed with 4 decimals, "1." when all finite values are integers, and
// scientific when the finite magnitudes span more than 1000x or leave [1e-4, 1e8].
REEL_INLINE FloatFormat choose_format(const std::vector<double>& vals);

REEL_INLINE void print_rec(std::ostream& os, const std::vector<std::string>& s, const Shape& sz, int64_t d, int64_t base,
                      size_t width, int indent, bool summarize);

// strs: every element formatted; width_of: which elements set the column width (PyTorch
// ignores nan/inf and zeros of floating tensors there).
REEL_INLINE std::ostream& print_tensor(std::ostream& os, const std::vector<std::string>& strs,
                                  const std::vector<bool>& width_of, const Shape& sizes, std::string_view suffix);

REEL_INLINE std::ostream& print_meta(std::ostream& os, const Shape& sizes, std::string_view suffix);

// The element-type-independent part of printing: formats numbers already widened to
// double (floats; complex as re/im pairs), long long or unsigned long long (integers).
REEL_INLINE std::ostream& print_values(std::ostream& os, const Shape& sizes, std::string_view suffix,
                                  const std::vector<double>* reals, bool complex,
                                  const std::vector<long long>* ints, const std::vector<unsigned long long>* uints,
                                  const std::vector<char>* bools);

}  // namespace detail

template <class T, class D>
std::ostream& operator<<(std::ostream& os, const Tensor<T, D>& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  constexpr bool default_dtype = std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                                 std::is_same_v<T, bool> || std::is_same_v<T, std::complex<float>>;
  std::string suffix = default_dtype ? "" : std::string(", dtype=") + std::string(scalar_type_of<T>::name);
  if constexpr (!detail::Backend<D>::has_data) {
    return detail::print_meta(os, t.sizes(), suffix);
  } else {
    auto vals = t.to_vector();
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<char> b(vals.begin(), vals.end());
      return detail::print_values(os, t.sizes(), suffix, nullptr, false, nullptr, nullptr, &b);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      std::vector<long long> v(vals.begin(), vals.end());
      return detail::print_values(os, t.sizes(), suffix, nullptr, false, &v, nullptr, nullptr);
    } else if constexpr (std::is_integral_v<T>) {
      std::vector<unsigned long long> v(vals.begin(), vals.end());
      return detail::print_values(os, t.sizes(), suffix, nullptr, false, nullptr, &v, nullptr);
    } else {
      std::vector<double> parts;
      parts.reserve(vals.size() * (is_complex_v<T> ? 2 : 1));
      for (const T& v : vals) {
        if constexpr (is_complex_v<T>) {
          parts.push_back(static_cast<double>(v.real()));
          parts.push_back(static_cast<double>(v.imag()));
        } else if constexpr (is_fp4_v<T>) {
          parts.push_back(static_cast<double>(v.bits()));  // (the packed byte, as PyTorch prints it)
        } else {
          parts.push_back(convert<double>(v));
        }
      }
      return detail::print_values(os, t.sizes(), suffix, &parts, is_complex_v<T>, nullptr, nullptr, nullptr);
    }
  }
}

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "print-inl.hpp"
#endif
