#pragma once
// The caching device allocator's bookkeeping, independent of CUDA so the CPU test suite can
// check it with a fake backend. A training loop frees and allocates the same sizes every
// step; keeping freed blocks in size-ordered free lists per (device, stream) turns those
// allocations into lookups instead of cudaMalloc/cudaFree calls, which synchronize the
// device. (PyTorch's CUDACachingAllocator, in outline.)
//
// Rules:
//   - request sizes are rounded up: to 512 B below 1 MiB, to 2 MiB above (few buckets,
//     bounded waste);
//   - a block belongs to the stream it was allocated on; freed, it goes back to that stream's
//     free list and is handed out again only for that stream: work queued on the stream may
//     still be using it, and a later allocation on the same stream is ordered after that work;
//   - record_stream(p, s) marks a block as also used by another stream s. Its free then
//     records an event on each such stream and parks the block until every event has
//     completed (allocations poll the events), so s's work is done before the block is reused;
//   - a small request (below 1 MiB) takes the smallest cached block that fits and is at most
//     twice its size (a small request does not pin a huge block);
//   - a large request takes the smallest cached block that fits, splitting it when at least
//     1 MiB would be left over: the front part is handed out, the rest stays cached as a block
//     of the same segment (one backend allocation). Freed blocks merge with free neighbours of
//     their segment on the same free list, and only whole free segments go back to the backend;
//   - after stream_destroyed(s) (the caller has synchronized s), s's cached blocks, and its
//     live blocks once freed, go to a per-device shared list any stream takes from (after its
//     own);
//   - when the backend is out of memory, pending events are waited for, every whole free
//     segment on the device is released and the request retried once before the error is
//     raised.
// The backend is called without the cache's mutex held for allocate and release (cudaMalloc
// and cudaFree synchronize the device and take milliseconds), with it held for the events
// (cheap calls, except event_synchronize on the rare out-of-memory and empty_cache paths).
//
// Backend (static functions):
//   void* allocate(size_t bytes, int device)     nullptr when out of memory;
//   void release(void* p, int device)            p: a pointer allocate returned;
//   E record_event(int device, StreamId s)       an event after the work queued so far on s
//                                                (device: the block's); must not throw (it
//                                                runs when a tensor is freed, in destructors);
//   bool event_done(E e)                         whether e has completed;
//   void event_synchronize(E e)                  waits for e;
//   void destroy_event(E e)                      must not throw.
// E is any copyable handle type.
#include "config.hpp"
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "errors.hpp"

namespace reel::inline REEL_ABI::detail {

// A stream's identity (with CUDA: cudaStreamGetId's, unique for the life of the program).
using StreamId = uint64_t;

struct DeviceMemoryStats {
  int64_t allocated = 0;       // bytes of blocks handed out and not yet freed (a split block
                               // counts the part handed out; a block handed out whole, all of it)
  int64_t reserved = 0;        // bytes of the segments held from the backend: allocated +
                               // pending + cached
  int64_t pending = 0;         // bytes freed but waiting for other streams' events
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

  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  // Forgets the blocks without calling the backend (the process-wide cache is never destroyed).
  ~BlockCache() {
    for (Block* h : segments_)
      for (Block* b = h; b;) delete std::exchange(b, b->next);
  }

  // A block of at least n bytes for `stream` on `device`.
  void* allocate(size_t n, int device, StreamId stream) {
    const size_t size = round_size(n);
    std::unique_lock<std::mutex> lock(mu_);
    for (bool retried = false;; retried = true) {
      process_events();
      if (void* p = take_cached(size, device, stream)) return p;
      lock.unlock();
      void* p = Backend::allocate(size, device);
      lock.lock();
      if (p) return take_segment(static_cast<char*>(p), size, device, stream);
      if (retried)
        raise<error>("CUDA out of memory: tried to allocate ", size, " bytes on device ", device, " (",
                     stats_.allocated, " bytes allocated by reel, ", stats_.reserved, " reserved)");
      synchronize_events();
      release_free_segments(lock, device);
    }
  }

