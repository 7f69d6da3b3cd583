#pragma once
// The device side of linear_cross_entropy on CUDA (lce.cuh explains the algorithm): the
// problem and output descriptions and the kernels (per-row online logsumexp, loss and scaled
// gradient; column sums; the reductions of the per-row losses).
#include "../core/config.hpp"
#include <memory>
#include <tuple>

#include "blaslt.hpp"
#include "device_errors.hpp"

namespace reel::inline REEL_ABI {
namespace detail::cuda::lce {

inline constexpr int kRowThreads = 256;     // per row: a multiple of 32, at most 1024
inline constexpr int kMaxRowBlocks = 1 << 20;  // rows beyond this loop inside the blocks

// The problem, every pointer on the device.
template <class A, class T>
struct Problem {
  int64_t N = 0, D = 0, V = 0, chunk = 1;
  const T* X = nullptr;        // [N, D]
  const T* W = nullptr;        // [V, D]
  const T* b = nullptr;        // [V] or null
  const int64_t* y = nullptr;  // [N] class indices, or null (out of range: reported, the row ignored)
  const T* t = nullptr;        // [N, V] probabilities, or null
  int64_t ignore_index = -100;
  double eps = 0;
};
// What a pass produces (each optional).
template <class A, class T>
struct Outputs {
  A* loss = nullptr;          // [N] per-row loss
  A* lse = nullptr;           // [N] per-row logsumexp (kept for reduction none)
  T* dX = nullptr;            // [N, D], written
  A* dW = nullptr;            // [V, D], accumulated into (zeroed by alloc_grads)
  A* db = nullptr;            // [V], accumulated into
  const A* scale = nullptr;          // [N] gradient factor per row (backward of none), or
  const A* uniform_scale = nullptr;  //   one factor for all rows (mean / sum), on the device
  bool grads() const { return dX || dW || db; }
};

// ------------------------------------------------------------------ kernels
template <class A>
__device__ inline A dev_exp(A x) {
  if constexpr (std::is_same_v<A, float>)
    return ::expf(x);
  else
    return ::exp(x);  // (qualified: reel::exp is the elementwise tensor op)
}
template <class A>
__device__ inline A dev_log(A x) {
  if constexpr (std::is_same_v<A, float>)
    return ::logf(x);
  else
    return ::log(x);
}
template <class A>
__device__ inline A dev_inf() {
  return std::numeric_limits<A>::infinity();
}
// exp(x - m) for x <= m, with exp(inf - inf) taken as 1 (an infinite maximum), not NaN.
template <class A>
__device__ inline A exp_below(A x, A m) {
  return x == m ? A(1) : dev_exp(x - m);
}

// A row's partial sums. (No member initializers: block_reduce keeps these in __shared__.)
template <class A>
struct RowStats {
  A m, s;              // running maximum and sum of exp(z - m): logsumexp = m + log s
  double sz, st, stz;  // sum z, sum t, sum t z (smoothing and probability-target terms)
};
template <class A>
__device__ inline RowStats<A> row_stats_identity() {
  return {-dev_inf<A>(), A(0), 0.0, 0.0, 0.0};
}
template <class A>
__device__ inline void push(RowStats<A>& r, A x) {
  if (x > r.m) {
    r.s = r.s * exp_below(r.m, x) + A(1);
    r.m = x;
  } else {
    r.s += exp_below(x, r.m);  // (x = m = -inf adds 1 to a sum that the first finite x scales by 0)
  }
}
template <class A>
__device__ inline void merge(RowStats<A>& r, const RowStats<A>& o) {
  const A m = o.m > r.m ? o.m : r.m;
  r.s = r.s * exp_below(r.m, m) + o.s * exp_below(o.m, m);
  r.m = m;
  r.sz += o.sz;
  r.st += o.st;
  r.stz += o.stz;
}
template <class A>
__device__ inline RowStats<A> warp_reduce(RowStats<A> r) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    RowStats<A> o;
    o.m = __shfl_down_sync(0xffffffffu, r.m, off);
    o.s = __shfl_down_sync(0xffffffffu, r.s, off);
    o.sz = __shfl_down_sync(0xffffffffu, r.sz, off);
    o.st = __shfl_down_sync(0xffffffffu, r.st, off);
    o.stz = __shfl_down_sync(0xffffffffu, r.stz, off);
    merge(r, o);  // (lanes past the end merge garbage; only lane 0's result is used)
  }
  return r;
}
// Every thread of the block gets the block's combined stats.
template <class A>
__device__ RowStats<A> block_reduce(RowStats<A> r) {
  __shared__ RowStats<A> part[32];
  __shared__ RowStats<A> total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  r = warp_reduce(r);
  if (lane == 0) part[warp] = r;
  __syncthreads();
  if (warp == 0) {
    r = lane < warps ? part[lane] : row_stats_identity<A>();
    r = warp_reduce(r);
    if (lane == 0) total = r;
  }
  __syncthreads();
  r = total;
  __syncthreads();  // (part and total are reused for the block's next row)
  return r;
}

