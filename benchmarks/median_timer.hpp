#pragma once
// Median wall time of f over `reps` repetitions of `inner` calls each (seconds per call).
#include <algorithm>
#include <chrono>
#include <vector>

namespace reel_bench {
template <class F>
double median_seconds(F&& f, int reps, int inner = 1) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto s = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) f();
    auto e = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(e - s).count() / inner);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace reel_bench
