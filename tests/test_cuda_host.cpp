// The host-side parts of the CUDA backend, tested on the CPU: the caching allocator's
// bookkeeping (with a fake backend), launch geometry, the offset calculator the elementwise
// kernels use (against offsets computed straight from sizes and strides).
#include <doctest/doctest.h>

#include <reel.hpp>
#include <set>

#include "detail/device_cache.hpp"
#include "detail/launch_plan.hpp"

using namespace reel;
using namespace reel::detail;

namespace {
// A fake device: hands out distinct addresses, counts calls, and runs out of memory past
// `capacity` bytes.
struct FakeBackend {
  static inline int64_t capacity = int64_t(1) << 40, used = 0, allocs = 0, releases = 0;
  static inline uintptr_t next = 0x10000;
  static inline std::map<void*, size_t> live;
  static void reset(int64_t cap) {
    capacity = cap;
    used = allocs = releases = 0;
    live.clear();
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
};
const void* stream_a = reinterpret_cast<const void*>(0xA);
const void* stream_b = reinterpret_cast<const void*>(0xB);
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

TEST_CASE("device cache: best fit within twice the request; no huge block for a small request") {
  FakeBackend::reset(int64_t(1) << 40);
  BlockCache<FakeBackend> c;
  void* big = c.allocate(8 << 20, 0, stream_a);
  void* mid = c.allocate(3 << 20, 0, stream_a);
  c.free(big);
  c.free(mid);
  CHECK(c.allocate(3 << 20, 0, stream_a) == mid);   // 4 MiB block (rounded), exact bucket
  void* small = c.allocate(1 << 20, 0, stream_a);  // 2 MiB: the 8 MiB block is > 2x, so fresh
  CHECK(small != big);
  void* four = c.allocate(4 << 20, 0, stream_a);  // the 8 MiB block fits (<= 2 x 4 MiB)
  CHECK(four == big);
  CHECK(FakeBackend::allocs == 3);
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
  auto want = naive_offsets(ops);
  REQUIRE(p.numel == static_cast<int64_t>(want.size()));
  int64_t bad = 0;
  for (int64_t i = 0; i < p.numel; ++i) {
    int64_t off[N];
    if (calc.linear())
      for (int k = 0; k < N; ++k) off[k] = i * calc.strides[0][k];
    else
      calc.get(i, off);
    for (int k = 0; k < N; ++k) bad += off[k] != want[i][k];
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
