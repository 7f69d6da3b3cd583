#pragma once
// Multi-tensor apply on CUDA: one kernel launch updates many tensors (PyTorch's
// multi_tensor_apply). A list of N pointer lists (e.g. param, grad, exp_avg, exp_avg_sq) is cut
// into chunks by reel/cuda/mta_plan.hpp; each block handles one chunk of one tensor, so a
// thousand small parameters cost a few launches instead of thousands.
//
// Used by
//  - foreach ops (Backend<CUDA>::foreach_run): the contiguous tensors autograd has no stake in,
//  - the fused optimizer steps (Backend<CUDA>::sgd / adam): SGD, Adam and AdamW in one pass over
//    parameters, gradients and state.
// Elements are float, double, half or bfloat16; half and bfloat16 are computed in float and
// rounded once when stored. Arithmetic goes through rn<C>, whose operators are the
// round-to-nearest intrinsics: nvcc would otherwise contract a * b + c into one FMA, and the
// results would no longer match the CPU (Eigen, which does not contract) to the last bit.
#include "../core/config.hpp"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "../foreach.hpp"
#include "../optim/optimizers.hpp"
#include "mta_plan.hpp"
#include "check.hpp"
#include "runtime.hpp"

namespace reel::inline REEL_ABI {
namespace detail::cuda::mt {

inline constexpr int kThreads = 512;  // threads per block: 128 elements each for a 64 Ki chunk

// ---- element types: storage as seen by the kernel, and the conversions to the compute type
template <class T> struct Elem;
template <> struct Elem<float> {
  using St = float;
  static __device__ __forceinline__ float in(St x) { return x; }
  static __device__ __forceinline__ St out(float x) { return x; }
};
template <> struct Elem<double> {
  using St = double;
  static __device__ __forceinline__ double in(St x) { return x; }
  static __device__ __forceinline__ St out(double x) { return x; }
};
// (raw bits, converted with the CUDA intrinsics: round to nearest even, as Eigen's types do)
template <> struct Elem<reel::half> {
  using St = unsigned short;
  static __device__ __forceinline__ float in(St x) { return __half2float(__ushort_as_half(x)); }
  static __device__ __forceinline__ St out(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <> struct Elem<reel::bfloat16> {
  using St = unsigned short;
  static __device__ __forceinline__ float in(St x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
  static __device__ __forceinline__ St out(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
static_assert(sizeof(reel::half) == 2 && sizeof(reel::bfloat16) == 2);
template <class T>
inline constexpr bool supported_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                    std::is_same_v<T, reel::half> || std::is_same_v<T, reel::bfloat16>;

// ---- uncontracted arithmetic (see the top of the file)
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float exp_(float a) { return ::expf(a); }
__device__ __forceinline__ double exp_(double a) { return ::exp(a); }
__device__ __forceinline__ float abs_(float a) { return ::fabsf(a); }
__device__ __forceinline__ double abs_(double a) { return ::fabs(a); }

template <class C>
struct rn {
  C v;
  __device__ __forceinline__ rn(C x) : v(x) {}
  friend __device__ __forceinline__ rn operator+(rn a, rn b) { return add_rn(a.v, b.v); }
  friend __device__ __forceinline__ rn operator-(rn a, rn b) { return sub_rn(a.v, b.v); }
  friend __device__ __forceinline__ rn operator*(rn a, rn b) { return mul_rn(a.v, b.v); }
  friend __device__ __forceinline__ rn operator/(rn a, rn b) { return div_rn(a.v, b.v); }
  friend __device__ __forceinline__ rn operator-(rn a) { return -a.v; }
};
template <class C> __device__ __forceinline__ rn<C> sqrt(rn<C> x) { return sqrt_rn(x.v); }
template <class C> __device__ __forceinline__ rn<C> exp(rn<C> x) { return exp_(x.v); }
template <class C> __device__ __forceinline__ rn<C> abs(rn<C> x) { return abs_(x.v); }
template <class C> __device__ __forceinline__ bool isnan(rn<C> x) { return x.v != x.v; }
// NaN-propagating maximum / minimum (torch.maximum; foreach.hpp's fe::maximum).
template <class C> __device__ __forceinline__ rn<C> maximum(rn<C> x, rn<C> o) { return isnan(x) || x.v > o.v ? x : o; }
template <class C> __device__ __forceinline__ rn<C> minimum(rn<C> x, rn<C> o) { return isnan(x) || x.v < o.v ? x : o; }
// torch.lerp, as fe::lerp: s + w (e - s) where |w| < 0.5, else e - (e - s)(1 - w)
template <class C> __device__ __forceinline__ rn<C> lerp(rn<C> s, rn<C> e, rn<C> w) {
  return abs_(w.v) < C(0.5) ? s + w * (e - s) : e - (e - s) * (rn<C>(C(1)) - w);
}

// ---- the kernel
template <class S, int W>
struct alignas(16) Pack {
  S e[W];
};

// An op is a trivially copyable struct with
//   static constexpr int depth;                    the number of pointer lists N
//   static constexpr unsigned read_mask, write_mask; bit k: list k is loaded / stored
//   __device__ void operator()(C* r, const double* slot_scalars) const;
// which updates one element: r[k] is list k's value in the compute type C (float for half and
// bfloat16), slot_scalars the per-tensor scalars of the element's tensor. Lists outside
// read_mask arrive as 0; lists in write_mask must be assigned.
template <class T, class Op, int N>
__device__ __forceinline__ void apply_one(const Op& op, typename Elem<T>::St (&x)[N], const double* sc) {
  using C = compute_t<T>;
  C r[N];
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = (Op::read_mask >> k & 1u) ? Elem<T>::in(x[k]) : C(0);
  op(r, sc);
#pragma unroll
  for (int k = 0; k < N; ++k)
    if (Op::write_mask >> k & 1u) x[k] = Elem<T>::out(r[k]);
}

// Block b: elements [chunk * chunk_size, +chunk_size) of its slot's tensor, in 16-byte vectors
// when every list's pointer is 16-byte aligned there, element by element otherwise (and for
// the tail). All indices are 64-bit.
template <class T, class Op, int N, int S>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(const __grid_constant__ mta::ListMeta<N, S> args,
                                                                int64_t chunk_size, Op op) {
  using St = typename Elem<T>::St;
  constexpr int W = 16 / sizeof(St);
  using P = Pack<St, W>;
  const int slot = args.block_slot[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(args.block_chunk[blockIdx.x]) * chunk_size;
  const int64_t rest = args.numel[slot] - begin;
  const int64_t len = rest < chunk_size ? rest : chunk_size;
  St* p[N];
  bool aligned = true;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    p[k] = static_cast<St*>(args.ptr[k][slot]) + begin;
    aligned = aligned && reinterpret_cast<uintptr_t>(p[k]) % 16 == 0;
  }
  double sc[S > 0 ? S : 1] = {};
  if constexpr (S > 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) sc[s] = args.scalar[s][slot];
  }
  int64_t head = 0;
  if (aligned) {
    const int64_t nv = len / W;
    for (int64_t v = threadIdx.x; v < nv; v += kThreads) {
      P pk[N];
#pragma unroll
      for (int k = 0; k < N; ++k)
        if (Op::read_mask >> k & 1u) pk[k] = reinterpret_cast<const P*>(p[k])[v];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        St x[N];
#pragma unroll
        for (int k = 0; k < N; ++k) x[k] = (Op::read_mask >> k & 1u) ? pk[k].e[j] : St();
        apply_one<T>(op, x, sc);
#pragma unroll
        for (int k = 0; k < N; ++k)
          if (Op::write_mask >> k & 1u) pk[k].e[j] = x[k];
      }
#pragma unroll
      for (int k = 0; k < N; ++k)
        if (Op::write_mask >> k & 1u) reinterpret_cast<P*>(p[k])[v] = pk[k];
    }
    head = nv * W;
  }
  for (int64_t i = head + threadIdx.x; i < len; i += kThreads) {
    St x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = (Op::read_mask >> k & 1u) ? p[k][i] : St();
    apply_one<T>(op, x, sc);
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (Op::write_mask >> k & 1u) p[k][i] = x[k];
  }
}

// The tensors of one multi-tensor apply: per tensor its element count, its pointer in each of
// the N lists, and S scalars.
template <int N, int S = 0>
struct Work {
  std::vector<int64_t> numel;
  std::vector<std::array<void*, N>> ptr;
  std::vector<std::array<double, S>> scalar;
  void reserve(size_t n) {
    numel.reserve(n);
    ptr.reserve(n);
    scalar.reserve(n);
  }
  void add(int64_t n, const std::array<void*, N>& p, const std::array<double, S>& s = {}) {
    numel.push_back(n);
    ptr.push_back(p);
    scalar.push_back(s);
  }
};

// Runs op over every element of every tensor of w (tensors of element type T), on the
// current stream, in as many launches as the plan needs.
template <class T, class Op, int N, int S>
void multi_tensor_apply(const Work<N, S>& w, const Op& op, int64_t chunk_size = mta::kChunkSize) {
  using Args = mta::ListMeta<N, S>;
  static_assert(Op::depth == N, "multi_tensor_apply: the op and the work have different numbers of lists");
  static_assert(supported_v<T>, "multi_tensor_apply: float, double, half or bfloat16 elements");
  static_assert(std::is_trivially_copyable_v<Op>, "multi_tensor_apply: the op is a kernel argument");
  static_assert(sizeof(Args) + sizeof(int64_t) + sizeof(Op) <= mta::kParamLimit,
                "multi_tensor_apply: the kernel arguments exceed the 4 KiB parameter limit");
  const auto launches = mta::plan(w.numel, chunk_size, Args::kMaxTensors, Args::kMaxBlocks);
  if (launches.empty()) return;
  cudaStream_t stream = current_stream();
  Args args{};
  for (const auto& l : launches) {
    for (size_t s = 0; s < l.slot_tensor.size(); ++s) {
      const size_t t = l.slot_tensor[s];
      for (int k = 0; k < N; ++k) args.ptr[k][s] = w.ptr[t][k];
      args.numel[s] = w.numel[t];
      if constexpr (S > 0)
        for (int j = 0; j < S; ++j) args.scalar[j][s] = w.scalar[t][j];
    }
    std::copy(l.block_slot.begin(), l.block_slot.end(), args.block_slot);
    std::copy(l.block_chunk.begin(), l.block_chunk.end(), args.block_chunk);
    multi_tensor_kernel<T, Op, N, S><<<static_cast<unsigned>(l.blocks()), kThreads, 0, stream>>>(args, chunk_size, op);
    REEL_CUDA_CHECK_LAUNCH("multi_tensor_kernel");
  }
}

// ------------------------------------------------------------------ foreach
// The device body of each foreach definition (foreach.hpp's REEL_FOREACH_DEF), over rn<C>,
// in the same order of operations.
#define REEL_MT_BODY(NAME, ...)                                                        \
  struct NAME##_body {                                                                  \
    template <class X, class... A>                                                      \
    __device__ __forceinline__ X operator()(X s, A... a) const { __VA_ARGS__; }         \
  };
REEL_MT_BODY(add, return (s + ... + a))
REEL_MT_BODY(sub, return (s - ... - a))
REEL_MT_BODY(mul, return (s * ... * a))
REEL_MT_BODY(div, return (s / ... / a))
REEL_MT_BODY(maximum, return maximum(s, a...))
REEL_MT_BODY(minimum, return minimum(s, a...))
REEL_MT_BODY(sqrt, return sqrt(s))
REEL_MT_BODY(exp, return exp(s))
REEL_MT_BODY(abs, return abs(s))
REEL_MT_BODY(neg, return -s)
REEL_MT_BODY(reciprocal, return X(decltype(s.v)(1)) / s)
REEL_MT_BODY(copy, return (a, ...))
REEL_MT_BODY(addcmul, return [](X s, X t1, X t2, X v) { return s + v * t1 * t2; }(s, a...))
REEL_MT_BODY(addcdiv, return [](X s, X t1, X t2, X v) { return s + v * t1 / t2; }(s, a...))
REEL_MT_BODY(lerp, return lerp(s, a...))
#undef REEL_MT_BODY

template <class Def> struct body_of {
  static constexpr bool value = false;
};
#define REEL_MT_MAP(DEF, BODY)                \
  template <> struct body_of<fe::DEF##_def> { \
    static constexpr bool value = true;       \
    using type = BODY##_body;                 \
  };
REEL_MT_MAP(add, add)
REEL_MT_MAP(sub, sub)
REEL_MT_MAP(mul, mul)
REEL_MT_MAP(div, div)
REEL_MT_MAP(maximum, maximum)
REEL_MT_MAP(minimum, minimum)
REEL_MT_MAP(clamp_min, maximum)
REEL_MT_MAP(clamp_max, minimum)
REEL_MT_MAP(sqrt, sqrt)
REEL_MT_MAP(exp, exp)
REEL_MT_MAP(abs, abs)
REEL_MT_MAP(neg, neg)
REEL_MT_MAP(reciprocal, reciprocal)
REEL_MT_MAP(copy, copy)
REEL_MT_MAP(addcmul, addcmul)
REEL_MT_MAP(addcdiv, addcdiv)
REEL_MT_MAP(lerp, lerp)
#undef REEL_MT_MAP

// How a foreach argument reaches the kernel: a tensor list is a pointer list (times its alpha,
// as fe::ListArg::eigen computes it), a scalar is a kernel argument, a per-tensor scalar is a
// slot scalar.
enum class ArgKind { List, Scalar, Slot };
template <class A> struct arg_kind;
template <class T, class D> struct arg_kind<fe::ListArg<T, D>> {
  static constexpr ArgKind value = ArgKind::List;
};
template <class T> struct arg_kind<fe::ScalarArg<T>> {
  static constexpr ArgKind value = ArgKind::Scalar;
};
template <class T> struct arg_kind<fe::ScalarListArg<T>> {
  static constexpr ArgKind value = ArgKind::Slot;
};

// out = Body(self, args...). Lists: [out,] self, then the list arguments in order.
template <class C, class Body, bool InPlace, ArgKind... K>
struct ForeachOp {
  static constexpr int first_arg = InPlace ? 1 : 2;
  static constexpr int depth = first_arg + ((K == ArgKind::List ? 1 : 0) + ... + 0);
  static constexpr int slot_scalars = ((K == ArgKind::Slot ? 1 : 0) + ... + 0);
  static constexpr unsigned write_mask = 1u;
  static constexpr unsigned read_mask = ((1u << depth) - 1u) & (InPlace ? ~0u : ~1u);
  C v[sizeof...(K) + 1];  // argument j's alpha (list) or value (scalar); (+1: never empty)

  static constexpr ArgKind kind(int j) {
    constexpr ArgKind k[] = {K..., ArgKind::Scalar};
    return k[j];
  }
  static constexpr int list_pos(int j) {  // the pointer list of argument j
    int p = first_arg;
    for (int i = 0; i < j; ++i) p += kind(i) == ArgKind::List;
    return p;
  }
  static constexpr int slot_pos(int j) {
    int p = 0;
    for (int i = 0; i < j; ++i) p += kind(i) == ArgKind::Slot;
    return p;
  }
  template <int J>
  __device__ __forceinline__ rn<C> arg(const C* r, const double* sc) const {
    if constexpr (kind(J) == ArgKind::List)
      return rn<C>(r[list_pos(J)]) * rn<C>(v[J]);  // (alpha == 1 multiplies exactly)
    else if constexpr (kind(J) == ArgKind::Scalar)
      return rn<C>(v[J]);
    else
      return rn<C>(static_cast<C>(sc[slot_pos(J)]));
  }
  template <int... J>
  __device__ __forceinline__ void call(C* r, const double* sc, std::integer_sequence<int, J...>) const {
    r[0] = Body{}(rn<C>(r[first_arg - 1]), arg<J>(r, sc)...).v;
  }
  __device__ __forceinline__ void operator()(C* r, const double* sc) const {
    call(r, sc, std::make_integer_sequence<int, sizeof...(K)>{});
  }
};

struct ZeroOp {
  static constexpr int depth = 1;
  static constexpr unsigned read_mask = 0u, write_mask = 1u;
  template <class C> __device__ __forceinline__ void operator()(C* r, const double*) const { r[0] = C(0); }
};

// ------------------------------------------------------------------ fused optimizer steps
// SGD (PyTorch's _multi_tensor_sgd, one pass). Lists: param, grad[, momentum_buffer]; slot
// scalar (with momentum): 1 where the buffer is new this step (it starts as the gradient).
template <class C, bool Momentum>
struct SgdOp {
  static constexpr int depth = Momentum ? 3 : 2;
  static constexpr unsigned read_mask = Momentum ? 0b111u : 0b11u, write_mask = Momentum ? 0b101u : 0b1u;
  C neg_lr, weight_decay, momentum, damp;  // damp = 1 - dampening
  bool maximize, nesterov;
  __device__ __forceinline__ void operator()(C* r, const double* sc) const {
    using X = rn<C>;
    X p = r[0], g = r[1];
    if (maximize) g = -g;
    if (weight_decay != C(0)) g = g + p * X(weight_decay);
    if constexpr (Momentum) {
      X b = r[2];  // (garbage where new: not read then)
      if (sc[0] != 0)
        b = g;
      else
        b = b * X(momentum) + g * X(damp);
      r[2] = b.v;
      g = nesterov ? g + b * X(momentum) : b;
    }
    r[0] = (p + g * X(neg_lr)).v;
  }
};

// adam_rule's operations on one element (rn: each operation rounded on its own).
struct RnAdamOps {
  template <class C> __device__ __forceinline__ static void lerp_(rn<C>& m, rn<C> e, C w) { m = lerp(m, e, rn<C>(w)); }
  template <class C> __device__ __forceinline__ static rn<C> maximum(rn<C> a, rn<C> b) { return mt::maximum(a, b); }
  template <class C> __device__ __forceinline__ static rn<C> sqrt(rn<C> a) { return mt::sqrt(a); }
};

// Adam / AdamW: optim/adam_rule.hpp's update (PyTorch's _multi_tensor_adam sequence).
// Lists: param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]; slot scalars: step_size
// (-lr / bias_correction1) and sqrt(bias_correction2), per parameter because step counts may
// differ (a parameter that had no gradient on some steps).
template <class C, bool Amsgrad>
struct AdamOp {
  static constexpr int depth = Amsgrad ? 5 : 4;
  static constexpr unsigned read_mask = (1u << depth) - 1u, write_mask = read_mask & ~0b10u;
  optim::detail::AdamCoeffs<C> k;
  __device__ __forceinline__ void operator()(C* r, const double* sc) const {
    using X = rn<C>;
    X p = r[0], g = r[1], m = r[2], v = r[3], mx = Amsgrad ? r[depth - 1] : C(0), den = C(0);
    optim::detail::adam_rule<RnAdamOps>(k, static_cast<C>(sc[0]), static_cast<C>(sc[1]), p, g, m, v,
                                        Amsgrad ? &mx : nullptr, den);
    r[0] = p.v;
    r[2] = m.v;
    r[3] = v.v;
    if constexpr (Amsgrad) r[depth - 1] = mx.v;
  }
};

}  // namespace detail::cuda::mt

// ------------------------------------------------------------------ what Backend<CUDA> offers foreach and optim
namespace detail {

// Parts of Backend<CUDA> (core/backend.hpp, assembled in <cuda.hpp>).
struct CudaForeachKernels {
  // Whether op Def on tensors of type T has a multi-tensor kernel.
  template <class Def, class T>
  static constexpr bool foreach_supports = cuda::mt::supported_v<T> && cuda::mt::body_of<Def>::value;