template <class A, class T>
struct RowArgs {
  A* z;          // the chunk's logits [rows, V] (row i at z + i V)
  T* g;          // gradient rows in T [rows, V], or null (the gradient then stays in z only)
  bool write_z;  // also write the gradient (in A) over z
  int64_t rows, V, row0;
  const T* b;
  const int64_t* y;
  const T* t;
  int64_t ignore_index;
  A keep, spread, eps;  // 1 - e, e / V, e
  bool smoothing;       // e != 0
  const A* known_lse;
  A* loss;
  A* lse_out;
  bool grads;
  const A* scale;
  const A* uniform_scale;
};

template <class A, class T>
__device__ inline A logit(const RowArgs<A, T>& p, const A* z, int64_t j) {
  return p.b ? z[j] + convert<A>(p.b[j]) : z[j];
}

// One block per row of the chunk (see the CPU row_pass for the formula). 64-bit indexing
// throughout: i * V exceeds 2^31 for large chunks and vocabularies.
template <class A, class T, bool Hard>
__global__ void __launch_bounds__(kRowThreads) row_kernel(RowArgs<A, T> p) {
  const int64_t V = p.V;
  for (int64_t i = blockIdx.x; i < p.rows; i += gridDim.x) {
    const int64_t n = p.row0 + i;
    A* z = p.z + i * V;
    T* g = p.g ? p.g + i * V : nullptr;
    const T* t = Hard ? nullptr : p.t + n * V;
    int64_t yi = 0;
    bool kept = true;
    if constexpr (Hard) {
      yi = p.y[n];
      kept = yi != p.ignore_index && yi >= 0 && yi < V;  // (out of range: count_targets_kernel reports it)
    }
    RowStats<A> st = row_stats_identity<A>();
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A x = logit(p, z, j);
      push(st, x);
      st.sz += static_cast<double>(x);
      if constexpr (!Hard) {
        const double tv = static_cast<double>(convert<A>(t[j]));
        st.st += tv;
        st.stz += tv * static_cast<double>(x);
      }
    }
    // The target logit, read before the barrier below: after it, the gradient pass may
    // overwrite z[y].
    A zy = 0;
    if (Hard && kept && threadIdx.x == 0) zy = logit(p, z, yi);
    st = block_reduce(st);
    const bool inf_max = st.m == dev_inf<A>() || st.m == -dev_inf<A>();
    const A lse = p.known_lse ? p.known_lse[n] : inf_max ? st.m : st.m + dev_log(st.s);
    const A a = Hard ? A(1) : p.keep * static_cast<A>(st.st) + p.eps;  // the row's target mass
    if (threadIdx.x == 0) {
      if (p.lse_out) p.lse_out[n] = lse;
      if (p.loss) {
        double l = 0;
        if constexpr (Hard) {
          if (kept) {
            l = static_cast<double>(lse) - static_cast<double>(p.keep) * static_cast<double>(zy);
            if (p.smoothing) l -= static_cast<double>(p.spread) * st.sz;
          }
        } else {
          l = static_cast<double>(a) * static_cast<double>(lse) -
              (static_cast<double>(p.keep) * st.stz + static_cast<double>(p.spread) * st.sz);
        }
        p.loss[n] = static_cast<A>(l);
      }
    }
    if (!p.grads) continue;
    const A s = p.scale ? p.scale[n] : *p.uniform_scale;
    if (Hard && (!kept || s == A(0))) {
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        if (g) g[j] = convert<T>(A(0));
        if (p.write_z) z[j] = A(0);
      }
      continue;
    }
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      const A x = logit(p, z, j);
      A d;
      if constexpr (Hard) {
        d = dev_exp(x - lse) * s;
        if (p.smoothing) d -= p.spread * s;
        if (j == yi) d -= p.keep * s;
      } else {
        d = (dev_exp(x - lse) * a - (p.keep * convert<A>(t[j]) + p.spread)) * s;
      }
      if (g) g[j] = convert<T>(d);
      if (p.write_z) z[j] = d;
    }
  }
}

