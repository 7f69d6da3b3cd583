#pragma once
// The bodies of print's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "print.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE std::string format_real(double v, const FloatFormat& f) {
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

REEL_INLINE FloatFormat choose_format(const std::vector<double>& vals) {
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

REEL_INLINE void print_rec(std::ostream& os, const std::vector<std::string>& s, const Shape& sz, int64_t d, int64_t base,
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

REEL_INLINE std::ostream& print_tensor(std::ostream& os, const std::vector<std::string>& strs,
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

REEL_INLINE std::ostream& print_meta(std::ostream& os, const Shape& sizes, std::string_view suffix) {
  os << "tensor(..., device='meta', size=(";
  for (int64_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  return os << (sizes.size() == 1 ? ",)" : ")") << suffix << ')';
}

REEL_INLINE std::ostream& print_values(std::ostream& os, const Shape& sizes, std::string_view suffix,
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

}  // namespace
}  // namespace