  // out[i] = Def(self[i], args[i]...) for i in idx (contiguous tensors; outs allocated by the
  // caller unless InPlace, where self is written).
  template <class Def, bool InPlace, class T, class... A>
  static void foreach_run(const std::vector<size_t>& idx, fe::TensorList<T, CUDA> self, const std::vector<Tensor<T, CUDA>>& outs,
                  const A&... args) {
    using Op = cuda::mt::ForeachOp<compute_t<T>, typename cuda::mt::body_of<Def>::type, InPlace,
                                   cuda::mt::arg_kind<A>::value...>;
    constexpr int N = Op::depth, S = Op::slot_scalars;
    Op op{};
    {
      int j = 0;
      auto value = [&](const auto& a) {
        using AK = std::decay_t<decltype(a)>;
        if constexpr (cuda::mt::arg_kind<AK>::value == cuda::mt::ArgKind::List)
          op.v[j] = static_cast<compute_t<T>>(a.alpha);
        else if constexpr (cuda::mt::arg_kind<AK>::value == cuda::mt::ArgKind::Scalar)
          op.v[j] = static_cast<compute_t<T>>(a.v);
        ++j;
      };
      (value(args), ...);
    }
    cuda::mt::Work<N, S> w;
    w.reserve(idx.size());
    for (size_t i : idx) {
      std::array<void*, N> p{};
      std::array<double, S> s{};
      int k = 0, q = 0;
      if constexpr (!InPlace) p[k++] = outs[i].mutable_data_ptr();
      p[k++] = self[i].mutable_data_ptr();
      auto add = [&](const auto& a) {
        using AK = std::decay_t<decltype(a)>;
        if constexpr (cuda::mt::arg_kind<AK>::value == cuda::mt::ArgKind::List)
          p[k++] = a.l[i].mutable_data_ptr();
        else if constexpr (cuda::mt::arg_kind<AK>::value == cuda::mt::ArgKind::Slot)
          s[q++] = a.v[i];
      };
      (add(args), ...);
      w.add(self[i].numel(), p, s);
    }
    cuda::mt::multi_tensor_apply<T>(w, op);
  }

