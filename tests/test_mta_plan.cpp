// Chunk planning of the multi-tensor apply (reel/cuda/mta_plan.hpp): every element of every
// tensor covered exactly once, launch limits respected, edge cases. Standalone (own main).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <map>
#include <random>

#include <reel/cuda/mta_plan.hpp>

namespace mta = reel::detail::mta;

namespace {
struct Stats {
  size_t launches = 0, max_slots = 0, max_blocks = 0;
  std::map<size_t, size_t> launches_of;  // tensor -> launches it has a slot in
};

// Checks a plan against the element counts and limits: every tensor's chunks, gathered over
// all launches, are exactly 0..chunks-1 in order (so the element ranges tile [0, n) with no
// gap or overlap); empty tensors have no slot; no launch, slot or block is wasted.
Stats check_plan(const std::vector<int64_t>& numel, int64_t chunk, int max_t, int max_b) {
  auto plan = mta::plan(numel, chunk, max_t, max_b);
  Stats st;
  st.launches = plan.size();
  std::vector<int64_t> next_chunk(numel.size(), 0);
  size_t last_tensor = 0;
  bool any = false;
  for (const auto& l : plan) {
    REQUIRE(l.blocks() > 0);
    REQUIRE(l.block_chunk.size() == l.block_slot.size());
    REQUIRE(l.blocks() <= max_b);
    REQUIRE(!l.slot_tensor.empty());
    REQUIRE(l.slot_tensor.size() <= static_cast<size_t>(max_t));
    st.max_slots = std::max(st.max_slots, l.slot_tensor.size());
    st.max_blocks = std::max(st.max_blocks, static_cast<size_t>(l.blocks()));
    std::vector<int> blocks_of_slot(l.slot_tensor.size(), 0);
    for (size_t s = 0; s < l.slot_tensor.size(); ++s) {
      size_t t = l.slot_tensor[s];
      REQUIRE(t < numel.size());
      REQUIRE(numel[t] > 0);
      // tensors in list order; a tensor continues into the next launch only from its last slot
      if (any) REQUIRE(t >= last_tensor);
      if (s > 0) REQUIRE(t > l.slot_tensor[s - 1]);
      last_tensor = t;
      any = true;
      ++st.launches_of[t];
    }
    for (int b = 0; b < l.blocks(); ++b) {
      size_t s = l.block_slot[b];
      REQUIRE(s < l.slot_tensor.size());
      ++blocks_of_slot[s];
      size_t t = l.slot_tensor[s];
      // chunks of a tensor come in order, each once
      REQUIRE(l.block_chunk[b] == next_chunk[t]);
      int64_t begin = int64_t(l.block_chunk[b]) * chunk;
      REQUIRE(begin < numel[t]);
      ++next_chunk[t];
    }
    for (int c : blocks_of_slot) REQUIRE(c > 0);
  }
  for (size_t t = 0; t < numel.size(); ++t) {
    int64_t chunks = numel[t] == 0 ? 0 : (numel[t] + chunk - 1) / chunk;
    CHECK(next_chunk[t] == chunks);  // the last chunk ends at numel (begin < numel checked above)
    if (numel[t] == 0) CHECK(st.launches_of.count(t) == 0);
  }
  return st;
}

// Element-level coverage for small lists: counts how often each element is visited.
void check_elements(const std::vector<int64_t>& numel, int64_t chunk, int max_t, int max_b) {
  std::vector<std::vector<int>> hits(numel.size());
  for (size_t t = 0; t < numel.size(); ++t) hits[t].assign(numel[t], 0);
  for (const auto& l : mta::plan(numel, chunk, max_t, max_b))
    for (int b = 0; b < l.blocks(); ++b) {
      size_t t = l.slot_tensor[l.block_slot[b]];
      int64_t begin = int64_t(l.block_chunk[b]) * chunk, end = std::min(begin + chunk, numel[t]);
      for (int64_t i = begin; i < end; ++i) ++hits[t][i];
    }
  for (size_t t = 0; t < numel.size(); ++t)
    for (int64_t i = 0; i < numel[t]; ++i) REQUIRE(hits[t][i] == 1);
}
}  // namespace

TEST_CASE("mta plan: argument struct fits the kernel parameter limit") {
  static_assert(sizeof(mta::ListMeta<1>) + mta::kOpBudget <= 4096);
  static_assert(sizeof(mta::ListMeta<5, 2>) + mta::kOpBudget <= 4096);
  CHECK(mta::ListMeta<1>::kMaxTensors == mta::max_tensors(1, 0));
  CHECK(mta::ListMeta<1>::kMaxTensors <= 255);
  CHECK(mta::ListMeta<4, 2>::kMaxTensors >= 30);  // Adam: enough slots to make fusion pay
  CHECK(mta::ListMeta<4, 2>::kMaxTensors > mta::ListMeta<5, 2>::kMaxTensors);
  // (using every slot would still fit: the budget is computed, not guessed)
  CHECK(sizeof(void*) * 5 * mta::ListMeta<5, 2>::kMaxTensors + 8 * 3 * mta::ListMeta<5, 2>::kMaxTensors +
            5 * mta::kMaxBlocks <= 4096 - mta::kOpBudget);
}

