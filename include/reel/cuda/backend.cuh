#pragma once
// The CUDA side of the core: CudaCoreKernels, part of Backend<CUDA> (assembled in <cuda.hpp>),
// gives the engine its allocation, copies, elementwise kernels, index-filled factories and
// reductions.
//
// Elementwise: the typed expression tree is turned into a tree of plain device structs
// (leaf pointers, scalars, and the very op objects of ops.hpp, whose `apply` bodies are
// __host__ __device__), and one kernel evaluates it per output element, so `a * b + c` is one
// pass over memory, as on the CPU. Broadcasting and strides come from the engine's own plan
// (broadcast strides, contiguous dims merged); each element's operand offsets come from an
// offset calculator with 64-bit arithmetic (no int32 index anywhere).
#include "../core/config.hpp"
#include <cub/device/device_reduce.cuh>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include "../expr/launch_plan.hpp"
#include "device_errors.hpp"
#include "runtime.hpp"

namespace reel::inline REEL_ABI {
namespace detail::cuda {

static_assert(sizeof(int64_t) == 8);

// ------------------------------------------------------------------ device expression trees
template <class T, int I>
struct DLeaf {
  const T* p;
  REEL_HD auto eval(const int64_t* off) const { return convert<compute_t<T>>(p[off[I]]); }
};
template <class T>
struct DScalar {
  compute_t<T> v;
  REEL_HD auto eval(const int64_t*) const { return convert<compute_t<T>>(v); }
};
template <class Op, class C, class... A> struct DNode;
template <class Op, class C, class A0>
struct DNode<Op, C, A0> {
  Op op;
  A0 a0;
  REEL_HD auto eval(const int64_t* off) const { return op.template apply<C>(convert<C>(a0.eval(off))); }
};
template <class Op, class C, class A0, class A1>
struct DNode<Op, C, A0, A1> {
  Op op;
  A0 a0;
  A1 a1;
  REEL_HD auto eval(const int64_t* off) const {
    return op.template apply<C>(convert<C>(a0.eval(off)), convert<C>(a1.eval(off)));
  }
};
template <class Op, class C, class A0, class A1, class A2>
struct DNode<Op, C, A0, A1, A2> {
  Op op;
  A0 a0;
  A1 a1;
  A2 a2;
  REEL_HD auto eval(const int64_t* off) const {
    return op.template apply<C>(convert<C>(a0.eval(off)), convert<C>(a1.eval(off)), convert<C>(a2.eval(off)));
  }
};

// Leaf I (operand I of the kernel; operand 0 is the output) of the host tree.
template <int I, class T>
DLeaf<T, I> device_tree(const Tensor<T, CUDA>& t) {
  return {t.data_ptr()};
}
template <int I, class T>
DScalar<T> device_tree(const Scalar<T>& s) {
  return {s.value};
}
template <int I, class Op, class... A>
auto device_tree(const Expr<Op, A...>& e) {
  static_assert(sizeof...(A) >= 1 && sizeof...(A) <= 3, "reel: CUDA kernels take ops of 1 to 3 operands");
  using C = typename Expr<Op, A...>::compute_type;
  static_assert(!is_complex_v<C>, "reel: complex elementwise ops are not implemented for CUDA tensors yet");
  return [&]<size_t... K>(std::index_sequence<K...>) {
    return DNode<Op, C, decltype(device_tree<I + leaf_offset<K, A...>()>(std::get<K>(e.args)))...>{
        e.op, device_tree<I + leaf_offset<K, A...>()>(std::get<K>(e.args))...};
  }(std::index_sequence_for<A...>{});
}

// Grid-stride loop index, 64-bit from the start (blockIdx.x * blockDim.x in 32 bits wraps
// for tensors of more than 2^32 elements).
#define REEL_CUDA_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);  \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <class R, class Tree, int NOps>
// (__grid_constant__: the offset calculator, up to ~600 bytes, is read from the parameter
// space in place instead of being copied to each thread's stack.)
__global__ void __launch_bounds__(256) elementwise_kernel(R* out, Tree tree, const __grid_constant__ OffsetCalc<NOps> calc,
                                                          int64_t n) {
  REEL_CUDA_GRID_STRIDE(i, n) {
    int64_t off[NOps];
    if (calc.nd == 1) {
#pragma unroll
      for (int k = 0; k < NOps; ++k) off[k] = i * calc.strides[0][k];
    } else {
      calc.get(i, off);
    }
    out[off[0]] = convert<R>(tree.eval(off));
  }
}

template <class T, class F>
__global__ void __launch_bounds__(256) index_fill_kernel(T* p, int64_t n, F f) {
  REEL_CUDA_GRID_STRIDE(i, n) { p[i] = f(i); }
}

// ------------------------------------------------------------------ reductions
// Each kind: Acc (the running value), init / lift (an element at position j of its run) /
// combine (associative and commutative: blocks combine in any order) / finish; identity()
// is the neutral element of combine (the start of a device-wide reduction).
template <class C>
REEL_HD C lowest_value() {
  if constexpr (std::numeric_limits<C>::has_infinity)
    return -std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::lowest();
}
template <class C>
REEL_HD C highest_value() {
  if constexpr (std::numeric_limits<C>::has_infinity)
    return std::numeric_limits<C>::infinity();
  else
    return std::numeric_limits<C>::max();
}
template <RunKind K, class T, class R>
struct RunOp {
  using Acc = compute_t<std::conditional_t<K == RunKind::Max || K == RunKind::Min || K == RunKind::Mean, T, R>>;
  REEL_HD static Acc lift(const T& x, int64_t) { return convert<Acc>(x); }
  REEL_HD static Acc init() {
    if constexpr (K == RunKind::Prod)
      return Acc(1);
    else
      return Acc(0);  // Max/Min start from the run's first element (see first())
  }
  REEL_HD static Acc combine(Acc a, Acc b) {
    if constexpr (K == RunKind::Sum || K == RunKind::Mean) {
      return a + b;
    } else if constexpr (K == RunKind::Prod) {
      return a * b;
    } else {
      if (a != a) return a;  // NaN propagates
      if (b != b) return b;
      if constexpr (K == RunKind::Max)
        return b > a ? b : a;
      else
        return b < a ? b : a;
    }
  }
  REEL_HD static R finish(Acc a, int64_t n) {
    if constexpr (K == RunKind::Mean)
      return convert<R>(a / static_cast<Acc>(n));
    else
      return convert<R>(a);
  }
  REEL_HD static Acc identity() {
    if constexpr (K == RunKind::Max)
      return lowest_value<Acc>();
    else if constexpr (K == RunKind::Min)
      return highest_value<Acc>();
    else
      return init();
  }
  static constexpr bool needs_first = K == RunKind::Max || K == RunKind::Min;
};
// argmax / argmin: (value, position) pairs; the first NaN wins, then the extreme value, ties
// to the smaller position (PyTorch's rule), which is a total order.
template <class C>
struct ValPos {
  C v;
  int64_t i;
};
template <RunKind K, class T, class R>
  requires(K == RunKind::ArgMax || K == RunKind::ArgMin)
struct RunOp<K, T, R> {
  using C = compute_t<T>;
  using Acc = ValPos<C>;
  REEL_HD static Acc lift(const T& x, int64_t j) { return {convert<C>(x), j}; }
  REEL_HD static Acc init() { return {C(0), INT64_MAX}; }  // (never the answer: runs are not empty)
  // Loses to every element: the least extreme value at a position after all others.
  REEL_HD static Acc identity() { return {K == RunKind::ArgMax ? lowest_value<C>() : highest_value<C>(), INT64_MAX}; }
  REEL_HD static Acc combine(Acc a, Acc b) {
    const bool na = a.v != a.v, nb = b.v != b.v;
    if (na || nb) return na && nb ? (a.i < b.i ? a : b) : (na ? a : b);
    if (a.v != b.v) return (K == RunKind::ArgMax ? a.v > b.v : a.v < b.v) ? a : b;
    return a.i < b.i ? a : b;
  }
  REEL_HD static R finish(Acc a, int64_t) { return static_cast<R>(a.i); }
  static constexpr bool needs_first = true;
};

// Reduces one value per thread of the block into thread 0 (blockDim.x a power of two <= 256).
template <class Op, class Acc>
__device__ Acc block_reduce(Acc a) {
  __shared__ alignas(16) unsigned char raw[256 * sizeof(Acc)];
  Acc* sh = reinterpret_cast<Acc*>(raw);
  sh[threadIdx.x] = a;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = Op::combine(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  Acc r = sh[0];
  __syncthreads();  // (sh is reused by the next row)
  return r;
}

// One block per run (rows of a [outer, inner] contiguous array).
template <RunKind K, class T, class R>
__global__ void __launch_bounds__(256) reduce_rows_kernel(const T* src, R* dst, int64_t outer, int64_t inner) {
  using Op = RunOp<K, T, R>;
  using Acc = typename Op::Acc;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = src + row * inner;
    Acc a = Op::needs_first ? Op::lift(p[0], 0) : Op::init();
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) a = Op::combine(a, Op::lift(p[j], j));
    a = block_reduce<Op>(a);
    if (threadIdx.x == 0) dst[row] = Op::finish(a, inner);
  }
}
// One thread per run, for short runs.
template <RunKind K, class T, class R>
__global__ void __launch_bounds__(256) reduce_short_kernel(const T* src, R* dst, int64_t outer, int64_t inner) {
  using Op = RunOp<K, T, R>;
  using Acc = typename Op::Acc;
  REEL_CUDA_GRID_STRIDE(row, outer) {
    const T* p = src + row * inner;
    Acc a = Op::needs_first && inner > 0 ? Op::lift(p[0], 0) : Op::init();
    for (int64_t j = 0; j < inner; ++j) a = Op::combine(a, Op::lift(p[j], j));
    dst[row] = Op::finish(a, inner);
  }
}
// ------------------------------------------------------------------ gather / scatter-add
// Element j of line l: gather o[l, j] = s[l, idx[l, j]] (s lines of n), scatter-add
// o[l, idx[l, j]] += s[l, j] (o lines of n; atomic). An index out of [0, n) is reported
// (device_errors.hpp) and its element skipped.
template <class T> inline constexpr bool atomic_add_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>;
template <LineOp Op, class T>
__global__ void __launch_bounds__(256) gather_lines_kernel(const T* s, const int64_t* idx, T* o, int64_t k, int64_t n,
                                                          int64_t total, DeviceErrorRecord* err) {
  REEL_CUDA_GRID_STRIDE(e, total) {
    const int64_t l = e / k, i = idx[e];
    if (i < 0 || i >= n) {
      report_device_error(err,
                          Op == LineOp::Gather       ? DeviceErrorSite::Gather
                          : Op == LineOp::ScatterAdd ? DeviceErrorSite::ScatterAdd
                                                     : DeviceErrorSite::Scatter,
                          i, n);
      continue;
    }
    if constexpr (Op == LineOp::Scatter) {
      o[l * n + i] = s[e];
    } else if constexpr (Op == LineOp::ScatterAdd) {
      if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>)
        atomicAdd(reinterpret_cast<unsigned long long*>(o + l * n + i), static_cast<unsigned long long>(s[e]));
      else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, uint32_t> || std::is_floating_point_v<T>)
        atomicAdd(o + l * n + i, s[e]);
    } else {
      o[e] = s[l * n + i];
    }
  }
}

