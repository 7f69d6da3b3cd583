// Counts the heap allocations this thread makes while alloc_counting is set (alloc_count.cpp
// replaces the global operator new of the test program that links it: test_foreach's).
#pragma once
#include <cstdint>

namespace reel_test {
extern thread_local bool alloc_counting;
extern thread_local int64_t alloc_count;
}  // namespace reel_test
