// The host-side parts of the CUDA backend, tested on the CPU: the caching allocator's
// bookkeeping (with a fake backend), launch geometry, the offset calculator the elementwise
// kernels use (against offsets computed straight from sizes and strides).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <reel/reel.hpp>
#include <set>
#include <thread>

#include <reel/core/device_cache.hpp>
#include <reel/expr/launch_plan.hpp>

using namespace reel;
using namespace reel::detail;

namespace {
// A fake device: hands out distinct addresses, counts calls, and runs out of memory past
// `capacity` bytes. Its events complete when the test says so (complete) or waits for them.
struct FakeBackend {
  static inline int64_t capacity = int64_t(1) << 40, used = 0, allocs = 0, releases = 0, syncs = 0;
  static inline uintptr_t next = 0x10000;
  static inline std::map<void*, size_t> live;
  struct Event {
    StreamId stream;
    bool done = false, destroyed = false;
  };
  static inline std::vector<Event> events;
  static void reset(int64_t cap) {
    capacity = cap;
    used = allocs = releases = syncs = 0;
    live.clear();
    events.clear();
  }
  static void* allocate(size_t n, int) {
    if (used + static_cast<int64_t>(n) > capacity) return nullptr;
    used += static_cast<int64_t>(n);
    ++allocs;
    void* p = reinterpret_cast<void*>(next);
    next += n + 4096;
    live[p] = n;
    return p;
  }
  static void release(void* p, int) {
    REQUIRE(live.count(p) == 1);
    used -= static_cast<int64_t>(live[p]);
    live.erase(p);
    ++releases;
  }
  static size_t record_event(int, StreamId s) {
    events.push_back({s});
    return events.size() - 1;
  }
  static bool event_done(size_t e) {
    REQUIRE(!events[e].destroyed);
    return events[e].done;
  }
  static void event_synchronize(size_t e) {
    REQUIRE(!events[e].destroyed);
    events[e].done = true;
    ++syncs;
  }
  static void destroy_event(size_t e) {
    REQUIRE(!events[e].destroyed);
    events[e].destroyed = true;
  }
  static void complete(StreamId s) {
    for (auto& e : events)
      if (e.stream == s) e.done = true;
  }
};
constexpr StreamId stream_a = 0xA, stream_b = 0xB, stream_c = 0xC, stream_d = 0xD;
}  // namespace

TEST_CASE("device cache: sizes round to 512 B below 1 MiB and to 2 MiB above") {
  using C = BlockCache<FakeBackend>;
  CHECK(C::round_size(0) == 512);
  CHECK(C::round_size(1) == 512);
  CHECK(C::round_size(512) == 512);
  CHECK(C::round_size(513) == 1024);
  CHECK(C::round_size((1 << 20) - 1) == (1 << 20));
  CHECK(C::round_size(1 << 20) == (2 << 20));
  CHECK(C::round_size((2 << 20) + 1) == (4 << 20));
}

TEST_CASE("device cache: a freed block is reused on its stream and counted") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* p = c.allocate(1000, 0, stream_a);
  CHECK(c.stats().allocated == 1024);
  CHECK(c.stats().reserved == 1024);
  c.free(p);
  CHECK(c.stats().allocated == 0);
  CHECK(c.cached_bytes() == 1024);
  CHECK(c.allocate(900, 0, stream_b) != p);  // another stream does not get it
  void* q = c.allocate(1024, 0, stream_a);
  CHECK(q == p);  // the same stream does, without a backend call
  CHECK(FakeBackend::allocs == 2);
  CHECK(c.stats().cache_hits == 1);
  CHECK(c.stats().peak_allocated == 2048);
  c.free(q);
  c.reset_peak();
  CHECK(c.stats().peak_allocated == 1024);
}

