#pragma once
// Launch geometry and offset calculation for the CUDA elementwise kernels, kept free of
// CUDA so the CPU test suite checks them. All index arithmetic is 64-bit: a tensor of
// 2^32 + 2^20 elements must have every element written (a 32-bit thread index, or a
// 32-bit product blockIdx * blockDim, wraps around and silently skips or repeats elements).
#include "../core/config.hpp"
#include <algorithm>
#include <cstdint>

#include "engine.hpp"
#include "../core/hd.hpp"

namespace reel::inline REEL_ABI::detail {

struct Launch1D {
  int64_t blocks = 0;  // gridDim.x
  int threads = 0;     // blockDim.x
};
// The most blocks one launch uses: kernels loop (grid-stride) over anything larger, so the
// grid never exceeds gridDim.x's limit (2^31 - 1) and each thread keeps several elements in
// flight.
inline constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// Grid for a grid-stride loop over n items: `threads` per block, about `per_thread` items
// per thread. n = 0 gives zero blocks (the caller launches nothing).
inline Launch1D launch_1d(int64_t n, int threads = 256, int64_t per_thread = 4, int64_t max_blocks = kMaxBlocks) {
  REEL_CHECK(n >= 0 && threads > 0 && per_thread > 0 && max_blocks > 0, value_error, "launch_1d: bad arguments");
  if (n == 0) return {0, threads};
  const int64_t per_block = threads * per_thread;
  return {std::min((n + per_block - 1) / per_block, max_blocks), threads};
}

// The elements a grid-stride loop visits in thread `t` of block `b` (for tests): i = b *
// threads + t, then i += blocks * threads while i < n. Returns how many.
inline int64_t grid_stride_count(const Launch1D& l, int64_t b, int64_t t, int64_t n) {
  const int64_t first = b * l.threads + t, step = l.blocks * l.threads;
  return first >= n ? 0 : (n - 1 - first) / step + 1;
}

// Dims a kernel's offset calculator handles after contiguous dims are merged (the engine's
// coalescing leaves fewer than 4 in nearly every real case).
inline constexpr int kMaxKernelDims = 12;

// Unsigned division by a divisor fixed at launch, as a multiply-high, an add and a shift
// (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994):
// a GPU has no integer divider, and a 64-bit division is a ~100-instruction routine per
// dimension per element. With s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1,
// n / d = (umulhi(n, m) + n) >> s for 0 <= n < 2^31 (the sum then fits in 32 bits).
struct FastDivider {
  uint32_t d = 1, m = 1, s = 0;
  FastDivider() = default;
  explicit FastDivider(uint32_t divisor) : d(divisor) {
    REEL_CHECK(divisor >= 1 && divisor <= (uint32_t(1) << 31), value_error, "FastDivider: divisor ", divisor,
               " out of [1, 2^31]");
    while ((uint64_t(1) << s) < d) ++s;
    m = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
  }
  REEL_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, m);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t(n) * m) >> 32);
#endif
    return (t + n) >> s;
  }
};
// Largest iteration space whose indices go through FastDivider (every n < 2^31).
inline constexpr int64_t kFastIndexLimit = int64_t(1) << 31;

// Calls f(d, r) for each dim d (last to first) with r the coordinate of element i along d
// (row-major over sizes[0..nd)). fast: numel < kFastIndexLimit, divisions by divs[d].
template <class F>
REEL_HD inline void for_each_coord(int64_t i, int nd, const int64_t* sizes, const FastDivider* divs, bool fast, F&& f) {
  if (fast) {
    uint32_t j = static_cast<uint32_t>(i);
    for (int d = nd - 1; d >= 0; --d) {
      const uint32_t q = divs[d].div(j);
      f(d, static_cast<int64_t>(j - q * divs[d].d));
      j = q;
    }
  } else {
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t q = i / sizes[d];
      f(d, i - q * sizes[d]);
      i = q;
    }
  }
}
// Fills sizes' dividers; returns whether numel allows the 32-bit path. (An empty space takes
// the other path: nothing is launched, and its sizes may exceed a divider's range.)
inline bool make_dividers(int nd, const int64_t* sizes, int64_t numel, FastDivider* divs) {
  if (numel == 0 || numel >= kFastIndexLimit) return false;
  for (int d = 0; d < nd; ++d) divs[d] = FastDivider(static_cast<uint32_t>(std::max<int64_t>(sizes[d], 1)));
  return true;
}

// Element i of the iteration space -> the element offset of each of NOps operands.
template <int NOps>
struct OffsetCalc {
  int nd = 1;
  bool fast = false;  // numel < 2^31: indices decomposed with 32-bit dividers
  int64_t sizes[kMaxKernelDims] = {};
  FastDivider divs[kMaxKernelDims] = {};
  int64_t strides[kMaxKernelDims][NOps] = {};
  REEL_HD void get(int64_t i, int64_t* off) const {
    for (int k = 0; k < NOps; ++k) off[k] = 0;
    for_each_coord(i, nd, sizes, divs, fast, [&](int d, int64_t r) {
      for (int k = 0; k < NOps; ++k) off[k] += r * strides[d][k];
    });
  }
  // True when every operand's offset is i times its stride along the single dim (the kernel
  // then skips the divisions).
  bool linear() const { return nd == 1; }
};

template <int NOps>
OffsetCalc<NOps> make_offset_calc(const IterPlan& p) {
  REEL_CHECK(p.nops == NOps, error, "make_offset_calc: ", p.nops, " operands, expected ", NOps);
  REEL_CHECK(p.nd <= kMaxKernelDims, not_implemented_error, "CUDA elementwise kernels handle up to ", kMaxKernelDims,
             " dimensions after merging contiguous ones, got ", p.nd);
  OffsetCalc<NOps> c;
  c.nd = static_cast<int>(p.nd);
  for (int64_t d = 0; d < p.nd; ++d) {
    c.sizes[d] = p.sizes[d];
    for (int k = 0; k < NOps; ++k) c.strides[d][k] = p.stride(k, d);
  }
  c.fast = make_dividers(c.nd, c.sizes, p.numel, c.divs);
  return c;
}

}  // namespace reel::detail
