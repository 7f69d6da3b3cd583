#pragma once
// The reduction kernels behind reductions.hpp: a reduction over any set of dims permutes the
// reduced dims to the end, so every output element reduces one contiguous run; runs are
// reduced with Eigen (vectorized) and split between threads.
#include "../core/config.hpp"
#include <algorithm>
#include <numeric>

#include "factories.hpp"
#include "indexing.hpp"

namespace reel::inline REEL_ABI {

namespace detail {

// sum/prod of integers and bools accumulate and return int64, as in PyTorch.
template <class T> using sum_t = std::conditional_t<(category_v<T> <= 1), int64_t, T>;

struct ReducePlan {
  Shape out_keep;  // output shape with keepdim
  Shape out;       // output shape as requested
  int64_t outer = 1, inner = 1;
  Shape perm;
};

REEL_INLINE ReducePlan plan_reduce(const Shape& sizes, Shape dims, bool keepdim, const char* fn);
// Per dim of `sizes`: reduced by plan p (a reduced dim of size 1 counts as kept: the same).
inline std::vector<char> reduced_mask(const Shape& sizes, const ReducePlan& p) {
  std::vector<char> m(sizes.size());
  for (size_t d = 0; d < m.size(); ++d) m[d] = p.out_keep[d] == 1 && sizes[d] != 1;
  return m;
}

// What a reduction computes, for devices that cannot run the host function `f` (CUDA runs
// its own kernel per kind; None: not available there).
enum class RunKind { None, Sum, Mean, Prod, Max, Min, ArgMax, ArgMin };

template <class A, class T> A sum_run(const T* p, int64_t n);  // below

// o[r] += the W consecutive elements of row r (W fixed: unrolled, and vectorizable across rows).
template <int W, class Acc, class T>
void sum_rows_fixed(Acc* __restrict o, const T* __restrict in, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    Acc a = o[r];
    for (int j = 0; j < W; ++j) a += static_cast<Acc>(in[r * W + j]);
    o[r] = a;
  }
}

// o[r] = the sum (or mean) of the W consecutive elements of row r, accumulated in Acc.
template <int W, bool Mean, class Acc, class T>
void sum_runs_fixed_as(T* __restrict o, const T* __restrict in, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {  // vectorizes (the stride-W loads become shuffles)
    Acc a{};  // from +0, as PyTorch (a sum of -0.0 is +0.0)
    for (int j = 0; j < W; ++j) a += static_cast<Acc>(in[r * W + j]);
    if constexpr (Mean)
      o[r] = static_cast<T>(a / static_cast<real_t<Acc>>(W));
    else
      o[r] = static_cast<T>(a);
  }
}
template <int W, class Acc, class T>
void sum_runs_fixed(T* o, const T* in, int64_t rows, bool mean) {
  if (mean)
    sum_runs_fixed_as<W, true, Acc>(o, in, rows);
  else
    sum_runs_fixed_as<W, false, Acc>(o, in, rows);
}
// The same for runs of w = 2, 3 or 4 elements.
template <class Acc, class T>
void sum_short_runs(T* o, const T* in, int64_t rows, int64_t w, bool mean) {
  switch (w) {
    case 2: return sum_runs_fixed<2, Acc>(o, in, rows, mean);
    case 3: return sum_runs_fixed<3, Acc>(o, in, rows, mean);
    default: return sum_runs_fixed<4, Acc>(o, in, rows, mean);
  }
}

// o[j] += column j of `rows` rows of W consecutive elements (a kept xyz dim, the rows
// reduced): two interleaved accumulators per column, so the adds do not wait on each other.
template <int W, class Acc, class T>
void sum_cols_fixed(Acc* __restrict o, const T* __restrict in, int64_t rows) {
  Acc a[W] = {}, b[W] = {};
  int64_t r = 0;
  for (; r + 1 < rows; r += 2)
    for (int j = 0; j < W; ++j) {
      a[j] += static_cast<Acc>(in[r * W + j]);
      b[j] += static_cast<Acc>(in[(r + 1) * W + j]);
    }
  if (r < rows)
    for (int j = 0; j < W; ++j) a[j] += static_cast<Acc>(in[r * W + j]);
  for (int j = 0; j < W; ++j) o[j] += a[j] + b[j];
}

// Sum (or mean) over some dims, reading x in place: one walk over x in its stride order
// accumulating into the output (zero stride along the reduced dims), so neither a permuted
// copy nor a call per output element is paid. Short reduced runs (xyz = 3) are plain loops;
// long unit-stride ones go through sum_run; a kept inner dim adds whole slices. Float
// accumulates in double, as sum_run does.
template <class T>
using strided_acc_t = std::conditional_t<std::is_same_v<T, float>, double,
                      std::conditional_t<std::is_same_v<T, std::complex<float>>, std::complex<double>, T>>;
template <class T>
void sum_strided(const Tensor<T>& x, const ReducePlan& p, bool mean, T* dst) {
  using Acc = strided_acc_t<T>;
  const int64_t nout = p.outer;
  if (p.inner >= 2 && p.inner <= 4 && x.is_contiguous() && std::is_sorted(p.perm.begin(), p.perm.end())) {
    // contiguous, reduced over short trailing dims ([n, m, 3] over the 3): each output is
    // one run of p.inner elements, written once (no zero fill, no accumulation pass)
    return sum_short_runs<Acc>(dst, x.data_ptr(), nout, p.inner, mean);
  }
  thread_local std::vector<Acc> buf;
  Acc* acc;
  if constexpr (std::is_same_v<Acc, T>) {
    acc = dst;
  } else {
    buf.resize(nout);
    acc = buf.data();
  }
  std::fill(acc, acc + nout, Acc{});
  Shape ost(x.dim(), 0);  // the output's strides over x's dims
  for (int64_t i = x.dim() - 1, s = 1; i >= 0; --i)
    if (p.out_keep[i] != 1 || x.size(i) == 1) {
      ost[i] = p.out_keep[i] == 1 ? 0 : s;
      s *= p.out_keep[i];
    }
  const Shape xs = x.sizes(), xst = x.strides();
  Operands ops;
  ops.add(acc, xs, ost);
  ops.add(x.data_ptr(), xs, xst);
  run_rows(ops, nullptr, [](void*, const RowCtx& c, int64_t cnt, int64_t rows, bool) {
    Acc* o = static_cast<Acc*>(const_cast<void*>(c.base[0])) + c.off[0];
    const T* in = static_cast<const T*>(c.base[1]) + c.off[1];
    const int64_t os = c.inner[0], is = c.inner[1], oo = c.outer[0], io = c.outer[1];
    if (os == 0 && is == 1 && io == cnt && oo == 1 && cnt >= 2 && cnt <= 4) {  // xyz: unrolled, vectorizable
      switch (cnt) {
        case 2: return sum_rows_fixed<2>(o, in, rows);
        case 3: return sum_rows_fixed<3>(o, in, rows);
        default: return sum_rows_fixed<4>(o, in, rows);
      }
    }
    if (oo == 0 && os == 1 && is == 1 && io == cnt && cnt >= 2 && cnt <= 4) {  // rows reduced onto a kept xyz
      switch (cnt) {
        case 2: return sum_cols_fixed<2>(o, in, rows);
        case 3: return sum_cols_fixed<3>(o, in, rows);
        default: return sum_cols_fixed<4>(o, in, rows);
      }
    }
    if (os == 0 && cnt < kShortRow && rows > cnt) {  // short reduced rows: add column by column
      for (int64_t i = 0; i < cnt; ++i)
        for (int64_t r = 0; r < rows; ++r) o[r * oo] += static_cast<Acc>(in[r * io + i * is]);
      return;
    }
    for (int64_t r = 0; r < rows; ++r, o += oo, in += io) {
      if (os == 0) {  // the row is reduced
        if (is == 1 && cnt >= 16) {
          *o += sum_run<Acc>(in, cnt);  // blocks of 1024, float accumulated in double
        } else {
          Acc a{};
          for (int64_t i = 0; i < cnt; ++i) a += static_cast<Acc>(in[i * is]);
          *o += a;
        }
      } else if (os == 1 && is == 1 && cnt >= 16) {
        Eigen::Map<Eigen::Array<Acc, Eigen::Dynamic, 1>>(o, cnt) += cast_eigen<Acc>(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(in, cnt));
      } else {
        for (int64_t i = 0; i < cnt; ++i) o[i * os] += static_cast<Acc>(in[i * is]);
      }
    }
  }, false, true);  // one thread: rows of x accumulate into the same outputs
  const real_t<Acc> n = static_cast<real_t<Acc>>(p.inner);
  if (mean || !std::is_same_v<Acc, T>)  // (a plain sum accumulated in T is already in dst)
    for (int64_t i = 0; i < nout; ++i) dst[i] = static_cast<T>(mean ? acc[i] / n : acc[i]);
}

// Applies `f(const T* run, int64_t len) -> R` to every reduced run of x.
template <class R, RunKind K = RunKind::None, class T, class D, class F>
Tensor<R, D> reduce_runs(const Tensor<T, D>& x, Shape dims, bool keepdim, const char* fn, F&& f) {
  auto p = plan_reduce(x.sizes(), dims, keepdim, fn);
  auto out = empty<R, D>(p.out);
  if constexpr (device_memory_v<D>) {
    if constexpr (K == RunKind::None) {
      require_host_memory<D>(fn);
    } else {
      auto xp = x.dim() ? x.permute(p.perm).contiguous() : x.contiguous();
      constexpr bool extreme = K == RunKind::Max || K == RunKind::Min || K == RunKind::ArgMax || K == RunKind::ArgMin;
      if (p.inner == 0 && extreme && p.outer > 0)
        raise<index_error>(fn, ": cannot reduce over a zero-size dimension");
      Backend<D>::template reduce_runs<K>(xp.data_ptr(), out.data_ptr(), p.outer, p.inner);
    }
  } else if constexpr (Backend<D>::has_data) {
    auto run = [](const Tensor<T, D>& x, const ReducePlan& p, const Tensor<R, D>& out, const std::remove_cvref_t<F>& f,
                  const char* fn, const Shape& dims) {
      if constexpr ((K == RunKind::Sum || K == RunKind::Mean) && std::is_same_v<R, T> &&
                    (std::is_floating_point_v<T> || is_complex_v<T>)) {
        if (p.outer > 1 && p.inner > 0 && x.numel() < kParallelThreshold) {
          sum_strided(x, p, K == RunKind::Mean, out.mutable_data_ptr());
          return;
        }
        if (p.outer > 1 && p.inner > 0 && x.dim() > 0 && p.out_keep[0] == x.size(0) && x.size(0) > 1) {
          // dim 0 kept (a batch of directions, say): each thread reduces its slices of it
          const int64_t per = p.outer / x.size(0);
          T* dst = out.mutable_data_ptr();
          parallel_range(x.size(0), [&](int64_t b, int64_t e) {
            auto part = x.narrow(0, b, e - b);
            auto pp = plan_reduce(part.sizes(), dims, true, fn);
            sum_strided(part, pp, K == RunKind::Mean, dst + b * per);
          }, std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(x.numel() / x.size(0), 1)));
          return;
        }
        // reduced dims that are not the innermost (a bias gradient's sum over the batch): one
        // walk in place rather than a permuted copy (one thread: the same rounding for any count)
        if (p.outer > 1 && p.inner > 0 && x.numel() < (int64_t(1) << 22) && x.dim() > 0 &&
            !x.permute(p.perm).is_contiguous()) {
          sum_strided(x, p, K == RunKind::Mean, out.mutable_data_ptr());
          return;
        }
      }
      auto xp = x.dim() ? x.permute(p.perm).contiguous() : x.contiguous();
      const T* src = xp.data_ptr();
      R* dst = out.mutable_data_ptr();
      const int64_t inner = p.inner;
      if (p.outer == 1) {
        dst[0] = f(src, inner);
      } else {
        parallel_range(p.outer, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) dst[i] = f(src + i * inner, inner);
        }, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(inner, 1)));
      }
    };
    if (CaptureTrace* t = capturing()) {
      t->record({out.impl().storage.get()}, {x.impl().storage.get()}, [=] { run(x, p, out, f, fn, dims); });
      if constexpr ((K == RunKind::Sum || K == RunKind::Mean) && std::is_same_v<R, T>)
        Recorder<T, D>::describe(*t, out, x, x.sizes(), reduced_mask(x.sizes(), p), K == RunKind::Mean);
    } else
      run(x, p, out, f, fn, dims);
  }
  return out;
}