TEST_CASE("mta plan: no tensors, all empty") {
  CHECK(mta::plan(std::vector<int64_t>{}, 65536, 110, 320).empty());
  CHECK(mta::plan(std::vector<int64_t>{0, 0, 0}, 65536, 110, 320).empty());
}

TEST_CASE("mta plan: small lists, element by element") {
  check_elements({1}, 4, 3, 5);
  check_elements({0, 5, 0, 4, 9, 1, 0}, 4, 3, 5);
  check_elements({17, 3, 8, 8, 0, 1, 30}, 4, 2, 3);
  check_elements({100}, 7, 1, 1);  // one block per launch
  check_elements({3, 3, 3, 3}, 1, 1, 2);
}

TEST_CASE("mta plan: a tensor whose chunks span launches appears in each") {
  // 10 chunks, 4 blocks per launch: 4 + 4 + 2
  auto p = mta::plan(std::vector<int64_t>{40}, 4, 8, 4);
  REQUIRE(p.size() == 3);
  CHECK(p[0].blocks() == 4);
  CHECK(p[1].blocks() == 4);
  CHECK(p[2].blocks() == 2);
  for (const auto& l : p) CHECK(l.slot_tensor == std::vector<size_t>{0});
  CHECK(p[1].block_chunk.front() == 4);
  CHECK(p[2].block_chunk.back() == 9);
  // the second tensor starts in the launch the first one ends in
  auto q = mta::plan(std::vector<int64_t>{10, 2}, 4, 8, 2);  // chunks 3 + 1: [0 1] [2 | 0]
  REQUIRE(q.size() == 2);
  CHECK(q[1].slot_tensor == std::vector<size_t>{0, 1});
  CHECK(q[1].block_slot == std::vector<uint8_t>{0, 1});
  check_plan({10, 2}, 4, 8, 2);
}

TEST_CASE("mta plan: more tensors than slots") {
  std::vector<int64_t> n(1000, 1024);
  auto st = check_plan(n, 65536, 36, 320);
  CHECK(st.launches == (1000 + 35) / 36);
  CHECK(st.max_slots == 36);
  // a slot at the limit that 255 slot indices can still name
  std::vector<int64_t> m(600, 1);
  auto st2 = check_plan(m, 65536, 256, 320);
  CHECK(st2.max_slots == 256);
  CHECK(st2.launches == 3);
}

TEST_CASE("mta plan: one huge tensor (more than 2^32 elements)") {
  const int64_t n = (int64_t(5) << 30) + 12345;  // > 2^32, not a multiple of the chunk
  auto st = check_plan({n}, 65536, 110, 320);
  const int64_t chunks = (n + 65535) / 65536;
  CHECK(st.launches == static_cast<size_t>((chunks + 319) / 320));
  CHECK(st.launches_of[0] == st.launches);
  CHECK(st.max_blocks == 320);
  // the last block of the last launch ends exactly at n
  auto p = mta::plan(std::vector<int64_t>{n}, 65536, 110, 320);
  CHECK(int64_t(p.back().block_chunk.back()) * 65536 + 65536 >= n);
  CHECK(int64_t(p.back().block_chunk.back()) * 65536 < n);
  // mixed with small and empty tensors around it
  check_plan({0, 7, int64_t(3) << 31, 0, 65536, 65537, 1}, 65536, 4, 320);
}

TEST_CASE("mta plan: invalid input") {
  CHECK_THROWS_AS(mta::plan(std::vector<int64_t>{-1}, 4, 8, 8), reel::value_error);
  CHECK_THROWS_AS(mta::plan(std::vector<int64_t>{4}, 0, 8, 8), reel::value_error);
  CHECK_THROWS_AS(mta::plan(std::vector<int64_t>{4}, 4, 0, 8), reel::value_error);
  CHECK_THROWS_AS(mta::plan(std::vector<int64_t>{4}, 4, 300, 8), reel::value_error);
  // more chunks than an int32 chunk index can name
  CHECK_THROWS_AS(mta::plan(std::vector<int64_t>{int64_t(1) << 40}, 16, 8, 8), reel::value_error);
}

TEST_CASE("mta plan: random lists and limits") {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    int count = static_cast<int>(rng() % 40);
    std::vector<int64_t> n(count);
    for (auto& x : n) x = (rng() % 4 == 0) ? 0 : static_cast<int64_t>(rng() % 200);
    int64_t chunk = 1 + static_cast<int64_t>(rng() % 16);
    int max_t = 1 + static_cast<int>(rng() % 10), max_b = 1 + static_cast<int>(rng() % 12);
    CAPTURE(trial);
    check_plan(n, chunk, max_t, max_b);
    check_elements(n, chunk, max_t, max_b);
  }
}
