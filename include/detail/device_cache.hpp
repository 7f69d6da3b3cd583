#pragma once
// The caching device allocator's bookkeeping, independent of CUDA so the CPU test suite can
// check it with a fake backend. A training loop frees and allocates the same sizes every
// step; keeping freed blocks in size-bucketed free lists per (device, stream) turns those
// allocations into list lookups instead of cudaMalloc/cudaFree calls, which synchronize the
// device.
//
// Rules:
//   - request sizes are rounded up: to 512 B below 1 MiB, to 2 MiB above (few buckets,
//     bounded waste);
//   - a freed block goes back to the free list of the stream it was allocated on, and is
//     handed out again only for that stream (work queued on that stream may still be using
//     it; a later allocation on the same stream is ordered after that work);
//   - a request takes the smallest cached block that fits and is at most twice its size
//     (a small request does not pin a huge block);
//   - when the backend is out of memory, every cached block is released and the request
//     retried once before the error is raised.
// Backend: `static void* allocate(size_t bytes, int device)` (nullptr when out of memory),
// `static void release(void* p, int device)`.
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "../errors.hpp"

namespace reel::detail {

struct DeviceMemoryStats {
  int64_t allocated = 0;       // bytes of blocks handed out and not yet freed
  int64_t reserved = 0;        // allocated + cached (what the backend holds for us)
  int64_t peak_allocated = 0;  // most `allocated` since the last reset_peak()
  int64_t backend_allocs = 0;  // calls to Backend::allocate that succeeded
  int64_t backend_frees = 0;   // calls to Backend::release
  int64_t cache_hits = 0;      // requests served from a free list
};

template <class Backend>
class BlockCache {
 public:
  static constexpr size_t kSmallGranule = 512;
  static constexpr size_t kLargeThreshold = size_t(1) << 20;
  static constexpr size_t kLargeGranule = size_t(2) << 20;

  static size_t round_size(size_t n) {
    if (n == 0) n = 1;
    size_t g = n < kLargeThreshold ? kSmallGranule : kLargeGranule;
    return (n + g - 1) / g * g;
  }

  // A block of at least n bytes for `stream` on `device` (stream: an opaque key).
  void* allocate(size_t n, int device, const void* stream) {
    const size_t size = round_size(n);
    std::lock_guard<std::mutex> lock(mu_);
    auto& fl = free_[Key{device, stream}];
    auto it = fl.lower_bound(size);
    if (it != fl.end() && it->first <= 2 * size) {
      void* p = it->second;
      size_t got = it->first;
      fl.erase(it);
      cached_ -= static_cast<int64_t>(got);
      ++stats_.cache_hits;
      take(p, Block{got, device, stream});
      return p;
    }
    void* p = Backend::allocate(size, device);
    if (!p) {  // out of memory: give every cached block on this device back, then retry
      release_cached(device);
      p = Backend::allocate(size, device);
    }
    if (!p)
      raise<error>("CUDA out of memory: tried to allocate ", size, " bytes on device ", device, " (", stats_.allocated,
                   " bytes allocated by reel, ", stats_.reserved, " reserved)");
    ++stats_.backend_allocs;
    stats_.reserved += static_cast<int64_t>(size);
    take(p, Block{size, device, stream});
    return p;
  }

  // Returns p (from allocate) to its stream's free list.
  void free(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    REEL_CHECK(it != live_.end(), error, "CUDA allocator: free of a pointer it did not allocate");
    Block b = it->second;
    live_.erase(it);
    stats_.allocated -= static_cast<int64_t>(b.size);
    free_[Key{b.device, b.stream}].emplace(b.size, p);
    cached_ += static_cast<int64_t>(b.size);
  }

  // Gives every cached (free) block back to the backend; device < 0: all devices.
  void empty_cache(int device = -1) {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached(device);
  }

  DeviceMemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  int64_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated = stats_.allocated;
  }
  // Size of the block behind p (0 if p is not a live block).
  size_t block_size(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(const_cast<void*>(p));
    return it == live_.end() ? 0 : it->second.size;
  }

 private:
  struct Block {
    size_t size;
    int device;
    const void* stream;
  };
  struct Key {
    int device;
    const void* stream;
    bool operator<(const Key& o) const { return device != o.device ? device < o.device : std::less<const void*>()(stream, o.stream); }
  };
  void take(void* p, Block b) {
    live_.emplace(p, b);
    stats_.allocated += static_cast<int64_t>(b.size);
    if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  }
  void release_cached(int device) {
    for (auto& [k, fl] : free_) {
      if (device >= 0 && k.device != device) continue;
      for (auto& [sz, p] : fl) {
        Backend::release(p, k.device);
        ++stats_.backend_frees;
        stats_.reserved -= static_cast<int64_t>(sz);
        cached_ -= static_cast<int64_t>(sz);
      }
      fl.clear();
    }
  }

  mutable std::mutex mu_;
  std::map<Key, std::multimap<size_t, void*>> free_;
  std::unordered_map<void*, Block> live_;
  DeviceMemoryStats stats_;
  int64_t cached_ = 0;
};

}  // namespace reel::detail
