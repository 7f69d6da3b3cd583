#pragma once
// The bodies of capture's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "capture.hpp"

namespace reel::inline REEL_ABI::detail {
REEL_INLINE void CaptureTrace::keep(const std::vector<const Storage*>& writes, std::vector<const Storage*> reads,
                                    CaptureStep kept) {
  ++depth_;
  try {
    kept();
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  last_writes_.assign(writes.begin(), writes.end());
  written_.insert(written_.end(), writes.begin(), writes.end());
  steps_.push_back(std::move(kept));
  reads_.push_back(reads);
  writes_.push_back(writes);
  descs_.emplace_back();
  reads.insert(reads.end(), writes.begin(), writes.end());
  uses_.push_back(std::move(reads));
}
REEL_INLINE void CaptureTrace::keep_kernel(const Storage* write, const Storage* const* reads, size_t n,
                                           CaptureStep kept) {
  keep({write}, std::vector<const Storage*>(reads, reads + n), std::move(kept));
}
REEL_INLINE std::vector<const Storage*> CaptureTrace::fold_constants() {
  const size_t n = steps_.size();
  std::vector<const Storage*> fresh;
  for (auto& [w, p] : fresh_)
    if (!w.expired()) fresh.push_back(p);
  // each storage's writers and readers, by step index
  std::vector<std::pair<const Storage*, size_t>> wr, rd;
  for (size_t i = 0; i < n; ++i) {
    for (const Storage* p : writes_[i]) wr.emplace_back(p, i);
    for (const Storage* p : reads_[i]) rd.emplace_back(p, i);
  }
  std::sort(fresh.begin(), fresh.end());
  std::sort(wr.begin(), wr.end());
  std::sort(rd.begin(), rd.end());
  auto range = [](const auto& v, const Storage* p) {
    return std::equal_range(v.begin(), v.end(), std::pair<const Storage*, size_t>(p, 0),
                            [](const auto& a, const auto& b) { return a.first < b.first; });
  };
  std::vector<char> c(n, 1);  // the largest set of constant kernels: start from all, drop
  auto constant = [&](const Storage* p) {
    if (!std::binary_search(fresh.begin(), fresh.end(), p)) return false;  // an argument, a weight
    auto [wb, we] = range(wr, p);
    if (wb == we) return false;
    size_t last = 0;
    for (auto it = wb; it != we; ++it) {
      if (!c[it->second]) return false;
      last = std::max(last, it->second);
    }
    auto [rb, re] = range(rd, p);
    for (auto it = rb; it != re; ++it)
      if (!c[it->second] && it->second < last) return false;  // a replayed kernel reads it before its value is final
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (!c[i]) continue;
      bool ok = true;
      for (const Storage* p : reads_[i]) ok = ok && constant(p);
      for (const Storage* p : writes_[i]) ok = ok && constant(p);
      if (!ok) {
        c[i] = 0;
        changed = true;
      }
    }
  }
  std::vector<const Storage*> out;
  for (size_t i = 0; i < n; ++i)
    if (c[i])
      for (const Storage* p : writes_[i])
        if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  folded_ = std::move(c);
  return out;
}

REEL_INLINE void capture_refuse(const char* why) {
  if (CaptureTrace* t = capturing()) t->refuse(why);
}

}  // namespace
