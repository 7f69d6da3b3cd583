#pragma once
// Storage: one refcounted block of bytes shared by every view of it. Meta storage records
// only its size. Large CPU blocks go through a small caching allocator so the rebinding
// form `y = a * b + c;` in a loop reuses the previous step's block instead of paying fresh
// page faults each time.
#include "config.hpp"
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "errors.hpp"
#include "capture.hpp"

namespace reel::inline REEL_ABI {

struct CPU {
  static constexpr const char* name = "cpu";
};
struct CUDA {
  static constexpr const char* name = "cuda";
};
struct Meta {
  static constexpr const char* name = "meta";
};
enum class DeviceType { CPU, CUDA, Meta };
template <class D> inline constexpr DeviceType device_type_v =
    std::is_same_v<D, CPU> ? DeviceType::CPU : std::is_same_v<D, CUDA> ? DeviceType::CUDA : DeviceType::Meta;

namespace detail {

// Per-thread free lists for the small objects every op creates (tensor handles, storages,
// autograd nodes and state). A graph of many small ops allocates and frees them by the
// thousand; malloc's own per-thread cache holds only a few blocks per size, so without
// this most of a recorded scalar op's time went into malloc and free. Blocks freed by
// another thread join that thread's lists; nothing is returned to the system before the
// thread exits (the lists are capped).
class SmallPool {
 public:
  static constexpr size_t kGranule = 16, kClasses = 24, kMaxFree = size_t(1) << 16;
  static void* allocate(size_t n) {
    size_t c = (n + kGranule - 1) / kGranule;
    State& st = state();
    if (c == 0 || c > kClasses || !st.alive) return ::operator new(n);
    st.in_use += static_cast<int64_t>(c * kGranule);
    FreeList& f = st.lists[c - 1];
    if (!f.head) {
      owner();  // registers the cleanup of this thread's lists
      return ::operator new(c * kGranule);
    }
    void* p = f.head;
    f.head = *static_cast<void**>(p);
    --f.count;
    return p;
  }
  static void deallocate(void* p, size_t n) {
    size_t c = (n + kGranule - 1) / kGranule;
    State& st = state();
    if (c == 0 || c > kClasses || !st.alive) return ::operator delete(p);
    st.in_use -= static_cast<int64_t>(c * kGranule);
    FreeList& f = st.lists[c - 1];
    if (f.count >= kMaxFree) return ::operator delete(p);
    if (!f.head) owner();              // (blocks may come from other threads)
    *static_cast<void**>(p) = f.head;  // the free block holds the link
    f.head = p;
    ++f.count;
  }
  // Bytes of pooled blocks this thread handed out minus those it took back (for measuring).
  static int64_t in_use() { return state().in_use; }

 private:
  struct FreeList {
    void* head = nullptr;
    size_t count = 0;
  };
  struct State {  // trivially destructible: usable until the thread ends
    bool alive = true;
    int64_t in_use = 0;
    FreeList lists[kClasses];
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  struct Owner {
    ~Owner() {
      State& st = state();
      st.alive = false;
      for (auto& f : st.lists)
        while (f.head) {
          void* p = f.head;
          f.head = *static_cast<void**>(p);
          ::operator delete(p);
        }
    }
  };
  static Owner& owner() {
    thread_local Owner o;
    return o;
  }
};
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U> PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(SmallPool::allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { SmallPool::deallocate(p, n * sizeof(T)); }
  template <class U> bool operator==(const PoolAllocator<U>&) const { return true; }
};
template <class T> using PoolVector = std::vector<T, PoolAllocator<T>>;
// std::make_shared through the pool (object and reference counts in one pooled block).
template <class T, class... A>
std::shared_ptr<T> make_pooled(A&&... a) {
  static_assert(alignof(T) <= 16, "reel: pooled objects need at most 16-byte alignment");
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<A>(a)...);
}

class CachingHostAllocator {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kCacheThreshold = size_t(1) << 16;  // blocks below this use malloc directly
  static constexpr size_t kMaxCached = size_t(2) << 30;       // bytes kept idle at most

  static CachingHostAllocator& instance() {
    static auto* a = new CachingHostAllocator();  // leaked on purpose: outlives static tensors
    return *a;
  }

