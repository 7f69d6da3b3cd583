#pragma once
// The bodies of engine's non-template runtime functions (header-only mode: included by it;
// compiled mode: by src/runtime.cpp).
#include "engine.hpp"

namespace reel::inline REEL_ABI {
namespace detail {
REEL_INLINE void fill_patterns(unsigned char* d, const unsigned char* s, int64_t si, int64_t sp, int64_t n,
                               int64_t planes, int size) {
  if (size == 8)
    fill_patterns_n<uint64_t>(d, s, si, sp, n, planes);
  else
    fill_patterns_n<uint32_t>(d, s, si, sp, n, planes);
}
REEL_INLINE void parallel_for(int64_t n, int64_t grain, RangeFn f) {
#ifdef _OPENMP
  int nt = n >= grain && !omp_in_parallel() ? omp_get_max_threads() : 1;
  if (nt > 1) {
    nt = static_cast<int>(std::min<int64_t>(nt, (n + grain - 1) / grain));
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), k = omp_get_num_threads();
      int64_t b = n * t / k, e = n * (t + 1) / k;
      if (b < e) f(b, e);
    }
    return;
  }
#endif
  (void)grain;
  if (n > 0) f(int64_t(0), n);
}

REEL_INLINE void coalesce(Shape& sizes, int nops, int64_t* st, int64_t& nd) {
  auto S = [&](int k, int64_t d) -> int64_t& { return st[k * kMaxDims + d]; };
  int64_t w = 0;
  for (int64_t d = 0; d < nd; ++d) {
    if (sizes[d] == 1 && nd > 1) continue;
    if (w > 0) {
      bool ok = true;
      for (int k = 0; k < nops && ok; ++k) ok = S(k, w - 1) == S(k, d) * sizes[d];
      if (ok) {
        sizes[w - 1] *= sizes[d];
        for (int k = 0; k < nops; ++k) S(k, w - 1) = S(k, d);
        continue;
      }
    }
    sizes[w] = sizes[d];
    for (int k = 0; k < nops; ++k) S(k, w) = S(k, d);
    ++w;
  }
  nd = std::max<int64_t>(w, 1);
  sizes.resize(nd);
}

REEL_INLINE void order_dims(Shape& sizes, int nops, int64_t* st, int64_t nd) {
  auto inner_first = [&](int64_t a, int64_t b) {  // should dim b (now inside a) go outside a?
    if (sizes[a] == 1 || sizes[b] == 1) return false;
    for (int k = 0; k < nops; ++k) {
      int64_t sa = std::abs(st[k * kMaxDims + a]), sb = std::abs(st[k * kMaxDims + b]);
      if (sa == 0 || sb == 0 || sa == sb) continue;
      return sa < sb;
    }
    return false;
  };
  for (int64_t i = nd - 2; i >= 0; --i)  // insertion sort, innermost dims first
    for (int64_t j = i; j + 1 < nd && inner_first(j, j + 1); ++j) {
      std::swap(sizes[j], sizes[j + 1]);
      for (int k = 0; k < nops; ++k) std::swap(st[k * kMaxDims + j], st[k * kMaxDims + j + 1]);
    }
}

REEL_INLINE void plan_iteration(const Operands& ops, IterPlan& p) {
  const Shape& osz = *ops.sizes[0];
  int64_t nd = osz.size();
  REEL_CHECK(nd <= kMaxDims, not_implemented_error, "elementwise ops support up to ", kMaxDims, " dimensions, got ", nd);
  p.numel = numel_of(osz);
  p.nops = ops.n;
  p.sizes = osz;
  for (int k = 0; k < ops.n; ++k) {
    const Shape& sz = *ops.sizes[k];
    const Shape& sr = *ops.strides[k];
    int64_t off = nd - sz.size();
    for (int64_t d = 0; d < nd; ++d) {
      int64_t j = d - off;
      p.st[k * kMaxDims + d] = j < 0 || sz[j] == 1 ? 0 : sr[j];
    }
  }
  if (nd == 0) {
    nd = 1;
    p.sizes = Shape{1};
    for (int k = 0; k < ops.n; ++k) p.st[k * kMaxDims] = 1;
  } else {
    order_dims(p.sizes, ops.n, p.st, nd);
    coalesce(p.sizes, ops.n, p.st, nd);
  }
  p.nd = nd;
}