// Element j of a run, lifted (the input of a device-wide reduction), and the result written.
template <RunKind K, class T, class R>
struct LiftAt {
  const T* src;
  REEL_HD typename RunOp<K, T, R>::Acc operator()(int64_t j) const { return RunOp<K, T, R>::lift(src[j], j); }
};
template <RunKind K, class T, class R>
struct Finish {
  int64_t n;
  REEL_HD R operator()(const typename RunOp<K, T, R>::Acc& a) const { return RunOp<K, T, R>::finish(a, n); }
};
template <RunKind K, class T, class R>
struct Combine {
  using Acc = typename RunOp<K, T, R>::Acc;
  REEL_HD Acc operator()(Acc a, Acc b) const { return RunOp<K, T, R>::combine(a, b); }
};

// ------------------------------------------------------------------ Thrust
// Thrust allocates its algorithms' scratch with cudaMalloc / cudaFree unless given an
// allocator; cudaFree synchronizes the device and both bypass the cache. This one takes the
// scratch from the caching allocator on the current stream: a block freed as the call returns
// goes back to that stream's list, where only later work on the stream can get it.
struct ThrustScratch {
  using value_type = char;
  std::vector<std::shared_ptr<Storage>> held;
  char* allocate(std::ptrdiff_t n) {
    held.push_back(make_device_storage(static_cast<size_t>(n)));
    return static_cast<char*>(held.back()->data);
  }
  void deallocate(char* p, size_t) {
    for (auto& h : held)
      if (h && h->data == p) {
        h.reset();
        return;
      }
  }
};