  // counted false: scratch memory of a kernel (GEMM packing buffers), cached and reused like
  // tensor storage but not part of memory_allocated(), which counts tensors as PyTorch does
  void* allocate(size_t nbytes, bool counted = true) {
    if (nbytes == 0) return nullptr;
    size_t rounded = round_up(nbytes);
    if (rounded >= kCacheThreshold) {
      std::lock_guard<std::mutex> lock(mu_);
      // Best fit within 2x so a small request does not pin a huge block.
      auto it = free_.lower_bound(rounded);
      if (it != free_.end() && it->first <= 2 * rounded) {
        void* p = it->second;
        cached_bytes_ -= it->first;
        sizes_[p] = it->first;
        if (counted) note(static_cast<int64_t>(it->first));
        free_.erase(it);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) raise<error>("CPU allocator: out of memory allocating ", nbytes, " bytes");
    if (rounded >= kCacheThreshold) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[p] = rounded;
    }
    if (counted) note(static_cast<int64_t>(rounded));
    return p;
  }

  void deallocate(void* p, size_t nbytes, bool counted = true) {
    if (!p) return;
    size_t rounded = round_up(nbytes);
    if (rounded >= kCacheThreshold) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      size_t sz = it == sizes_.end() ? rounded : it->second;
      if (it != sizes_.end()) sizes_.erase(it);
      if (counted) in_use_.fetch_sub(static_cast<int64_t>(sz), std::memory_order_relaxed);
      if (cached_bytes_ + sz <= kMaxCached) {
        free_.emplace(sz, p);
        cached_bytes_ += sz;
        return;
      }
    } else if (counted) {
      in_use_.fetch_sub(static_cast<int64_t>(rounded), std::memory_order_relaxed);
    }
    std::free(p);
  }

  // Returns idle cached blocks to the system.
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [sz, p] : free_) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }
  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }
  // Bytes of tensor storage handed out and not yet given back (cached blocks excluded), and
  // the most there has been since the last reset_peak().
  int64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(in_use(), std::memory_order_relaxed); }

 private:
  void note(int64_t n) {
    int64_t now = in_use_.fetch_add(n, std::memory_order_relaxed) + n;
    int64_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  std::atomic<int64_t> in_use_{0}, peak_{0};
  static size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
  size_t cached_bytes_ = 0;
};

// Storages are numbered in the order they are made (checkpoint tells the storages its
// recomputation made from older ones by it).
inline std::atomic<uint64_t>& storage_serials() {
  static std::atomic<uint64_t> n{0};
  return n;
}

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  DeviceType device = DeviceType::CPU;
  // Non-owning storages (asarray of a foreign buffer, Eigen maps) keep the owner alive here.
  std::shared_ptr<void> owner;
  void (*free_fn)(void*, size_t) = nullptr;
  // Bumped by every in-place write; autograd compares it against saved versions.
  std::atomic<uint64_t> version{0};
  uint64_t serial = storage_serials().fetch_add(1, std::memory_order_relaxed) + 1;
  // Small tensors (scalars, losses, the nodes of scalar graphs) keep their bytes here: one
  // allocation per tensor instead of two.
  static constexpr size_t kInlineBytes = 64;
  alignas(16) unsigned char inline_bytes[kInlineBytes];

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (free_fn) free_fn(data, nbytes);
  }
};

REEL_INLINE std::shared_ptr<Storage> make_storage(size_t nbytes, DeviceType dev);

// A new CUDA storage holding a copy of n host bytes: set by <reel/cuda.hpp> (a program built
// without it has none), for code that moves type-erased storages (checkpoint loading).
inline std::shared_ptr<Storage> (*storage_to_cuda)(const void* host, size_t n) = nullptr;


}  // namespace detail

inline void empty_cache() { detail::CachingHostAllocator::instance().empty_cache(); }
// CPU tensor memory in use (bytes of storage blocks; tensors of up to 64 bytes live inside
// their storage object and are not counted), and its peak since reset_peak_memory_stats():
// torch.cuda.memory_allocated / max_memory_allocated, for the CPU.
inline int64_t memory_allocated() { return detail::CachingHostAllocator::instance().in_use(); }
inline int64_t max_memory_allocated() { return detail::CachingHostAllocator::instance().peak(); }
inline void reset_peak_memory_stats() { detail::CachingHostAllocator::instance().reset_peak(); }

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "storage-inl.hpp"
#endif