TEST_CASE("device cache: best fit; a small request takes no block over twice its size") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* big = c.allocate(8 << 20, 0, stream_a);
  void* mid = c.allocate(3 << 20, 0, stream_a);
  c.free(big);
  c.free(mid);
  CHECK(c.allocate(3 << 20, 0, stream_a) == mid);    // 4 MiB block (rounded), exact bucket
  void* small = c.allocate(512 << 10, 0, stream_a);  // small: the 8 MiB block is > 2x, so fresh
  CHECK(small != big);
  CHECK(c.block_size(small) == (512 << 10));
  void* four = c.allocate(4 << 20, 0, stream_a);  // large: the 8 MiB block, split
  CHECK(four == big);
  CHECK(c.block_size(four) == (4 << 20));
  CHECK(c.cached_bytes() == (4 << 20));  // its other half
  // A small request of 1 MiB (rounded): the 4 MiB half is > 2x, so fresh.
  CHECK(c.allocate((1 << 20) - 100, 0, stream_a) != static_cast<char*>(big) + (4 << 20));
  CHECK(FakeBackend::allocs == 4);
}

TEST_CASE("device cache: out of memory empties the cache, retries, then raises with figures") {
  FakeBackend::reset(int64_t(10) << 20);
  BlockCache<FakeBackend> c;
  void* a = c.allocate(4 << 20, 0, stream_a);
  void* b = c.allocate(4 << 20, 0, stream_b);
  c.free(b);  // 4 MiB cached on stream b
  void* d = c.allocate(6 << 20, 0, stream_a);  // needs the cached block back from the backend
  CHECK(d != nullptr);
  CHECK(FakeBackend::releases == 1);
  CHECK(c.cached_bytes() == 0);
  CHECK(c.stats().reserved == (10 << 20));
  try {
    c.allocate(1 << 20, 0, stream_a);
    FAIL("should be out of memory");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("out of memory") != std::string::npos);
    CHECK(std::string(e.what()).find("10485760 bytes allocated") != std::string::npos);
  }
  c.free(a);
  c.free(d);
  c.empty_cache();
  CHECK(FakeBackend::used == 0);
  CHECK(c.stats().reserved == 0);
  CHECK_THROWS_AS(c.free(reinterpret_cast<void*>(0x1)), error);
}

TEST_CASE("device cache: a block recorded on another stream is reused only after that stream's event") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* p = c.allocate(1000, 0, stream_a);
  c.record_stream(p, stream_b);
  c.free(p);
  REQUIRE(FakeBackend::events.size() == 1);
  CHECK(FakeBackend::events[0].stream == stream_b);
  CHECK(c.stats().pending == 1024);
  CHECK(c.stats().reserved == 1024);
  CHECK(c.cached_bytes() == 0);
  void* q = c.allocate(1000, 0, stream_a);  // b may still be reading p
  CHECK(q != p);
  CHECK(FakeBackend::allocs == 2);
  FakeBackend::complete(stream_b);
  void* r = c.allocate(1000, 0, stream_a);
  CHECK(r == p);
  CHECK(FakeBackend::events[0].destroyed);
  CHECK(c.stats().pending == 0);
  CHECK(c.stats().cache_hits == 1);
  c.free(r);  // the recorded use ended with the first free: no event this time
  CHECK(FakeBackend::events.size() == 1);
  CHECK(c.allocate(1000, 0, stream_b) != p);  // still a's block
  CHECK(c.allocate(1000, 0, stream_a) == p);
  CHECK_THROWS_AS(c.record_stream(reinterpret_cast<void*>(0x1), stream_b), error);
}

TEST_CASE("device cache: several recorded streams; the allocation stream or a repeat records nothing") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* p = c.allocate(4 << 20, 0, stream_a);
  c.record_stream(p, stream_a);
  c.record_stream(p, stream_b);
  c.record_stream(p, stream_b);
  c.record_stream(p, stream_c);
  c.free(p);
  REQUIRE(FakeBackend::events.size() == 2);
  CHECK(FakeBackend::events[0].stream == stream_b);
  CHECK(FakeBackend::events[1].stream == stream_c);
  FakeBackend::complete(stream_b);
  CHECK(c.allocate(4 << 20, 0, stream_a) != p);  // c's event is still pending
  CHECK(FakeBackend::events[0].destroyed);
  CHECK_FALSE(FakeBackend::events[1].destroyed);
  CHECK(c.stats().pending == (4 << 20));
  FakeBackend::complete(stream_c);
  CHECK(c.allocate(4 << 20, 0, stream_a) == p);
  CHECK(FakeBackend::events[1].destroyed);
  CHECK(c.stats().pending == 0);

  void* own = c.allocate(1000, 0, stream_a);
  c.record_stream(own, stream_a);
  c.free(own);
  CHECK(FakeBackend::events.size() == 2);  // straight back to a's list
  CHECK(c.allocate(1000, 0, stream_a) == own);
}