// ------------------------------------------------------------------ sort
// "a goes before b": NaN is the largest value (last ascending, first descending), as on the CPU.
template <class T>
struct NanOrder {
  bool descending;
  using C = compute_t<T>;
  REEL_HD static bool greater(C a, C b) {
    if (is_nan(a)) return !is_nan(b);
    if (is_nan(b)) return false;
    return a > b;
  }
  REEL_HD bool operator()(const T& a, const T& b) const {
    const C x = convert<C>(a), y = convert<C>(b);
    return descending ? greater(x, y) : greater(y, x);
  }
};
struct DivBy {
  int64_t n;
  REEL_HD int64_t operator()(int64_t i) const { return i / n; }
};
struct ModBy {
  int64_t n;
  REEL_HD int64_t operator()(int64_t i) const { return i % n; }
};
template <class To>
struct ConvertTo {
  template <class X>
  REEL_HD To operator()(const X& x) const {
    return convert<To>(x);
  }
};

}  // namespace detail::cuda
}  // namespace reel

#include "ir_eval.cuh"  // autograd's graphs on the GPU

namespace reel::inline REEL_ABI {
// ------------------------------------------------------------------ the engine's CUDA backend
namespace detail {
// Part of Backend<CUDA> (core/backend.hpp, assembled in <cuda.hpp>).
struct CudaCoreKernels {
  static constexpr bool has_data = true, host_memory = false;
  static std::shared_ptr<Storage> make_storage(size_t nbytes) { return cuda::make_device_storage(nbytes); }

