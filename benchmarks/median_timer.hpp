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

namespace reel_bench {
// Baseline and candidate timed in alternating batches (`reps` of each, `inner` calls per
// batch), so both see the same phase of a machine whose speed drifts (shared VMs drift by
// up to 2x within a minute). base / cand: medians (seconds per call); ratio: the median of
// the per-pair ratios base / cand, each pair measured back to back.
struct Paired {
  double base, cand, ratio;
};
template <class FA, class FB>
Paired paired_seconds(FA&& base, FB&& cand, int reps, int inner = 1) {
  std::vector<double> ta, tb, r;
  auto batch = [inner](auto& f) {
    auto s = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / inner;
  };
  for (int k = 0; k < reps; ++k) {
    double a = batch(base), b = batch(cand);
    ta.push_back(a);
    tb.push_back(b);
    r.push_back(a / b);
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {med(ta), med(tb), med(r)};
}
}  // namespace reel_bench
