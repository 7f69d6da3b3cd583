#pragma once
// Median wall time of f over `reps` repetitions of `inner` calls each (seconds per call), and
// the same for a baseline and a candidate timed in alternating batches.
#include <algorithm>
#include <chrono>
#include <vector>

namespace reel_bench {
// Seconds per call of one batch of `inner` calls.
template <class F>
double batch_seconds(F& f, int inner) {
  auto s = std::chrono::steady_clock::now();
  for (int i = 0; i < inner; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / inner;
}
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double median_seconds(F&& f, int reps, int inner = 1) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(batch_seconds(f, inner));
  return median(std::move(t));
}

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
  for (int k = 0; k < reps; ++k) {
    double a = batch_seconds(base, inner), b = batch_seconds(cand, inner);
    ta.push_back(a);
    tb.push_back(b);
    r.push_back(a / b);
  }
  return {median(std::move(ta)), median(std::move(tb)), median(std::move(r))};
}
}  // namespace reel_bench
