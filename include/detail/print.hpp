#pragma once
// operator<< in PyTorch's style: `tensor([[1., 2.],\n        [3., 4.]])`, with a dtype
// suffix when the dtype is not the default one for its kind, summarized past 1000 elements.
// Only the element formatting depends on T; the layout is shared by all types (compile time).
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "../tensor.hpp"

namespace reel {
namespace detail {

struct FloatFormat {
  bool int_mode = true;  // every finite value is an integer: print "1." style
  bool sci = false;
  int precision = 4;
};

inline std::string format_real(double v, const FloatFormat& f) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  if (f.sci) {
    os << std::scientific << std::setprecision(f.precision) << v;
  } else if (f.int_mode) {
    os << std::fixed << std::setprecision(0) << v << '.';
  } else {
    os << std::fixed << std::setprecision(f.precision) << v;
  }
  return os.str();
}

// PyTorch's choice: fixed with 4 decimals, "1." when all finite values are integers, and
// scientific when the finite magnitudes span more than 1000x or leave [1e-4, 1e8].
inline FloatFormat choose_format(const std::vector<double>& vals) {
  FloatFormat f;
  double mx = 0, mn = std::numeric_limits<double>::infinity();
  bool any = false;
  for (double x : vals) {
    if (!std::isfinite(x)) continue;
    if (x != std::floor(x)) f.int_mode = false;
    double a = std::abs(x);
    mx = std::max(mx, a);
    if (a != 0) mn = std::min(mn, a);
    any = true;
  }
  if (any) {
    if (f.int_mode)
      f.sci = mx > 1e8;
    else
      f.sci = mx / mn > 1000.0 || mx > 1e8 || mn < 1e-4;
  }
  return f;
}

inline void print_rec(std::ostream& os, const std::vector<std::string>& s, const Shape& sz, int64_t d, int64_t base,
                      size_t width, int indent, bool summarize) {
  int64_t stride = 1;
  for (int64_t i = d + 1; i < sz.size(); ++i) stride *= sz[i];
  os << '[';
  int64_t n = sz[d];
  auto emit = [&](int64_t i, bool first) {
    if (d == sz.size() - 1) {
      if (!first) os << ", ";
      const std::string& e = s[base + i];
      os << std::string(width > e.size() ? width - e.size() : 0, ' ') << e;
    } else {
      if (!first) os << ',' << std::string(sz.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
      print_rec(os, s, sz, d + 1, base + i * stride, width, indent, summarize);
    }
  };
  if (summarize && n > 6) {
    for (int64_t i = 0; i < 3; ++i) emit(i, i == 0);
    if (d == sz.size() - 1)
      os << ", ...";
    else
      os << ",\n" << std::string(indent + d + 1, ' ') << "...";
    for (int64_t i = n - 3; i < n; ++i) emit(i, false);
  } else {
    for (int64_t i = 0; i < n; ++i) emit(i, i == 0);
  }
  os << ']';
}

// strs: every element formatted; width_of: which elements set the column width (PyTorch
// ignores nan/inf and zeros of floating tensors there).
inline std::ostream& print_tensor(std::ostream& os, const std::vector<std::string>& strs,
                                  const std::vector<bool>& width_of, const Shape& sizes, std::string_view suffix) {
  if (sizes.size() == 1 && sizes[0] == 0) return os << "tensor([]" << suffix << ')';
  if (sizes.size() == 0) return os << "tensor(" << strs[0] << suffix << ')';
  size_t width = 0;
  for (size_t i = 0; i < strs.size(); ++i)
    if (width_of[i]) width = std::max(width, strs[i].size());
  os << "tensor(";
  int64_t n = numel_of(sizes);
  if (n > 0) print_rec(os, strs, sizes, 0, 0, width, 7, n > 1000);
  else os << "[]";
  if (n == 0) os << ", size=" << sizes;
  return os << suffix << ')';
}

inline std::ostream& print_meta(std::ostream& os, const Shape& sizes, std::string_view suffix) {
  os << "tensor(..., device='meta', size=(";
  for (int64_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  return os << (sizes.size() == 1 ? ",)" : ")") << suffix << ')';
}

// The element-type-independent part of printing: formats numbers already widened to
// double (floats; complex as re/im pairs), long long or unsigned long long (integers).
inline std::ostream& print_values(std::ostream& os, const Shape& sizes, std::string_view suffix,
                                  const std::vector<double>* reals, bool complex,
                                  const std::vector<long long>* ints, const std::vector<unsigned long long>* uints,
                                  const std::vector<char>* bools) {
  std::vector<std::string> strs;
  std::vector<bool> width_of;
  if (bools) {
    for (char v : *bools) strs.push_back(v ? "True" : "False");
    width_of.assign(strs.size(), true);
  } else if (ints) {
    for (long long v : *ints) strs.push_back(std::to_string(v));
    width_of.assign(strs.size(), true);
  } else if (uints) {
    for (unsigned long long v : *uints) strs.push_back(std::to_string(v));
    width_of.assign(strs.size(), true);
  } else {
    const auto& parts = *reals;
    auto f = choose_format(parts);
    size_t n = complex ? parts.size() / 2 : parts.size();
    for (size_t i = 0; i < n; ++i) {
      if (complex) {
        double re = parts[2 * i], im = parts[2 * i + 1];
        strs.push_back(format_real(re, f) + (std::signbit(im) ? "-" : "+") + format_real(std::abs(im), f) + "j");
        width_of.push_back(true);
      } else {
        strs.push_back(format_real(parts[i], f));
        width_of.push_back(std::isfinite(parts[i]) && parts[i] != 0);
      }
    }
  }
  return print_tensor(os, strs, width_of, sizes, suffix);
}

}  // namespace detail

template <class T, class D>
std::ostream& operator<<(std::ostream& os, const Tensor<T, D>& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  constexpr bool default_dtype = std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                                 std::is_same_v<T, bool> || std::is_same_v<T, std::complex<float>>;
  std::string suffix = default_dtype ? "" : std::string(", dtype=") + std::string(scalar_type_of<T>::name);
  if constexpr (std::is_same_v<D, Meta>) {
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
        } else {
          parts.push_back(convert<double>(v));
        }
      }
      return detail::print_values(os, t.sizes(), suffix, &parts, is_complex_v<T>, nullptr, nullptr, nullptr);
    }
  }
}

}  // namespace reel
