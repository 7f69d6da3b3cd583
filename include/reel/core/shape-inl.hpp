#pragma once
// The bodies of shape's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "shape.hpp"

namespace reel::inline REEL_ABI {
REEL_INLINE std::string to_string(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int64_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t ai = i - (n - a.size()), bi = i - (n - b.size());
    int64_t x = ai >= 0 ? a[ai] : 1, y = bi >= 0 ? b[bi] : 1;
    if (x == y || y == 1)
      out[i] = x;
    else if (x == 1)
      out[i] = y;
    else
      raise<value_error>("shapes ", a, " and ", b, " cannot be broadcast together (size ", x, " vs ", y,
                         " at dimension ", i, ")");
  }
  return out;
}

}  // namespace
}  // namespace