  template <class T>
  static constexpr bool foreach_zero_supports = cuda::mt::supported_v<T>;
  template <class T>
  static void foreach_zero(const std::vector<size_t>& idx, fe::TensorList<T, CUDA> self) {
    cuda::mt::Work<1> w;
    w.reserve(idx.size());
    for (size_t i : idx) w.add(self[i].numel(), {self[i].mutable_data_ptr()});
    cuda::mt::multi_tensor_apply<T>(w, cuda::mt::ZeroOp{});
  }
};

struct CudaOptimKernels {
  // One fused SGD step for the group; false (nothing done) when some tensor is not eligible
  // (not contiguous, or autograd has a stake in it), leaving it to the foreach composition.
  template <class T>
  static bool sgd(const optim::SGDOptions& o, const std::vector<Tensor<T, CUDA>>& params,
                  const std::vector<Tensor<T, CUDA>>& grads, const std::vector<optim::detail::SGDState<T, CUDA>*>& states) {
    if constexpr (!cuda::mt::supported_v<T>) {
      return false;
    } else {
      using fe::fast_ok;
      const bool momentum = o.momentum() != 0;
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& b = states[i]->momentum_buffer;
        if (!fast_ok(params[i].impl(), true) || !fast_ok(grads[i].impl(), false) ||
            (momentum && b.defined() && !fast_ok(b.impl(), true)))
          return false;
      }
      using C = compute_t<T>;
      auto fill = [&](auto op) {
        op.neg_lr = static_cast<C>(-o.lr());
        op.weight_decay = static_cast<C>(o.weight_decay());
        op.momentum = static_cast<C>(o.momentum());
        op.damp = static_cast<C>(1 - o.dampening());
        op.maximize = o.maximize();
        op.nesterov = o.nesterov();
        return op;
      };
      if (momentum) {
        cuda::mt::Work<3, 1> w;
        w.reserve(params.size());
        for (size_t i = 0; i < params.size(); ++i) {
          auto& b = states[i]->momentum_buffer;
          const bool fresh = !b.defined();
          if (fresh) b = empty_like(params[i]);  // (written with the gradient by the kernel)
          w.add(params[i].numel(), {params[i].mutable_data_ptr(), grads[i].mutable_data_ptr(), b.mutable_data_ptr()},
                {fresh ? 1.0 : 0.0});
        }
        cuda::mt::multi_tensor_apply<T>(w, fill(cuda::mt::SgdOp<C, true>{}));
      } else {
        cuda::mt::Work<2> w;
        w.reserve(params.size());
        for (size_t i = 0; i < params.size(); ++i)
          w.add(params[i].numel(), {params[i].mutable_data_ptr(), grads[i].mutable_data_ptr()});
        cuda::mt::multi_tensor_apply<T>(w, fill(cuda::mt::SgdOp<C, false>{}));
      }
      for (size_t i = 0; i < params.size(); ++i) {
        ++states[i]->step;
        params[i].bump_version();
        if (momentum) states[i]->momentum_buffer.bump_version();
      }
      return true;
    }
  }

