#pragma once
// Storage: one refcounted block of bytes shared by every view of it. Meta storage records
// only its size. Large CPU blocks go through a small caching allocator so the rebinding
// form `y = a * b + c;` in a loop reuses the previous step's block instead of paying fresh
// page faults each time.
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "../errors.hpp"

namespace reel {

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

class CachingHostAllocator {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kCacheThreshold = size_t(1) << 20;  // blocks below this use malloc directly
  static constexpr size_t kMaxCached = size_t(2) << 30;       // bytes kept idle at most

  static CachingHostAllocator& instance() {
    static auto* a = new CachingHostAllocator();  // leaked on purpose: outlives static tensors
    return *a;
  }

  void* allocate(size_t nbytes) {
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
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    if (!p) return;
    size_t rounded = round_up(nbytes);
    if (rounded >= kCacheThreshold) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      size_t sz = it == sizes_.end() ? rounded : it->second;
      if (it != sizes_.end()) sizes_.erase(it);
      if (cached_bytes_ + sz <= kMaxCached) {
        free_.emplace(sz, p);
        cached_bytes_ += sz;
        return;
      }
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

 private:
  static size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
  size_t cached_bytes_ = 0;
};

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  DeviceType device = DeviceType::CPU;
  // Non-owning storages (asarray of a foreign buffer, Eigen maps) keep the owner alive here.
  std::shared_ptr<void> owner;
  void (*free_fn)(void*, size_t) = nullptr;
  // Bumped by every in-place write; autograd compares it against saved versions.
  std::atomic<uint64_t> version{0};

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (free_fn) free_fn(data, nbytes);
  }
};

inline std::shared_ptr<Storage> make_storage(size_t nbytes, DeviceType dev) {
  auto s = std::make_shared<Storage>();
  s->nbytes = nbytes;
  s->device = dev;
  if (dev == DeviceType::CPU) {
    s->data = CachingHostAllocator::instance().allocate(nbytes);
    s->free_fn = [](void* p, size_t n) { CachingHostAllocator::instance().deallocate(p, n); };
  } else if (dev == DeviceType::CUDA) {
    raise<not_implemented_error>("CUDA storage needs reel compiled with CUDA support (include <cuda.hpp> from a .cu file)");
  }
  return s;
}

}  // namespace detail

inline void empty_cache() { detail::CachingHostAllocator::instance().empty_cache(); }

}  // namespace reel
