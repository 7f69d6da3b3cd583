#pragma once
// operator<< in PyTorch's style: `tensor([[1., 2.],\n        [3., 4.]])`, with a dtype
// suffix when the dtype is not the default one for its kind, summarized past 1000 elements.
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

template <class T>
std::string format_elem(const T& v, const FloatFormat& f) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "True" : "False";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else if constexpr (is_complex_v<T>) {
    double im = static_cast<double>(v.imag());
    std::string s = format_real(static_cast<double>(v.real()), f);
    std::string t = format_real(std::abs(im), f);
    return s + (im < 0 || (im == 0 && std::signbit(im)) ? "-" : "+") + t + "j";
  } else {
    return format_real(static_cast<double>(v), f);
  }
}

template <class T>
FloatFormat choose_format(const std::vector<T>& vals) {
  FloatFormat f;
  if constexpr (is_floating_v<T> || is_complex_v<T>) {
    double mx = 0, mn = std::numeric_limits<double>::infinity();
    bool any = false;
    auto look = [&](double x) {
      if (!std::isfinite(x)) return;
      if (x != std::floor(x)) f.int_mode = false;
      double a = std::abs(x);
      mx = std::max(mx, a);
      if (a != 0) mn = std::min(mn, a);
      any = true;
    };
    for (const auto& v : vals) {
      if constexpr (is_complex_v<T>) {
        look(static_cast<double>(v.real()));
        look(static_cast<double>(v.imag()));
      } else {
        look(static_cast<double>(v));
      }
    }
    if (any) {
      if (f.int_mode)
        f.sci = mx > 1e8;
      else
        f.sci = mx / mn > 1000.0 || mx > 1e8 || mn < 1e-4;
    }
  }
  return f;
}

template <class T>
void print_rec(std::ostream& os, const std::vector<T>& vals, const Shape& sz, int64_t d, int64_t base,
               const FloatFormat& f, size_t width, int indent, bool summarize) {
  int64_t stride = 1;
  for (int64_t i = d + 1; i < sz.size(); ++i) stride *= sz[i];
  os << '[';
  int64_t n = sz[d];
  auto emit = [&](int64_t i, bool first) {
    if (d == sz.size() - 1) {
      if (!first) os << ", ";
      std::string s = format_elem(vals[base + i], f);
      os << std::string(width > s.size() ? width - s.size() : 0, ' ') << s;
    } else {
      if (!first) {
        os << ',' << std::string(sz.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
      }
      print_rec(os, vals, sz, d + 1, base + i * stride, f, width, indent, summarize);
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

}  // namespace detail

template <class T, class D>
std::ostream& operator<<(std::ostream& os, const Tensor<T, D>& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  constexpr bool default_dtype = std::is_same_v<T, float> || std::is_same_v<T, int64_t> ||
                                 std::is_same_v<T, bool> || std::is_same_v<T, std::complex<float>>;
  std::string suffix;
  if constexpr (std::is_same_v<D, Meta>) {
    os << "tensor(..., device='meta', size=(";
    for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
    os << (t.dim() == 1 ? ",)" : ")");
    if (!default_dtype) os << ", dtype=" << scalar_type_of<T>::name;
    return os << ')';
  } else {
    auto vals = t.to_vector();
    auto f = detail::choose_format(vals);
    if (!default_dtype) suffix = std::string(", dtype=") + std::string(scalar_type_of<T>::name);
    if (t.numel() == 0 && t.dim() == 1) return os << "tensor([]" << suffix << ')';
    if (t.dim() == 0) return os << "tensor(" << detail::format_elem(vals[0], f) << suffix << ')';
    bool summarize = t.numel() > 1000;
    // Column width as PyTorch computes it: from the finite nonzero values for floats.
    size_t width = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(vals.size()); ++i) {
      T v = vals[i];
      if constexpr (is_floating_v<T>) {
        double d = static_cast<double>(v);
        if (!std::isfinite(d) || d == 0) continue;
      }
      width = std::max(width, detail::format_elem<T>(v, f).size());
    }
    os << "tensor(";
    detail::print_rec(os, vals, t.sizes(), 0, 0, f, width, 7, summarize);
    if (t.numel() == 0) os << ", size=" << t.sizes();
    return os << suffix << ')';
  }
}

}  // namespace reel
