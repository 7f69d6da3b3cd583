#pragma once
// Chunk planning of a multi-tensor apply (the CUDA foreach and fused-optimizer kernels):
// which tensors and which chunks of them each kernel launch handles. Pure host C++, so it
// is tested on the CPU (tests/test_mta_plan.cpp); reel/cuda/multi_tensor.cuh only fills
// the argument struct below from a plan and launches.
//
// A launch's work is a table of tensor slots (pointers, element count, per-tensor scalars)
// and a map block -> (slot, chunk of that tensor); block b processes elements
// [chunk * chunk_size, min((chunk + 1) * chunk_size, numel)) of its slot's tensor. All of
// it travels as one by-value kernel argument (no device allocation, no copy), so its size
// is bounded by the 4 KiB kernel parameter limit: that bound fixes how many slots and
// blocks a launch can have. A tensor whose chunks do not all fit one launch continues in
// the next (it then has a slot in both); empty tensors get no slot at all.
#include "../core/config.hpp"
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "../core/errors.hpp"

namespace reel::inline REEL_ABI::detail::mta {

// ---- the kernel argument layout and the limits it implies
inline constexpr size_t kParamLimit = 4096;  // bytes of kernel parameters (all architectures)
inline constexpr size_t kOpBudget = 256;     // reserved for the op's own parameters (scalars, flags)
inline constexpr int kMaxBlocks = 320;       // blocks per launch (as PyTorch: 2-3 waves of work per SM)
inline constexpr int64_t kChunkSize = 65536; // elements per block (default)

// Slots a launch can hold with N pointer lists and S per-tensor double scalars: each slot
// costs N pointers, one element count and S scalars; the block map costs 5 bytes per block
// (uint8 slot + int32 chunk). Capped at 255 because a block names its slot in one byte.
constexpr int max_tensors(int n_lists, int n_scalars) {
  size_t per_slot = sizeof(void*) * static_cast<size_t>(n_lists) + sizeof(int64_t) +
                    sizeof(double) * static_cast<size_t>(n_scalars);
  size_t avail = kParamLimit - kOpBudget - kMaxBlocks * (sizeof(uint8_t) + sizeof(int32_t)) - 16;  // 16: padding
  size_t n = avail / per_slot;
  return static_cast<int>(n > 255 ? 255 : n);
}

// Per-tensor scalars (e.g. Adam's per-parameter step size, whose step counts may differ).
template <int S, int MaxT> struct SlotScalars {
  double scalar[S][MaxT];
};
template <int MaxT> struct SlotScalars<0, MaxT> {};

// The by-value kernel argument: N pointer lists, S per-tensor scalars, the block map.
// (Plain data: the same definition is read by host code and device code.)
template <int N, int S = 0>
struct ListMeta : SlotScalars<S, max_tensors(N, S)> {
  static constexpr int kLists = N, kScalars = S, kMaxTensors = max_tensors(N, S), kMaxBlocks = mta::kMaxBlocks;
  void* ptr[N][kMaxTensors];
  int64_t numel[kMaxTensors];
  int32_t block_chunk[kMaxBlocks];
  uint8_t block_slot[kMaxBlocks];
};
#define REEL_MTA_CHECK_SIZE(N, S)                                                                            \
  static_assert(sizeof(ListMeta<N, S>) + kOpBudget <= kParamLimit, "multi-tensor apply: argument too large"); \
  static_assert(ListMeta<N, S>::kMaxTensors >= 16, "multi-tensor apply: too few slots per launch")
REEL_MTA_CHECK_SIZE(1, 0);
REEL_MTA_CHECK_SIZE(2, 0);
REEL_MTA_CHECK_SIZE(3, 0);
REEL_MTA_CHECK_SIZE(4, 0);
REEL_MTA_CHECK_SIZE(5, 0);
REEL_MTA_CHECK_SIZE(1, 1);
REEL_MTA_CHECK_SIZE(2, 1);
REEL_MTA_CHECK_SIZE(3, 1);
REEL_MTA_CHECK_SIZE(4, 1);
REEL_MTA_CHECK_SIZE(5, 1);
REEL_MTA_CHECK_SIZE(4, 2);
REEL_MTA_CHECK_SIZE(5, 2);
#undef REEL_MTA_CHECK_SIZE

// ---- the plan
struct Launch {
  std::vector<size_t> slot_tensor;   // slot -> index of the tensor in the input list
  std::vector<uint8_t> block_slot;   // block -> slot
  std::vector<int32_t> block_chunk;  // block -> chunk index within its tensor
  int blocks() const { return static_cast<int>(block_slot.size()); }
};

// Plans the launches for tensors of the given element counts: every element of every
// tensor in exactly one block, at most max_tensors slots and max_blocks blocks per launch,
// tensors in list order. No tensors (or only empty ones): no launches.
inline std::vector<Launch> plan(std::span<const int64_t> numel, int64_t chunk_size, int max_tensors,
                                int max_blocks) {
  REEL_CHECK(chunk_size > 0 && max_tensors > 0 && max_tensors <= 256 && max_blocks > 0, value_error,
             "multi-tensor apply: invalid limits (chunk ", chunk_size, ", tensors ", max_tensors, ", blocks ", max_blocks,
             ")");
  std::vector<Launch> out;
  Launch cur;
  auto flush = [&] {
    if (cur.blocks() > 0) out.push_back(std::move(cur));
    cur = Launch{};
  };
  for (size_t t = 0; t < numel.size(); ++t) {
    const int64_t n = numel[t];
    REEL_CHECK(n >= 0, value_error, "multi-tensor apply: tensor ", t, " has a negative element count ", n);
    if (n == 0) continue;
    const int64_t chunks = (n - 1) / chunk_size + 1;  // (no overflow near INT64_MAX)
    REEL_CHECK(chunks - 1 <= std::numeric_limits<int32_t>::max(), value_error, "multi-tensor apply: tensor ", t,
               " has ", n, " elements, more than ", std::numeric_limits<int32_t>::max(), " chunks of ", chunk_size);
    for (int64_t c = 0; c < chunks;) {
      // A slot is opened only when a block goes to it, so no slot is ever empty.
      if (static_cast<int>(cur.slot_tensor.size()) == max_tensors) flush();
      const auto slot = static_cast<uint8_t>(cur.slot_tensor.size());
      cur.slot_tensor.push_back(t);
      const int64_t take = std::min<int64_t>(chunks - c, max_blocks - cur.blocks());
      for (int64_t k = 0; k < take; ++k) {
        cur.block_slot.push_back(slot);
        cur.block_chunk.push_back(static_cast<int32_t>(c + k));
      }
      c += take;
      if (cur.blocks() == max_blocks) flush();  // (the rest of this tensor, if any, starts the next launch)
    }
  }
  flush();
  return out;
}

}  // namespace reel::detail::mta
