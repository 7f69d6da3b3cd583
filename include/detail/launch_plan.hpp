#pragma once
// Launch geometry and offset calculation for the CUDA elementwise kernels, kept free of
// CUDA so the CPU test suite checks them. All index arithmetic is 64-bit: a tensor of
// 2^32 + 2^20 elements must have every element written (a 32-bit thread index, or a
// 32-bit product blockIdx * blockDim, wraps around and silently skips or repeats elements).
#include <algorithm>
#include <cstdint>

#include "expr/engine.hpp"
#include "hd.hpp"

namespace reel::detail {

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

// Element i of the iteration space -> the element offset of each of NOps operands.
template <int NOps>
struct OffsetCalc {
  int nd = 1;
  int64_t sizes[kMaxKernelDims] = {};
  int64_t strides[kMaxKernelDims][NOps] = {};
  REEL_HD void get(int64_t i, int64_t* off) const {
    for (int k = 0; k < NOps; ++k) off[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t q = i / sizes[d], r = i - q * sizes[d];
      i = q;
      for (int k = 0; k < NOps; ++k) off[k] += r * strides[d][k];
    }
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
  return c;
}

}  // namespace reel::detail