TEST_CASE("device cache: empty_cache and the out-of-memory retry wait for pending events") {
  FakeBackend::reset(int64_t(4) << 20);
  BlockCache<FakeBackend> c;
  void* p = c.allocate(4 << 20, 0, stream_a);
  c.record_stream(p, stream_b);
  c.free(p);
  // The device is full: p's event is waited for, its segment released, and b's request retried.
  void* q = c.allocate(2 << 20, 0, stream_b);
  CHECK(FakeBackend::syncs == 1);
  CHECK(FakeBackend::events[0].destroyed);
  CHECK(FakeBackend::releases == 1);
  CHECK(FakeBackend::live.count(p) == 0);
  CHECK(c.stats().reserved == (2 << 20));
  CHECK(c.stats().pending == 0);
  c.record_stream(q, stream_c);
  c.free(q);
  CHECK(c.stats().pending == (2 << 20));
  c.empty_cache();
  CHECK(FakeBackend::syncs == 2);
  CHECK(FakeBackend::releases == 2);
  CHECK(FakeBackend::used == 0);
  CHECK(c.stats().reserved == 0);
  CHECK(c.stats().pending == 0);
  CHECK(c.cached_bytes() == 0);
}

TEST_CASE("device cache: large blocks split, merge back when freed, and only whole segments are released") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  char* base = static_cast<char*>(c.allocate(10 << 20, 0, stream_a));
  c.free(base);
  void* x = c.allocate(2 << 20, 0, stream_a);  // the front of the 10 MiB block; 8 MiB stay cached
  void* y = c.allocate(3 << 20, 0, stream_a);  // 4 MiB, the front of those 8
  void* z = c.allocate(4 << 20, 0, stream_a);  // the last 4 MiB: an exact fit, nothing to split
  CHECK(x == base);
  CHECK(y == base + (2 << 20));
  CHECK(z == base + (6 << 20));
  CHECK(c.block_size(y) == (4 << 20));
  CHECK(FakeBackend::allocs == 1);
  CHECK(c.stats().cache_hits == 3);
  CHECK(c.stats().allocated == (10 << 20));
  CHECK(c.stats().reserved == (10 << 20));
  CHECK(c.cached_bytes() == 0);
  c.free(y);
  c.free(x);  // merges with y's block: one 6 MiB block at the base
  CHECK(c.cached_bytes() == (6 << 20));
  void* w = c.allocate(6 << 20, 0, stream_a);
  CHECK(w == base);
  CHECK(c.block_size(w) == (6 << 20));
  c.free(z);
  c.free(w);  // the whole segment is one block again
  void* all = c.allocate(10 << 20, 0, stream_a);
  CHECK(all == base);
  CHECK(FakeBackend::allocs == 1);
  c.free(all);

  void* s2 = c.allocate(12 << 20, 0, stream_a);  // a second segment: the cached 10 MiB is too small
  c.free(s2);
  void* part = c.allocate(8 << 20, 0, stream_a);  // best fit: the 10 MiB segment, split
  CHECK(part == base);
  CHECK(c.cached_bytes() == (14 << 20));  // its 2 MiB rest and the 12 MiB segment
  c.empty_cache();                        // releases the 12 MiB segment only
  CHECK(FakeBackend::releases == 1);
  CHECK(FakeBackend::live.count(s2) == 0);
  CHECK(FakeBackend::live.count(base) == 1);
  CHECK(c.stats().reserved == (10 << 20));
  CHECK(c.cached_bytes() == (2 << 20));
  c.free(part);
  CHECK(c.cached_bytes() == (10 << 20));
  c.empty_cache();
  CHECK(FakeBackend::releases == 2);
  CHECK(FakeBackend::used == 0);
  CHECK(c.stats().reserved == 0);
  CHECK(c.stats().backend_frees == 2);
}