// The gradient of a reduction, broadcast back to the input's shape.
template <class T, class D>
Tensor<T, D> unreduce(const Tensor<T, D>& g, const Shape& in_sizes, const Shape& dims) {
  auto p = plan_reduce(in_sizes, dims, true, "backward");
  return g.reshape(p.out_keep).expand(in_sizes);
}

template <class T>
auto eigen_run(const T* p, int64_t n) {
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> m(p, n);
  if constexpr (is_reduced_float_v<T>)
    return m.template cast<float>();
  else
    return m;
}

// Sum of one contiguous run: blocks of 1024 summed by Eigen, block sums accumulated in
// double for float input (cheap, and much more accurate than one long float chain). Long
// runs are split between threads.
template <class A, class T>
using run_acc_t = std::conditional_t<std::is_same_v<compute_t<T>, float>, double,
                  std::conditional_t<std::is_same_v<compute_t<T>, std::complex<float>>, std::complex<double>, A>>;
inline constexpr int64_t kSumBlock = 1024;
// acc plus the sums of p's blocks of kSumBlock elements, in order.
template <class Acc, class T>
Acc add_blocks(Acc acc, const T* p, int64_t n) {
  for (int64_t i = 0; i < n; i += kSumBlock) {
    int64_t len = std::min(kSumBlock, n - i);
    if constexpr (std::is_same_v<T, bool>)
      acc += static_cast<Acc>(std::count(p + i, p + i + len, true));
    else if constexpr (std::is_integral_v<T>)
      acc += static_cast<Acc>(eigen_run(p + i, len).template cast<int64_t>().sum());
    else
      acc += static_cast<Acc>(eigen_run(p + i, len).sum());
  }
  return acc;
}
template <class A, class T>
A sum_run(const T* p, int64_t n) {
  using Acc = run_acc_t<A, T>;
  auto block_sum = [&](int64_t b, int64_t e) { return add_blocks(Acc{}, p + b, e - b); };
  int nt = num_threads_for(n);
  if (nt <= 1) return convert<A>(block_sum(0, n));
  std::vector<Acc> part(nt, Acc{});
  parallel_range(n, [&](int64_t b, int64_t e) {
#ifdef _OPENMP
    part[omp_get_thread_num()] = block_sum(b, e);
#else
    part[0] = block_sum(b, e);
#endif
  });
  Acc acc{};
  for (auto& v : part) acc += v;
  return convert<A>(acc);
}

