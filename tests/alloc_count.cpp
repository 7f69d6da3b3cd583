// The global operator new of a test program, counting while reel_test::alloc_counting is set.
// Every suite bundled with test_foreach runs with it; the array forms call these.
#include "alloc_count.hpp"

#include <cstdlib>
#include <new>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace reel_test {
thread_local bool alloc_counting = false;
thread_local int64_t alloc_count = 0;
}  // namespace reel_test

void* operator new(size_t n) {
  if (reel_test::alloc_counting) ++reel_test::alloc_count;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer): the plain delete frees what it returns.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (reel_test::alloc_counting) ++reel_test::alloc_count;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