// run_rows (tile == 0) and run_rows_tiled (tile > 0, one thread, operand 0's offsets taken
// from each tile's start).
REEL_INLINE void run_rows_impl(const Operands& ops, void* self, RowFn row_fn, bool planes_ok, bool serial, int64_t tile,
                               const RangeFn* done) {
  int64_t n = numel_of(*ops.sizes[0]);
  if (n == 0) return;
  if (n == 1) {  // one element (scalars, losses, scalar graphs): nothing to plan
    REEL_CHECK(int64_t(ops.sizes[0]->size()) <= kMaxDims, not_implemented_error, "elementwise ops support up to ",
               kMaxDims, " dimensions, got ", ops.sizes[0]->size());
    int64_t off[kMaxOperands] = {}, inner[kMaxOperands] = {};
    row_fn(self, RowCtx{ops.base, off, inner, inner, inner, 1}, 1, 1, true);
    if (done) (*done)(0, 1);
    return;
  }
  IterPlan plan;
  plan_iteration(ops, plan);
  const int nops = ops.n;
  const int64_t nd = plan.nd;
  const Shape& sizes = plan.sizes;
  const int64_t* st = plan.st;
  const int64_t len = sizes[nd - 1];
  const int64_t nrow = nd >= 2 ? sizes[nd - 2] : 1;  // rows along the block dimension
  int64_t inner[kMaxOperands], outer[kMaxOperands], outer2[kMaxOperands];
  bool unit = true;
  for (int k = 0; k < nops; ++k) {
    inner[k] = st[k * kMaxDims + nd - 1];
    outer[k] = nd >= 2 ? st[k * kMaxDims + nd - 2] : 0;
    outer2[k] = nd >= 3 ? st[k * kMaxDims + nd - 3] : 0;
    unit = unit && inner[k] == 1;
  }
  planes_ok = planes_ok && nd >= 3;
  auto work = [&](int64_t begin, int64_t end, int64_t base0 = 0) {
    int64_t idx[kMaxDims] = {};  // coordinates of the current row (dims 0 .. nd-2)
    int64_t off[kMaxOperands];
    int64_t row = begin / len, col = begin % len;
    for (int64_t d = nd - 2, q = row; d >= 0; --d) {
      idx[d] = q % sizes[d];
      q /= sizes[d];
    }
    RowCtx c{ops.base, off, inner, outer, outer2, 1};
    for (int64_t pos = begin; pos < end;) {
      for (int k = 0; k < nops; ++k) {
        int64_t o = col * inner[k];
        for (int64_t d = 0; d < nd - 1; ++d) o += idx[d] * st[k * kMaxDims + d];
        off[k] = o;
      }
      off[0] -= base0;
      int64_t cnt = std::min(len - col, end - pos), rows = 1, planes = 1;
      if (col == 0 && cnt == len && nd >= 2) rows = std::min(nrow - idx[nd - 2], (end - pos) / len);
      if (planes_ok && rows == nrow && idx[nd - 2] == 0)
        planes = std::min(sizes[nd - 3] - idx[nd - 3], (end - pos) / (len * nrow));
      c.planes = planes;
      row_fn(self, c, cnt, rows, unit);
      pos += cnt * rows * planes;
      col = 0;
      if (nd >= 2) idx[nd - 2] += rows - 1;
      if (planes > 1) idx[nd - 3] += planes - 1;
      for (int64_t d = nd - 2; d >= 0; --d) {
        if (++idx[d] < sizes[d]) break;
        idx[d] = 0;
      }
    }
  };
  if (tile > 0) {
    for (int64_t b = 0; b < n; b += tile) {
      const int64_t e = std::min(n, b + tile);
      work(b, e, b);
      (*done)(b, e);
    }
  } else if (serial) {
    work(0, n);
  } else {
    parallel_range(n, [&](int64_t b, int64_t e) { work(b, e); });
  }
}

REEL_INLINE bool flat_run(const Operands& ops, int64_t n, int64_t* inner, bool& unit) {
  unit = true;
  for (int k = 0; k < ops.n; ++k) {
    const Shape &sz = *ops.sizes[k], &st = *ops.strides[k];
    int64_t expect = 1;  // the stride of a contiguous tensor at d; after the loop, the numel
    bool dense = true;
    for (int64_t d = int64_t(sz.size()) - 1; d >= 0; --d)
      if (sz[d] != 1) {
        dense = dense && st[d] == expect;
        expect *= sz[d];
      }
    if (expect == n && dense)
      inner[k] = 1;
    else if (expect == 1 && k > 0)
      inner[k] = 0, unit = false;
    else
      return false;
  }
  return true;
}

REEL_INLINE void run_rows(const Operands& ops, void* self, RowFn row_fn, bool planes_ok, bool serial) {
  run_rows_impl(ops, self, row_fn, planes_ok, serial, 0, nullptr);
}

REEL_INLINE void run_rows_tiled(const Operands& ops, void* self, RowFn row_fn, int64_t tile, RangeFn done) {
  run_rows_impl(ops, self, row_fn, true, true, tile, &done);
}

REEL_INLINE void copy2d(void* dst, int64_t di, int64_t dob, const void* src, int64_t si, int64_t sob, int64_t n, int64_t rows,
                   int size) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  if (di == 1 && si == 1 && (rows == 1 || (dob == n && sob == n))) {
    std::memcpy(d, s, static_cast<size_t>(n * rows) * size);
    return;
  }
  switch (size) {
    case 1: return copy2d_as<uint8_t>(d, di, dob, s, si, sob, n, rows);
    case 2: return copy2d_as<uint16_t>(d, di, dob, s, si, sob, n, rows);
    case 4: return copy2d_as<uint32_t>(d, di, dob, s, si, sob, n, rows);
    case 8: return copy2d_as<uint64_t>(d, di, dob, s, si, sob, n, rows);
    case 16: return copy2d_as<Bytes16>(d, di, dob, s, si, sob, n, rows);
    default:
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < n; ++i) std::memcpy(d + (r * dob + i * di) * size, s + (r * sob + i * si) * size, size);
  }
}

}  // namespace
}  // namespace