// db[j] += sum over the chunk's rows of G[i, j] (one thread per column: coalesced rows).
template <class A>
__global__ void __launch_bounds__(256) column_sums_kernel(const A* G, int64_t rows, int64_t V, A* db) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < V;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    A s = 0;
    for (int64_t i = 0; i < rows; ++i) s += G[i * V + j];
    db[j] += s;
  }
}

// The sum over a block of 256 threads of every thread's s (backend.cuh's block_reduce).
struct DoubleSum {
  REEL_HD static double combine(double a, double b) { return a + b; }
};
__device__ inline double block_sum(double s) { return cuda::block_reduce<DoubleSum>(s); }

// *count = the rows whose target is not ignore_index (the mean's denominator), in double;
// a target out of [0, V) is reported (raised at the next synchronization) and not counted.
// Checked here, on the device, so that no step waits for the GPU to copy targets to the host.
// (A template only so that every translation unit may instantiate it: -rdc links them.)
template <int = 0>
__global__ void __launch_bounds__(256) count_targets_kernel(const int64_t* y, int64_t N, int64_t V, int64_t ignore_index,
                                                            double* count, DeviceErrorRecord* err) {
  double c = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    const int64_t yi = y[n];
    if (yi == ignore_index) continue;
    if (yi < 0 || yi >= V)
      report_device_error(err, DeviceErrorSite::CrossEntropyTarget, yi, V);
    else
      c += 1;
  }
  const double total = block_sum(c);
  if (threadIdx.x == 0) *count = total;
}

// *out = the gradient factor of every row for mean (1 / count; 0 when no row counts, whose
// gradients are all 0) or sum (1), times g[0] when g is given (the incoming gradient).
template <class A, class T>
__global__ void uniform_scale_kernel(const double* count, bool mean, const T* g, A* out) {
  double s = 1;
  if (mean) s = *count == 0 ? 0.0 : 1.0 / *count;
  if (g) s *= static_cast<double>(convert<double>(*g));
  *out = static_cast<A>(s);
}

// out[0] = (sum of loss[0, N), in double) / *divisor (sum: no divisor), written in T on the device.
template <class A, class T>
__global__ void __launch_bounds__(256) reduce_loss_kernel(const A* loss, int64_t N, const double* divisor, T* out) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += static_cast<double>(loss[i]);
  const double total = block_sum(s);
  if (threadIdx.x == 0)
    out[0] = convert<T>(divisor ? total / *divisor : total);  // (mean of no kept rows: 0 / 0 = NaN, as on the CPU)
}

}  // namespace detail::cuda::lce
}  // namespace reel