  // Autograd: where CUDA graphs are evaluated, and each op's device function (ir_eval.cuh).
  static const ir::IrDevice* ir_device() {
    static const ir::IrDevice d{DeviceType::CUDA, &cuda::ir_storage, &cuda::ir_evaluate};
    return &d;
  }
  template <class Op, class C, size_t N>
  static const void* ir_op_fn() {
    return cuda::ir_op_fn<Op, C, N>();
  }

  template <class R, class E>
  static void eval_into(const Tensor<R, CUDA>& out, const E& e) {
    constexpr int NOps = 1 + leaf_count_v<E>;
    Operands ops;
    ops.add(out.mutable_data_ptr(), out.sizes(), out.strides());
    collect_leaves(e, ops);
    IterPlan plan;
    plan_iteration(ops, plan);
    auto calc = make_offset_calc<NOps>(plan);
    auto tree = cuda::device_tree<1>(e);
    const Launch1D l = launch_1d(plan.numel);
    if (l.blocks == 0) return;
    cuda::elementwise_kernel<R, decltype(tree), NOps>
        <<<static_cast<unsigned>(l.blocks), l.threads, 0, cuda::current_stream()>>>(out.mutable_data_ptr(), tree, calc, plan.numel);
    REEL_CUDA_CHECK_LAUNCH("elementwise_kernel");
  }

  // p[i] = f(i) for i < n (f is a __host__ __device__ function object).
  template <class T, class F>
  static void fill_by_index(T* p, int64_t n, const F& f) {
    static_assert(!__nv_is_extended_host_device_lambda_closure_type(F),
                  "reel: fill_by_index takes a named function object, not a __host__ __device__ lambda (nvcc keeps "
                  "such a lambda's wrapper per translation unit: see reel::detail::fill_by_index)");
    const Launch1D l = launch_1d(n);
    if (l.blocks == 0) return;
    cuda::index_fill_kernel<<<static_cast<unsigned>(l.blocks), l.threads, 0, cuda::current_stream()>>>(p, n, f);
    REEL_CUDA_CHECK_LAUNCH("index_fill_kernel");
  }