TEST_CASE("device cache: a destroyed stream's blocks go to a list every stream takes from") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* p = c.allocate(1000, 0, stream_b);
  char* big = static_cast<char*>(c.allocate(8 << 20, 0, stream_b));
  void* live = c.allocate(2000, 0, stream_b);
  void* parked = c.allocate(4 << 20, 0, stream_b);
  c.record_stream(parked, stream_a);
  c.free(p);
  c.free(big);
  c.free(parked);  // waits for a's event
  void* other = c.allocate(1000, 0, stream_a);
  CHECK(other != p);  // b's block is b's
  c.stream_destroyed(stream_b);
  void* p2 = c.allocate(1000, 0, stream_a);
  CHECK(p2 == p);
  char* part = static_cast<char*>(c.allocate(2 << 20, 0, stream_a));  // the shared 8 MiB block, split
  CHECK(part == big);
  c.free(part);  // back to a's list: it does not merge with the shared 6 MiB rest
  void* fresh = c.allocate(8 << 20, 0, stream_a);
  CHECK(fresh != big);
  void* rest = c.allocate(6 << 20, 0, stream_c);
  CHECK(rest == big + (2 << 20));
  c.free(live);  // allocated on b before it was destroyed: shared
  void* live2 = c.allocate(2000, 0, stream_d);
  CHECK(live2 == live);
  FakeBackend::complete(stream_a);
  void* parked2 = c.allocate(4 << 20, 0, stream_d);
  CHECK(parked2 == parked);
  for (void* q : {other, p2, fresh, rest, live2, parked2}) c.free(q);
  c.empty_cache();  // (big's segment is free in two lists, a's and c's: released all the same)
  CHECK(FakeBackend::used == 0);
  CHECK(FakeBackend::releases == FakeBackend::allocs);
  CHECK(c.stats().reserved == 0);
}

namespace {
// Thread-safe, and slow to allocate and release, like cudaMalloc and cudaFree.
struct SlowBackend {
  static inline std::mutex mu;
  static inline uintptr_t next = 0x10000;
  static inline std::map<void*, size_t> live;
  static inline int64_t used = 0, allocs = 0, releases = 0, bad_releases = 0;
  static void* allocate(size_t n, int) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::lock_guard<std::mutex> lock(mu);
    void* p = reinterpret_cast<void*>(next);
    next += n + 4096;
    live[p] = n;
    used += static_cast<int64_t>(n);
    ++allocs;
    return p;
  }
  static void release(void* p, int) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(p);
    if (it == live.end()) {
      ++bad_releases;
      return;
    }
    used -= static_cast<int64_t>(it->second);
    live.erase(it);
    ++releases;
  }
  static int record_event(int, StreamId) { return 0; }
  static bool event_done(int) { return true; }
  static void event_synchronize(int) {}
  static void destroy_event(int) {}
};
}  // namespace

