#pragma once
// The bodies of reduce_kernels's non-template runtime functions (header-only mode: included
// by it; compiled mode: by src/runtime.cpp).
#include "reduce_kernels.hpp"

namespace reel::inline REEL_ABI::detail {
REEL_INLINE ReducePlan plan_reduce(const Shape& sizes, Shape dims, bool keepdim, const char* fn) {
  int64_t nd = sizes.size();
  std::vector<bool> red(std::max<int64_t>(nd, 1), false);
  if (dims.empty()) {
    std::fill(red.begin(), red.end(), true);
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, nd, fn);
      REEL_CHECK(!red[w], value_error, fn, ": dim ", d, " appears multiple times in the list of dims");
      red[w] = true;
    }
  }
  ReducePlan p;
  for (int64_t i = 0; i < nd; ++i)
    if (!red[i]) {
      p.perm.push_back(i);
      p.outer *= sizes[i];
    }
  for (int64_t i = 0; i < nd; ++i)
    if (red[i]) {
      p.perm.push_back(i);
      p.inner *= sizes[i];
    }
  for (int64_t i = 0; i < nd; ++i) {
    p.out_keep.push_back(red[i] ? 1 : sizes[i]);
    if (!red[i] || keepdim) p.out.push_back(red[i] ? 1 : sizes[i]);
  }
  return p;
}
}  // namespace reel::detail