  // dst[r] = reduction of src[r * inner, (r + 1) * inner) for r < outer (src contiguous).
  template <RunKind K, class T, class R>
  static void reduce_runs(const T* src, R* dst, int64_t outer, int64_t inner) {
    if (outer == 0) return;
    cudaStream_t s = cuda::current_stream();
    using Op = cuda::RunOp<K, T, R>;
    if (outer == 1 && inner >= (int64_t(1) << 16)) {
      // One long run: CUB's device-wide reduction over all SMs, finished and written into dst
      // on the device (no copy to the host, no synchronization). Its scratch comes from the
      // caching allocator, freed to this stream's list once the work is queued.
      auto in = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), cuda::LiftAt<K, T, R>{src});
      auto out = thrust::make_transform_output_iterator(dst, cuda::Finish<K, T, R>{inner});
      size_t bytes = 0;
      REEL_CUDA_CHECK(cub::DeviceReduce::Reduce(nullptr, bytes, in, out, inner, cuda::Combine<K, T, R>{}, Op::identity(), s));
      auto scratch = cuda::make_device_storage(bytes);
      REEL_CUDA_CHECK(
          cub::DeviceReduce::Reduce(scratch->data, bytes, in, out, inner, cuda::Combine<K, T, R>{}, Op::identity(), s));
      return;
    }
    if (inner < 64) {
      const Launch1D l = launch_1d(outer, 256, 1);
      cuda::reduce_short_kernel<K, T, R><<<static_cast<unsigned>(l.blocks), l.threads, 0, s>>>(src, dst, outer, inner);
      REEL_CUDA_CHECK_LAUNCH("reduce_short_kernel");
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer, kMaxBlocks));
      cuda::reduce_rows_kernel<K, T, R><<<blocks, 256, 0, s>>>(src, dst, outer, inner);
      REEL_CUDA_CHECK_LAUNCH("reduce_rows_kernel");
    }
  }

  // gather / scatter-add / scatter (LineOp) of `lines` lines: k indices per line, lines of
  // n elements on the indexed side. An out-of-range index raises index_error at the next
  // synchronization (device_errors.hpp): checking it here would wait for the GPU.
  template <LineOp Op, class T>
  static void gather_lines(const T* s, const int64_t* idx, T* o, int64_t lines, int64_t k, int64_t n) {
    if constexpr (Op == LineOp::ScatterAdd && !cuda::atomic_add_v<T>) {
      raise<not_implemented_error>("scatter_add (and gather's backward): not implemented for ",
                                   dtype_name(scalar_type_v<T>), " CUDA tensors yet");
    } else {
      const int64_t total = lines * k;
      if (total == 0) return;
      const Launch1D l = launch_1d(total);
      cuda::gather_lines_kernel<Op><<<static_cast<unsigned>(l.blocks), l.threads, 0, cuda::current_stream()>>>(
          s, idx, o, k, n, total, cuda::device_error_record());
      REEL_CUDA_CHECK_LAUNCH("gather_lines_kernel");
    }
  }

  // dst = the running sums (products with Prod) of each of `lines` contiguous lines of n
  // elements of src, in R's compute type (a segmented scan: the key of element i is i / n).
  template <bool Prod, class T, class R>
  static void scan_lines(const T* src, R* dst, int64_t lines, int64_t n) {
    const int64_t total = lines * n;
    if (total == 0) return;
    using C = compute_t<R>;
    auto keys = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), cuda::DivBy{n});
    auto in = thrust::make_transform_iterator(src, cuda::ConvertTo<C>{});
    auto out = thrust::make_transform_output_iterator(dst, cuda::ConvertTo<R>{});
    cuda::ThrustScratch scratch;
    auto policy = thrust::cuda::par(scratch).on(cuda::current_stream());
    if constexpr (Prod)
      thrust::inclusive_scan_by_key(policy, keys, keys + total, in, out, thrust::equal_to<int64_t>(), thrust::multiplies<C>());
    else
      thrust::inclusive_scan_by_key(policy, keys, keys + total, in, out);
    REEL_CUDA_CHECK_LAUNCH("thrust inclusive_scan_by_key");
  }

  // Sorts each of `lines` contiguous lines of n elements of src stably into vals, with each
  // value's position in its line in idx. One global stable sort by value over positions,
  // then a stable (radix) sort by line regroups the lines without disturbing value order.
  template <class T>
  static void sort_lines(const T* src, T* vals, int64_t* idx, int64_t lines, int64_t n, bool descending) {
    const int64_t total = lines * n;
    if (total == 0) return;
    cudaStream_t s = cuda::current_stream();
    cuda::ThrustScratch scratch;
    auto policy = thrust::cuda::par(scratch).on(s);
    REEL_CUDA_CHECK(cudaMemcpyAsync(vals, src, static_cast<size_t>(total) * sizeof(T), cudaMemcpyDeviceToDevice, s));
    thrust::sequence(policy, idx, idx + total);
    thrust::stable_sort_by_key(policy, vals, vals + total, idx, cuda::NanOrder<T>{descending});
    if (lines > 1) {
      auto keys = make_tensor<int64_t, CUDA>({total});
      int64_t* kp = keys.mutable_data_ptr();
      thrust::transform(policy, idx, idx + total, kp, cuda::DivBy{n});
      thrust::stable_sort_by_key(policy, kp, kp + total, thrust::make_zip_iterator(thrust::make_tuple(vals, idx)));
    }
    thrust::transform(policy, idx, idx + total, idx, cuda::ModBy{n});
    REEL_CUDA_CHECK_LAUNCH("thrust sort");
  }

  // A contiguous copy of a contiguous tensor on the other device (CPU <-> CUDA).
  template <class T, class D2, class D>
  static Tensor<T, D2> copy_between(const Tensor<T, D>& src) {
    static_assert((std::is_same_v<D, CPU> && std::is_same_v<D2, CUDA>) || (std::is_same_v<D, CUDA> && std::is_same_v<D2, CPU>),
                  "reel: to_device copies between the CPU and CUDA");
    auto out = make_tensor<T, D2>(src.sizes());
    const size_t n = static_cast<size_t>(src.numel()) * sizeof(T);
    cuda::copy_bytes(out.mutable_data_ptr(), src.data_ptr(), n,
                     std::is_same_v<D2, CUDA> ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    return out;
  }
};
}  // namespace detail
}  // namespace reel