  // One fused Adam / AdamW step (the caller has created the state and advanced the steps);
  // false when some tensor is not eligible, as for sgd.
  template <class T>
  static bool adam(const optim::AdamOptions& o, bool decoupled, const std::vector<Tensor<T, CUDA>>& params,
                   const std::vector<Tensor<T, CUDA>>& grads, const std::vector<optim::detail::AdamState<T, CUDA>*>& states,
                   const std::vector<double>& step_size, const std::vector<double>& bc2_sqrt) {
    if constexpr (!cuda::mt::supported_v<T>) {
      return false;
    } else {
      if (!optim::detail::adam_fusable(o, params, grads, states)) return false;
      using C = compute_t<T>;
      auto fill = [&](auto op) {
        op.k = optim::detail::adam_coeffs<C>(o, decoupled);
        return op;
      };
      auto run = [&](auto op, auto work) {
        work.reserve(params.size());
        for (size_t i = 0; i < params.size(); ++i) {
          auto& s = *states[i];
          std::array<void*, decltype(op)::depth> p{};
          p[0] = params[i].mutable_data_ptr();
          p[1] = grads[i].mutable_data_ptr();
          p[2] = s.exp_avg.mutable_data_ptr();
          p[3] = s.exp_avg_sq.mutable_data_ptr();
          if constexpr (decltype(op)::depth == 5) p[4] = s.max_exp_avg_sq.mutable_data_ptr();
          work.add(params[i].numel(), p, {step_size[i], bc2_sqrt[i]});
        }
        cuda::mt::multi_tensor_apply<T>(work, op);
      };
      if (o.amsgrad())
        run(fill(cuda::mt::AdamOp<C, true>{}), cuda::mt::Work<5, 2>{});
      else
        run(fill(cuda::mt::AdamOp<C, false>{}), cuda::mt::Work<4, 2>{});
      optim::detail::bump_adam_versions(o, params, states);
      return true;
    }
  }
};

}  // namespace detail
}  // namespace reel