  // Returns p (from allocate) to its stream's free list, or parks it until the streams
  // recorded on it are past their current work.
  void free(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    REEL_CHECK(it != live_.end(), error, "CUDA allocator: free of a pointer it did not allocate");
    Block* b = it->second;
    live_.erase(it);
    stats_.allocated -= static_cast<int64_t>(b->size);
    if (b->uses.empty()) {
      insert_free(b);
      return;
    }
    b->state = State::Pending;
    stats_.pending += static_cast<int64_t>(b->size);
    for (StreamId s : b->uses) {
      pending_[s].push_back({Backend::record_event(b->device, s), b});
      ++b->events;
    }
    b->uses.clear();
  }

  // Marks live block p as used by stream s too (torch.Tensor.record_stream): its free will
  // wait for the work queued on s by then.
  void record_stream(void* p, StreamId s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    REEL_CHECK(it != live_.end(), error, "CUDA allocator: record_stream on a pointer that is not a live block");
    Block* b = it->second;
    if (!b->pool->key.shared && b->pool->key.stream == s) return;  // ordered on its own stream already
    if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
  }

  // Stream s is gone and nothing is queued on it any more (the caller synchronized it): its
  // free blocks, and its live ones once freed, are safe for any stream, and its recorded uses
  // need no event.
  void stream_destroyed(StreamId s) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Block*> moved;
    for (Block* h : segments_)
      for (Block* b = h; b; b = b->next) {
        std::erase(b->uses, s);
        if (!b->pool->key.shared && b->pool->key.stream == s) moved.push_back(b);
      }
    // Address order within each segment: a block merges only with neighbours already moved
    // (or already shared), never with one still waiting in `moved`.
    for (Block* b : moved) {
      Pool& shared = pool(PoolKey{b->device, true, 0});
      if (b->state != State::Free) {
        b->pool = &shared;
        continue;
      }
      remove_free(b);
      b->pool = &shared;
      insert_free(b);
    }
    std::erase_if(pools_, [&](const auto& kv) { return !kv.first.shared && kv.first.stream == s; });
  }

  // Waits for pending events, then gives every whole free segment back to the backend;
  // device < 0: all devices.
  void empty_cache(int device = -1) {
    std::unique_lock<std::mutex> lock(mu_);
    synchronize_events();
    release_free_segments(lock, device);
  }

  DeviceMemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  // Bytes on free lists, ready to be handed out.
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
    return it == live_.end() ? 0 : it->second->size;
  }

 private:
  using Event = decltype(Backend::record_event(0, StreamId{}));
  struct Pool;
  enum class State : uint8_t { Live, Pending, Free };
  // A piece of a segment; the pieces of one segment form a list in address order.
  struct Block {
    Block(char* p, size_t n, int d, Pool* pl, State st) : ptr(p), size(n), device(d), pool(pl), state(st) {}
    char* ptr;
    size_t size;
    int device;
    Pool* pool;  // the free list it returns to: its allocation stream's, or a shared one
    State state;
    Block* prev = nullptr;
    Block* next = nullptr;
    int events = 0;                // pending: events not yet completed
    std::vector<StreamId> uses;  // live: streams recorded besides its own
  };
  struct BySize {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : std::less<char*>()(a->ptr, b->ptr);
    }
    bool operator()(const Block* a, size_t n) const { return a->size < n; }
    bool operator()(size_t n, const Block* b) const { return n < b->size; }
  };
  struct PoolKey {
    int device;
    bool shared;  // the blocks of destroyed streams (stream: 0)
    StreamId stream;
    auto operator<=>(const PoolKey&) const = default;
  };
  struct Pool {
    explicit Pool(PoolKey k) : key(k) {}
    PoolKey key;
    std::set<Block*, BySize> free;
  };
  struct PendingFree {
    Event event;
    Block* block;
  };

  static bool is_large(size_t size) { return size > kLargeThreshold; }  // (a rounded size)

  Pool& pool(PoolKey k) { return pools_.try_emplace(k, k).first->second; }

  Block* best_fit(Pool& p, size_t size) {
    auto it = p.free.lower_bound(size);
    if (it == p.free.end() || (!is_large(size) && (*it)->size > 2 * size)) return nullptr;
    return *it;
  }

  void* take_cached(size_t size, int device, StreamId stream) {
    Pool& own = pool(PoolKey{device, false, stream});
    Block* b = best_fit(own, size);
    if (!b) {
      auto it = pools_.find(PoolKey{device, true, 0});
      if (it != pools_.end()) b = best_fit(it->second, size);
    }
    if (!b) return nullptr;
    remove_free(b);
    if (is_large(size) && b->size - size >= kLargeThreshold) {
      // The rest stays on the list b came from (its neighbour there was not free: b would
      // have merged with it).
      Block* rest = new Block(b->ptr + size, b->size - size, b->device, b->pool, State::Free);
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      add_to_pool(rest);
    }
    b->pool = &own;
    b->state = State::Live;
    ++stats_.cache_hits;
    return hand_out(b);
  }

  void* take_segment(char* p, size_t size, int device, StreamId stream) {
    Block* b = new Block(p, size, device, &pool(PoolKey{device, false, stream}), State::Live);
    segments_.push_back(b);
    ++stats_.backend_allocs;
    stats_.reserved += static_cast<int64_t>(size);
    return hand_out(b);
  }

  void* hand_out(Block* b) {
    live_.emplace(b->ptr, b);
    stats_.allocated += static_cast<int64_t>(b->size);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return b->ptr;
  }

  bool mergeable(const Block* n, const Block* b) const { return n && n->state == State::Free && n->pool == b->pool; }

  // b becomes free: merged with free neighbours of its segment on the same list, then listed.
  void insert_free(Block* b) {
    b->state = State::Free;
    if (mergeable(b->prev, b)) {
      remove_free(b->prev);
      b = absorb_next(b->prev);
    }
    if (mergeable(b->next, b)) {
      remove_free(b->next);
      absorb_next(b);
    }
    add_to_pool(b);
  }
  // a takes over the memory of the block after it in their segment; returns a.
  static Block* absorb_next(Block* a) {
    Block* n = a->next;
    a->size += n->size;
    a->next = n->next;
    if (n->next) n->next->prev = a;
    delete n;
    return a;
  }
  void add_to_pool(Block* b) {
    b->pool->free.insert(b);
    cached_ += static_cast<int64_t>(b->size);
  }
  void remove_free(Block* b) {
    b->pool->free.erase(b);
    cached_ -= static_cast<int64_t>(b->size);
  }

  // Events on one stream complete in order, so each stream's queue is polled up to its first
  // unfinished event.
  void process_events() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto& q = it->second;
      while (!q.empty() && Backend::event_done(q.front().event)) {
        Backend::destroy_event(q.front().event);
        Block* b = q.front().block;
        q.pop_front();
        if (--b->events == 0) {
          stats_.pending -= static_cast<int64_t>(b->size);
          insert_free(b);
        }
      }
      it = q.empty() ? pending_.erase(it) : std::next(it);
    }
  }
  void synchronize_events() {
    for (auto& [s, q] : pending_)
      for (auto& e : q) Backend::event_synchronize(e.event);
    process_events();
  }

  // Takes every whole free segment on `device` (< 0: all) out of the books, then releases
  // them with the mutex unlocked.
  void release_free_segments(std::unique_lock<std::mutex>& lock, int device) {
    std::vector<std::pair<void*, int>> out;
    for (size_t i = 0; i < segments_.size();) {
      Block* h = segments_[i];
      bool whole_free = device < 0 || h->device == device;
      for (Block* b = h; b && whole_free; b = b->next) whole_free = b->state == State::Free;
      if (!whole_free) {
        ++i;
        continue;
      }
      out.emplace_back(h->ptr, h->device);
      for (Block* b = h; b;) {
        remove_free(b);
        stats_.reserved -= static_cast<int64_t>(b->size);
        delete std::exchange(b, b->next);
      }
      ++stats_.backend_frees;
      segments_[i] = segments_.back();
      segments_.pop_back();
    }
    lock.unlock();
    for (auto [p, d] : out) Backend::release(p, d);
    lock.lock();
  }

  mutable std::mutex mu_;
  std::map<PoolKey, Pool> pools_;
  std::vector<Block*> segments_;  // each segment's first block (it keeps the base address)
  std::unordered_map<void*, Block*> live_;
  std::map<StreamId, std::deque<PendingFree>> pending_;  // by the stream each event is on
  DeviceMemoryStats stats_;
  int64_t cached_ = 0;
};

}  // namespace reel::detail