TEST_CASE("device cache: two threads on their own streams, backend calls made outside the lock") {
  BlockCache<SlowBackend> c;
  std::mutex mu;
  std::map<uintptr_t, uintptr_t> in_use;  // [start, end) of every block handed out
  int64_t overlaps = 0;
  std::atomic<int64_t> requests{0};
  auto claim = [&](void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = a + n;
    auto it = in_use.lower_bound(a);
    if (it != in_use.end() && it->first < b) ++overlaps;
    if (it != in_use.begin() && std::prev(it)->second > a) ++overlaps;
    in_use.emplace(a, b);
  };
  auto unclaim = [&](void* p) {
    std::lock_guard<std::mutex> lock(mu);
    in_use.erase(reinterpret_cast<uintptr_t>(p));
  };
  auto work = [&](StreamId s, StreamId other, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<void*> held;
    for (int i = 0; i < 300; ++i) {
      if (held.size() < 6 && rng() % 3 != 0) {
        const size_t n = rng() % 2 ? 1 + rng() % (900 << 10) : (1 << 20) + rng() % (9 << 20);
        void* p = c.allocate(n, 0, s);
        ++requests;
        claim(p, n);
        if (rng() % 4 == 0) c.record_stream(p, other);
        held.push_back(p);
      } else if (!held.empty()) {
        const size_t k = rng() % held.size();
        unclaim(held[k]);
        c.free(held[k]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      }
      if (i % 100 == 99) c.empty_cache();
    }
    for (void* p : held) {
      unclaim(p);
      c.free(p);
    }
  };
  std::thread t1(work, stream_a, stream_b, 1u), t2(work, stream_b, stream_a, 2u);
  t1.join();
  t2.join();
  const DeviceMemoryStats st = c.stats();
  CHECK(overlaps == 0);
  CHECK(st.allocated == 0);
  CHECK(st.cache_hits > 0);
  CHECK(st.cache_hits + st.backend_allocs == requests.load());  // each request: one or the other
  CHECK(st.backend_allocs == SlowBackend::allocs);
  CHECK(st.backend_frees == SlowBackend::releases);
  CHECK(st.reserved == SlowBackend::used);
  CHECK(st.reserved == c.cached_bytes() + st.pending);
  c.empty_cache();
  CHECK(SlowBackend::bad_releases == 0);
  CHECK(SlowBackend::used == 0);
  CHECK(SlowBackend::releases == SlowBackend::allocs);
  CHECK(c.stats().reserved == 0);
}

TEST_CASE("launch geometry: 64-bit element counts, capped grids, every element visited once") {
  CHECK(launch_1d(0).blocks == 0);
  CHECK(launch_1d(1).blocks == 1);
  CHECK(launch_1d(1024).blocks == 1);  // 256 threads x 4 per thread
  CHECK(launch_1d(1025).blocks == 2);
  const int64_t big = (int64_t(1) << 32) + (int64_t(1) << 20);
  Launch1D l = launch_1d(big);
  CHECK(l.blocks == kMaxBlocks);  // capped: threads loop
  CHECK(l.blocks * l.threads < (int64_t(1) << 31));
  // A grid-stride loop over `big` with a smaller cap (so the test can visit every thread):
  // the per-thread counts add up to exactly big and differ by at most one between threads
  // (no element skipped or repeated).
  Launch1D m = launch_1d(big, 256, 4, 4096);
  int64_t total = 0, lo = INT64_MAX, hi = 0;
  for (int64_t b = 0; b < m.blocks; ++b)
    for (int64_t t = 0; t < m.threads; ++t) {
      int64_t c = grid_stride_count(m, b, t, big);
      total += c;
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
  CHECK(total == big);
  CHECK(hi - lo <= 1);
  Launch1D s = launch_1d(5000, 128, 1, 7);
  int64_t tot = 0;
  for (int64_t b = 0; b < s.blocks; ++b)
    for (int64_t t = 0; t < s.threads; ++t) tot += grid_stride_count(s, b, t, 5000);
  CHECK(s.blocks == 7);
  CHECK(tot == 5000);
  CHECK_THROWS_AS(launch_1d(-1), value_error);
}

namespace {
// Offsets of every element of `out`'s iteration space for each operand, straight from the
// broadcast shapes and strides (row-major index -> multi-index -> dot with strides).
std::vector<std::vector<int64_t>> naive_offsets(const std::vector<std::pair<Shape, Shape>>& ops) {
  const Shape& out = ops[0].first;
  int64_t n = numel_of(out), nd = out.size();
  std::vector<std::vector<int64_t>> r(n, std::vector<int64_t>(ops.size()));
  for (int64_t i = 0; i < n; ++i) {
    int64_t q = i;
    std::vector<int64_t> idx(nd);
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = q % out[d];
      q /= out[d];
    }
    for (size_t k = 0; k < ops.size(); ++k) {
      const auto& [sz, st] = ops[k];
      int64_t o = 0, off = nd - static_cast<int64_t>(sz.size());
      for (int64_t d = off; d < nd; ++d)
        if (sz[d - off] != 1) o += idx[d] * st[d - off];
      r[i][k] = o;
    }
  }
  return r;
}
template <int N>
void check_calc(const std::vector<std::pair<Shape, Shape>>& ops, int64_t expect_nd) {
  Operands o;
  float dummy = 0;
  for (const auto& [sz, st] : ops) o.add(&dummy, sz, st);
  IterPlan p;
  plan_iteration(o, p);
  CHECK(p.nd == expect_nd);
  auto calc = make_offset_calc<N>(p);
  CHECK(calc.fast);  // (small: the 32-bit dividers)
  auto slow = calc;
  slow.fast = false;  // the 64-bit path, which tensors of 2^31 elements or more take
  auto want = naive_offsets(ops);
  REQUIRE(p.numel == static_cast<int64_t>(want.size()));
  int64_t bad = 0;
  for (int64_t i = 0; i < p.numel; ++i) {
    int64_t off[N], off64[N];
    if (calc.linear())
      for (int k = 0; k < N; ++k) off[k] = i * calc.strides[0][k];
    else
      calc.get(i, off);
    slow.get(i, off64);
    for (int k = 0; k < N; ++k) bad += (off[k] != want[i][k]) + (off64[k] != want[i][k]);
  }
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("offset calculator: contiguous, broadcast, transposed and sliced operands") {
  // out [4, 5, 6] contiguous, a contiguous: one linear dim
  check_calc<2>({{{4, 5, 6}, {30, 6, 1}}, {{4, 5, 6}, {30, 6, 1}}}, 1);
  // b broadcast along dim 0 and a row vector c
  check_calc<3>({{{4, 5, 6}, {30, 6, 1}}, {{5, 6}, {6, 1}}, {{6}, {1}}}, 3);  // nothing merges
  // a transposed view [6, 4] of a [4, 6] tensor, out contiguous
  check_calc<2>({{{6, 4}, {4, 1}}, {{6, 4}, {1, 6}}}, 2);
  // every other row, and a size-1 dim in the middle
  check_calc<2>({{{3, 1, 7}, {7, 7, 1}}, {{3, 1, 7}, {28, 7, 1}}}, 2);
  // a column vector against a row vector
  check_calc<3>({{{5, 3}, {3, 1}}, {{5, 1}, {1, 1}}, {{3}, {1}}}, 2);
  // 0-d
  check_calc<2>({{{}, {}}, {{}, {}}}, 1);
}

TEST_CASE("fast divider: n / d as a multiply-high for every divisor class and the edge dividends") {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 2000; ++d) divisors.push_back(d);
  for (int e = 1; e <= 31; ++e) {
    const uint32_t p = uint32_t(1) << e;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  std::mt19937 rng(13);
  for (int k = 0; k < 3000; ++k) divisors.push_back(1 + rng() % (uint32_t(1) << 31));
  const uint32_t top = (uint32_t(1) << 31) - 1;  // the largest dividend the kernels pass
  int64_t bad = 0, checked = 0;
  for (uint32_t d : divisors) {
    if (d > (uint32_t(1) << 31)) continue;
    FastDivider f(d);
    std::vector<uint32_t> ns = {0, 1, 2, d - 1, d, top, top - 1, top / d * d, top / d * d - 1};
    if (d < top) ns.push_back(d + 1);
    for (int k = 0; k < 40; ++k) ns.push_back(rng() % (top + uint64_t(1)));
    for (uint32_t n : ns) {
      if (n > top) continue;
      bad += f.div(n) != n / d;
      ++checked;
    }
  }
  CHECK(bad == 0);
  CHECK(checked > 100000);
  CHECK_THROWS_AS(FastDivider(0), value_error);
}

TEST_CASE("offset calculator: 2^31 elements or more take the 64-bit path") {
  Operands o;
  float dummy = 0;
  const int64_t rows = int64_t(1) << 16, cols = (int64_t(1) << 15) + 3;  // 2^31 + 3 * 2^16 elements
  const Shape size{rows, cols}, row_major{cols, 1}, col_major{1, rows};  // (Operands keeps pointers to them)
  o.add(&dummy, size, row_major);
  o.add(&dummy, size, col_major);  // transposed: two dims stay
  IterPlan p;
  plan_iteration(o, p);
  REQUIRE(p.nd == 2);
  auto calc = make_offset_calc<2>(p);
  CHECK_FALSE(calc.fast);
  for (int64_t i : {int64_t(0), cols - 1, cols, (int64_t(1) << 31) + 5, rows * cols - 1}) {
    int64_t off[2];
    calc.get(i, off);
    CHECK(off[0] == i);
    CHECK(off[1] == (i % cols) * rows + i / cols);
  }
  Operands small;
  const Shape small_size{rows, 3}, small_rows{3, 1}, small_cols{1, rows};
  small.add(&dummy, small_size, small_rows);
  small.add(&dummy, small_size, small_cols);
  IterPlan q;
  plan_iteration(small, q);
  CHECK(make_offset_calc<2>(q).fast);
  // empty, with a dim too large for a 32-bit divider: nothing is launched, nothing raised
  Operands empty_ops;
  const Shape empty_size{0, int64_t(3) << 30}, empty_strides{int64_t(3) << 30, 1}, bcast{0, 1};
  empty_ops.add(&dummy, empty_size, empty_strides);
  empty_ops.add(&dummy, empty_size, bcast);
  IterPlan e;
  plan_iteration(empty_ops, e);
  CHECK(e.numel == 0);
  CHECK_FALSE(make_offset_calc<2>(e).fast);
}

TEST_CASE("offset calculator: too many dims after merging is a clear error") {
  Shape sz(13, 2), st(13), st2(13);
  for (int d = 12, s = 1; d >= 0; --d, s *= 2) st[d] = s;
  for (int d = 0; d < 13; ++d) st2[d] = st[12 - d];  // reversed: nothing merges
  Operands o;
  float dummy = 0;
  o.add(&dummy, sz, st);
  o.add(&dummy, sz, st2);
  IterPlan p;
  plan_iteration(o, p);
  CHECK(p.nd == 13);
  CHECK_THROWS_AS(make_offset_calc<2>(p), not_implemented_error);
}


// The device interpreter of autograd graphs (autograd/ir_program.hpp), run here with the ops'
// host functions. (Every CPU autograd suite also runs through it: the *_program_eval tests.)
TEST_CASE("device program: a long chain reuses two slots and matches the chunked evaluator") {
  using namespace reel::detail::ir;
  Graph g;
  Builder b{g};
  int x = b.leaf(&type_info<double>());
  int w = b.leaf(&type_info<double>());
  int v = x;
  for (int i = 0; i < 100; ++i) v = to_ir_as<double, CPU>(b, sin(Sym<double>(v)) * 0.5 + Sym<double>(w));
  std::vector<int> roots = {v, to_ir_as<double, CPU>(b, Sym<double>(x) * Sym<double>(w))};
  std::vector<char> live;
  mark_live(g, roots, live);

  auto xt = randn<double>({7, 5}), wt = randn<double>({5});  // w broadcasts
  auto xs = xt.transpose(0, 1);                              // and x is strided
  const TensorImpl* leaves[] = {&xs.impl(), &wt.impl()};
  auto ref0 = empty<double>({5, 7}), ref1 = empty<double>({5, 7});
  auto got0 = full<double>({5, 7}, NAN), got1 = full<double>({5, 7}, NAN);
  TensorImpl* refs[] = {&ref0.impl(), &ref1.impl()};
  TensorImpl* gots[] = {&got0.impl(), &got1.impl()};
  evaluate_cpu(g, leaves, roots, refs, live);

  std::vector<ProgNode> prog;
  ProgLaunch a;
  REQUIRE(prepare_program(g, leaves, roots, gots, live, [](const OpInfo* op) { return op->elem; }, prog, a));
  std::set<int> slots;
  for (const auto& p : prog) slots.insert(p.slot);
  CHECK(slots.size() <= 6);  // x, w, the chain's value and a temporary or two: not one per node
  CHECK(a.nops == 4);        // two outputs, two leaves
  for (int64_t i = 0; i < a.numel; ++i) run_program_at(prog.data(), a, i);
  CHECK(got0.to_vector() == ref0.to_vector());  // the same op bodies in the same order
  CHECK(got1.to_vector() == ref1.to_vector());
}

TEST_CASE("device program: more values live at once than slots is a clear error") {
  using namespace reel::detail::ir;
  Graph g;
  Builder b{g};
  int x = b.leaf(&type_info<double>());
  std::vector<int> parts;
  for (int i = 0; i < kProgSlots + 4; ++i) parts.push_back(to_ir_as<double, CPU>(b, Sym<double>(x) + double(i)));
  int s = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) s = to_ir_as<double, CPU>(b, Sym<double>(s) * Sym<double>(parts[i]));
  std::vector<int> roots = {s}, order, leaf_op = {1};
  std::vector<char> live;
  mark_live(g, roots, live);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (live[i]) order.push_back(i);
  std::vector<ProgNode> prog;
  ProgLaunch a;
  CHECK_THROWS_WITH_AS(build_program(g, order, leaf_op, roots, [](const OpInfo* op) { return op->elem; }, prog, a),
                       doctest::Contains("more than 32 values at once"), not_implemented_error);
}
