#pragma once
// The bodies of philox's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "philox.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE void fill_uint32(uint64_t seed, uint64_t start_block, uint64_t begin, uint64_t end,
                        uint32_t* out) noexcept {
  const auto key = philox_key(seed);
  uint64_t i = begin;
  while (i < end) {
    const auto r = philox4x32_10(philox_counter(start_block + i / 4), key);
    for (uint64_t j = i % 4; j < 4 && i < end; ++j, ++i) *out++ = r[j];
  }
}

}  // namespace
}  // namespace

namespace reel::inline REEL_ABI {
REEL_INLINE Generator& default_generator() {
  static Generator gen(default_seed);
  return gen;
}

}  // namespace