// sum / mean of expression e over its trailing dims or all of them (p: e's reduction plan,
// perm the identity), on one thread, with e never materialized: e is evaluated in tiles
// (whole runs; blocks of kSumBlock for a full reduction) and each tile reduced as
// reduce_runs reduces the materialized tensor below kParallelThreshold, in the same order
// with the same accumulators (sum_runs_fixed, sum_run / add_blocks).
inline constexpr int64_t kReduceTile = 2 * kSumBlock;
inline unsigned char* reduce_tile_buffer() {
  alignas(64) static thread_local unsigned char b[kReduceTile * 16];
  return b;
}
template <class T, class E>
void sum_expr_cpu(const E& e, const ReducePlan& p, bool mean, T* dst) {
  static_assert(sizeof(T) <= 16);
  T* buf = reinterpret_cast<T*>(reduce_tile_buffer());
  const int64_t inner = p.inner;
  if (p.outer == 1) {  // as reduce_runs' f: sum_run<T> for a sum, sum_run<C> / n for a mean
    using C = compute_t<T>;
    auto reduce_all = [&](auto a) {
      using A = decltype(a);
      run_acc_t<A, T> acc{};
      eval_tiles_cpu(e, kReduceTile, buf, [&](const T* t, int64_t, int64_t len) { acc = add_blocks(acc, t, len); });
      return convert<A>(acc);
    };
    dst[0] = mean ? convert<T>(reduce_all(C{}) / static_cast<real_t<C>>(inner)) : reduce_all(T{});
    return;
  }
  // as sum_strided: runs of 2-4 elements by sum_runs_fixed, longer ones from +0 in Acc
  using Acc = strided_acc_t<T>;
  const real_t<Acc> n = static_cast<real_t<Acc>>(inner);
  eval_tiles_cpu(e, std::max<int64_t>(1, kReduceTile / inner) * inner, buf, [&](const T* t, int64_t b, int64_t len) {
    T* o = dst + b / inner;
    const int64_t rows = len / inner;
    if (inner >= 2 && inner <= 4) return sum_short_runs<Acc>(o, t, rows, inner, mean);
    for (int64_t r = 0; r < rows; ++r, t += inner) {
      Acc a{};
      if (inner >= 16) {
        a += sum_run<Acc>(t, inner);
      } else {
        for (int64_t i = 0; i < inner; ++i) a += static_cast<Acc>(t[i]);
      }
      o[r] = static_cast<T>(mean ? a / n : a);
    }
  });
}

}  // namespace detail

}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "reduce_kernels-inl.hpp"
#endif
