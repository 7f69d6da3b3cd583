#pragma once
// FP8 / FP4 scaled GEMMs on CUDA through cuBLASLt (nn::functional::scaled_mm, scaled_addmm,
// scaled_addmm_): one cublasLtMatmul per call, CudaScaledMmKernels (part of Backend<CUDA>).
//
// cuBLASLt's FP8 kernels want both operands K-contiguous ("TN"): the row-major product
// out[M, N] = a[M, K] b[K, N] runs as the column-major outᵀ = bᵀ a, cuBLASLt's A being mat_b
// read as [N, K] rows (PyTorch's usual b = W.t()) and its B being mat_a, so scale_b goes with
// cuBLASLt's A and scale_a with its B. Operands and scales in other layouts are copied into
// the ones cuBLASLt reads (one small gather kernel each): any strides work. scaled_addmm is
// the same GEMM with C = input and beta; the bias is cuBLASLt's bias epilogue; NVFP4's global
// scales multiply alpha on the device (no synchronization). The heuristic's choice is cached
// per problem. What each recipe needs (cuBLASLt 13):
//   TensorWise                         compute capability 8.9 or newer
//   RowWise, BlockWise1x128, 128x128   9.0 (Hopper) only; M, N multiples of 4 for the blocks
//   BlockWise1x32 (MXFP8), 1x16 (NVFP4) 10.0 or newer (Blackwell)
//   BlockWise1x32 with FP4 data (MXFP4) none: cuBLASLt has no such mode (PyTorch calls FBGEMM)
// and N a multiple of 16 (the output's rows must be 16-byte aligned), FP4 K a multiple of 32.
#include "../core/config.hpp"
#include <cublasLt.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "../nn/quantize.hpp"
#include "../nn/scaled_mm.hpp"
#include "blaslt.hpp"

namespace reel::inline REEL_ABI::detail {
namespace cuda {

inline cudaDataType_t lt_fp8_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float8_e4m3fn: return CUDA_R_8F_E4M3;
    case ScalarType::Float8_e5m2: return CUDA_R_8F_E5M2;
    case ScalarType::Float4_e2m1fn_x2: return CUDA_R_4F_E2M1;
    case ScalarType::BFloat16: return CUDA_R_16BF;
    case ScalarType::Half: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}
inline int32_t lt_scale_mode(ScalingType r) {
  switch (r) {
    case ScalingType::RowWise: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case ScalingType::BlockWise1x128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScalingType::BlockWise128x128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case ScalingType::BlockWise1x32: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
    case ScalingType::BlockWise1x16: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
    default: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  }
}

// What the heuristic's choice depends on.
struct ScaledLtKey {
  int device = 0;
  int32_t a = 0, b = 0, out = 0, mode_a = 0, mode_b = 0;
  int64_t m = 0, n = 0, k = 0;
  bool fast = false, bias = false, device_alpha = false;
  bool operator==(const ScaledLtKey&) const = default;
};
struct ScaledLtKeyHash {
  size_t operator()(const ScaledLtKey& k) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&h](int64_t v) { h = (h ^ static_cast<size_t>(v)) * 1099511628211ull; };
    for (int64_t v : {int64_t(k.device), int64_t(k.a), int64_t(k.b), int64_t(k.out), int64_t(k.mode_a),
                      int64_t(k.mode_b), k.m, k.n, k.k, int64_t(k.fast), int64_t(k.bias), int64_t(k.device_alpha)})
      mix(v);
    return h;
  }
};
struct ScaledLtChoice {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};
inline std::mutex& scaled_lt_mutex() {
  static std::mutex m;
  return m;
}
inline std::unordered_map<ScaledLtKey, ScaledLtChoice, ScaledLtKeyHash>& scaled_lt_cache() {
  static auto* c = new std::unordered_map<ScaledLtKey, ScaledLtChoice, ScaledLtKeyHash>();  // (leaked: no exit-time CUDA)
  return *c;
}

// dst[i] = f(i) for i < n on the current stream (a gather: relayouts of operands and scales;
// f: a functor with a __device__ call operator).
template <class T, class F>
Tensor<T, CUDA> gather_to(int64_t n, const F& f) {
  auto out = make_tensor<T, CUDA>({n});
  if (n > 0) {
    const Launch1D l = launch_1d(n);
    index_fill_kernel<<<static_cast<unsigned>(l.blocks), l.threads, 0, current_stream()>>>(out.mutable_data_ptr(), n, f);
    REEL_CUDA_CHECK_LAUNCH("scaled_mm relayout");
  }
  return out;
}

// Element (i / C, i % C) of a strided 2-D array.
template <class T>
struct RowsOf {
  const T* p;
  int64_t C, s0, s1;
  __device__ T operator()(int64_t i) const { return p[(i / C) * s0 + (i % C) * s1]; }
};
// float32 scales in cuBLASLt's layouts (see lt_scales).
struct FloatScales {
  const float* p;
  ScalingType r;
  bool is_a;
  int64_t rows, L, L4, s0, s1;
  __device__ float operator()(int64_t i) const {
    switch (r) {
      case ScalingType::TensorWise: return p[0];
      case ScalingType::RowWise: return p[i * (is_a ? s0 : s1)];
      case ScalingType::BlockWise1x128: {  // [L][rows]
        const int64_t row = i % rows, kb = i / rows;
        return p[is_a ? row * s0 + kb * s1 : kb * s0 + row * s1];
      }
      default: {  // BlockWise128x128: [row blocks][L4]
        const int64_t rb = i / L4, kb = i % L4;
        return kb < L ? p[is_a ? rb * s0 + kb * s1 : kb * s0 + rb * s1] : 0.0f;
      }
    }
  }
};
// [rows, L] one-byte scales into cuBLASLt's 128x4 tiles (PyTorch's to_blocked), padding 0.
struct TiledScales {
  const std::uint8_t* p;
  int64_t rows, L, s0, s1;
  __device__ std::uint8_t operator()(int64_t i) const {
    int64_t r, c;
    swizzled_position(SwizzleType::Swizzle_32_4_4, i, L, r, c);
    return r < rows && c < L ? p[r * s0 + c * s1] : std::uint8_t(0);
  }
};
// out[i] = beta * c[i] + bias[i % N] (c, bias: optional)
template <class Out>
struct BetaCPlusBias {
  const Out* c;
  const Out* bias;
  float beta;
  int64_t N;
  __device__ Out operator()(int64_t i) const {
    float v = c && beta != 0 ? beta * static_cast<float>(c[i]) : 0.0f;
    if (bias) v += static_cast<float>(bias[i % N]);
    return Out(v);
  }
};
// {alpha * ga * gb, beta}: two-level NVFP4's global scales folded into alpha on the device.
struct AlphaBeta {
  const float* ga;
  const float* gb;
  float alpha, beta;
  __device__ float operator()(int64_t i) const { return i == 0 ? alpha * ga[0] * gb[0] : beta; }
};

// A device buffer and the tensor that owns it.
struct DevBuf {
  std::shared_ptr<TensorImpl> keep;
  const void* ptr = nullptr;
  template <class T>
  static DevBuf of(const Tensor<T, CUDA>& t) {
    return {t.impl_ptr(), t.data_ptr()};
  }
};

// A 2-D tensor of 1-byte elements as R rows of C contiguous bytes (element (r, c) at
// r * s0 + c * s1), gathered when it is not laid out so already.
template <class T>
DevBuf byte_rows(const Tensor<T, CUDA>& t, int64_t R, int64_t C, int64_t s0, int64_t s1) {
  if ((s1 == 1 || C <= 1) && (s0 == C || R <= 1)) return DevBuf::of(t);
  const auto* p = reinterpret_cast<const std::uint8_t*>(t.data_ptr());
  return DevBuf::of(gather_to<std::uint8_t>(R * C, RowsOf<std::uint8_t>{p, C, s0, s1}));
}

// The scales of one operand in the layout cuBLASLt reads for its recipe (rows: M for mat_a,
// N for mat_b; L: K blocks): TensorWise one float; RowWise `rows` floats; BlockWise1x128
// [L][rows] floats (the rows contiguous); BlockWise128x128 [row blocks][L padded to a
// multiple of 4] floats; BlockWise1x32 / 1x16 bytes in 128x4 tiles. is_a: scale_a's logical
// layout (scaled_mm.hpp), else scale_b's.
inline DevBuf lt_scales(const AnyTensor& s, ScalingType r, SwizzleType sw, bool is_a, int64_t rows, int64_t L) {
  using S = ScalingType;
  REEL_CHECK(s.device() == DeviceType::CUDA, value_error, "scaled_mm: the scales of CUDA operands must be CUDA tensors");
  const int64_t L4 = (L + 3) / 4 * 4, RB = (rows + 127) / 128;
  auto st = [&](int d) { return s.dim() > d ? s.strides()[static_cast<size_t>(d)] : int64_t(1); };
  const int64_t s0 = st(0), s1 = st(1);
  if (r != S::BlockWise1x32 && r != S::BlockWise1x16) {
    const Tensor<float, CUDA> t = s.template as<float, CUDA>();
    const int64_t n = r == S::TensorWise ? 1 : r == S::RowWise ? rows : r == S::BlockWise1x128 ? rows * L : RB * L4;
    return DevBuf::of(gather_to<float>(n, FloatScales{t.data_ptr(), r, is_a, rows, L, L4, s0, s1}));
  }
  const DevBuf raw = r == S::BlockWise1x32 ? DevBuf::of(s.template as<float8_e8m0fnu, CUDA>())
                                           : DevBuf::of(s.template as<float8_e4m3fn, CUDA>());
  const auto* p = static_cast<const std::uint8_t*>(raw.ptr);
  if (sw == SwizzleType::Swizzle_32_4_4) {
    bool contiguous = true;
    int64_t expect = 1;
    for (int64_t d = s.dim() - 1; d >= 0; --d) {
      if (s.sizes()[static_cast<size_t>(d)] != 1 && s.strides()[static_cast<size_t>(d)] != expect) contiguous = false;
      expect *= s.sizes()[static_cast<size_t>(d)];
    }
    REEL_CHECK(contiguous, value_error, "scaled_mm: swizzled scales must be contiguous (as in PyTorch)");
    return raw;
  }
  REEL_CHECK(sw == SwizzleType::NoSwizzle, not_implemented_error,
             "scaled_mm: Swizzle_32_8 is hipBLASLt's layout and reel has no ROCm backend (on CUDA, pass Swizzle_32_4_4 "
             "or NoSwizzle scales)");
  return DevBuf::of(gather_to<std::uint8_t>(RB * 128 * L4, TiledScales{p, rows, L, s0, s1}));
}

// quantize's kernels (the rules: nn/quantize.hpp, shared with the CPU).
// amax of (row r, K block kb) of x [R, K]: i = r * nkb + kb
struct PartialAmax {
  const float* x;
  int64_t K, kblock, nkb;
  __device__ float operator()(int64_t i) const {
    const int64_t r = i / nkb, k0 = (i % nkb) * kblock, k1 = k0 + kblock < K ? k0 + kblock : K;
    return quant_amax(x + r * K + k0, k1 - k0);
  }
};
// amax of group (g, kb), groups of `rpg` rows: the partial maxima combined (NaN wins)
struct GroupAmax {
  const float* part;
  int64_t R, nkb, rpg;
  __device__ float operator()(int64_t i) const {
    const int64_t g = i / nkb, kb = i % nkb, r1 = (g + 1) * rpg < R ? (g + 1) * rpg : R;
    float m = 0;
    for (int64_t r = g * rpg; r < r1; ++r) {
      const float a = part[r * nkb + kb];
      if (!(a <= m)) m = m != m ? m : a;
    }
    return m;
  }
};
struct GlobalScale {  // the two-level global scale from every partial maximum
  const float* part;
  int64_t n;
  bool two_level;
  __device__ float operator()(int64_t) const { return two_level ? quant_global(quant_amax(part, n)) : 1.0f; }
};
struct GroupScale {
  const float* amax;
  const float* global;
  ScalarType q;
  ScalingType r;
  __device__ float operator()(int64_t i) const { return quant_rule(q, r, amax[i], global[0]).scale; }
};
struct Encode {
  const float* x;
  const float* amax;
  const float* global;
  ScalarType q;
  ScalingType r;
  int64_t K, kblock, nkb, rpg;
  __device__ std::uint8_t operator()(int64_t i) const {
    const int64_t row = i / K, k = i % K;
    const QuantRule rule = quant_rule(q, r, amax[(row / rpg) * nkb + k / kblock], global[0]);
    return quant_code(q, rule.divide ? x[i] / rule.factor : x[i] * rule.factor);
  }
};

// The current device's compute capability as major * 10 + minor, asked once per device.
inline int compute_capability() {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: not asked yet
  int dev = 0, major = 0, minor = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&dev));
  const bool cached = dev >= 0 && dev < kDevices;
  if (cached)
    if (const int cc = known[dev].load(std::memory_order_relaxed)) return cc;
  REEL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  REEL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (cached) known[dev].store(major * 10 + minor, std::memory_order_relaxed);
  return major * 10 + minor;
}

}  // namespace cuda

struct CudaScaledMmKernels {
  // quantize's codes and group scales of x [R, K] (contiguous floats), on the device.
  static QuantCodes<CUDA> quantize_rows(ScalarType q, ScalingType r, bool two_level, int64_t R, int64_t K,
                                        const Tensor<float, CUDA>& x) {
    const int64_t kblock = scale_kblock(r, K), nkb = (K + kblock - 1) / kblock;
    const int64_t rpg = r == ScalingType::TensorWise ? std::max<int64_t>(R, 1) : r == ScalingType::BlockWise128x128 ? 128 : 1;
    const int64_t ng = quantize_groups(r, R, K);
    auto part = cuda::gather_to<float>(R * nkb, cuda::PartialAmax{x.data_ptr(), K, kblock, nkb});
    auto amax = cuda::gather_to<float>(ng, cuda::GroupAmax{part.data_ptr(), R, nkb, rpg});
    QuantCodes<CUDA> qc;
    qc.global = cuda::gather_to<float>(1, cuda::GlobalScale{part.data_ptr(), R * nkb, two_level});
    qc.scales = cuda::gather_to<float>(ng, cuda::GroupScale{amax.data_ptr(), qc.global.data_ptr(), q, r});
    qc.codes = cuda::gather_to<std::uint8_t>(
        R * K, cuda::Encode{x.data_ptr(), amax.data_ptr(), qc.global.data_ptr(), q, r, K, kblock, nkb, rpg});
    return qc;
  }

  // out[M, N] = alpha * (a scaled) @ (b scaled) + beta * c (c: null or [M, N] contiguous) + bias,
  // checked by check_scaled_mm_call (K: unpacked).
  template <class Out, class A, class B>
  static void scaled_mm(const Tensor<A, CUDA>& a, const Tensor<B, CUDA>& b, int64_t K, const Scales& sa,
                        const Recipes& ra, const Scales& sb, const Recipes& rb, SwizzleType swa, SwizzleType swb,
                        const AnyTensor& bias, bool fast, double alpha, double beta, const Tensor<Out, CUDA>* c,
                        const Tensor<Out, CUDA>& out) {
    using S = ScalingType;
    const int64_t M = a.size(0), N = b.size(1);
    const S r0 = ra.list[0];
    constexpr bool fp4 = is_fp4_v<A>;
    const int cc = cuda::compute_capability();
    const char* need = nullptr;
    if (r0 == S::TensorWise && cc < 89) need = "compute capability 8.9 or newer";
    if ((r0 == S::RowWise || r0 == S::BlockWise1x128 || r0 == S::BlockWise128x128) && cc != 90)
      need = "compute capability 9.0 (cuBLASLt's outer-vector and 128-block scales run on Hopper only)";
    if ((r0 == S::BlockWise1x32 || r0 == S::BlockWise1x16) && cc < 100) need = "compute capability 10.0 or newer";
    REEL_CHECK(!need, not_implemented_error, "scaled_mm: the ", scaling_name(r0), " recipe needs ", need,
               " on CUDA; this device has ", cc / 10, ".", cc % 10);
    REEL_CHECK(!(fp4 && r0 == S::BlockWise1x32), not_implemented_error,
               "scaled_mm: MXFP4 (FP4 data with BlockWise1x32 scales) has no cuBLASLt kernel (PyTorch uses FBGEMM's); "
               "reel runs it on the CPU only");
    REEL_CHECK(N % 16 == 0 && (!fp4 || K % 32 == 0), not_implemented_error,
               "scaled_mm on CUDA: N must be a multiple of 16", fp4 ? " and K of 32" : "", " (cuBLASLt's alignment), got N = ",
               N, ", K = ", K);
    REEL_CHECK(!(r0 == S::BlockWise1x128 || r0 == S::BlockWise128x128) || M % 4 == 0, not_implemented_error,
               "scaled_mm on CUDA: the 128-block recipes need M a multiple of 4, got ", M);
    REEL_CHECK(!fast || r0 == S::TensorWise || r0 == S::RowWise, not_implemented_error,
               "scaled_mm on CUDA: use_fast_accum goes with the TensorWise and RowWise recipes only (as in PyTorch)");
    if (M == 0 || N == 0) return;
    cudaStream_t stream = cuda::current_stream();
    Tensor<Out, CUDA> bias_t = bias.defined() ? Tensor<Out, CUDA>(bias.template as<Out, CUDA>().contiguous()) : Tensor<Out, CUDA>();
    const Out* bias_p = bias_t.defined() ? bias_t.data_ptr() : nullptr;
    Out* o = out.mutable_data_ptr();
    if (K == 0) {  // beta * c + bias
      auto v = cuda::gather_to<Out>(M * N, cuda::BetaCPlusBias<Out>{c ? c->data_ptr() : nullptr, bias_p,
                                                                    static_cast<float>(beta), N});
      REEL_CUDA_CHECK(cudaMemcpyAsync(o, v.data_ptr(), static_cast<size_t>(M * N) * sizeof(Out), cudaMemcpyDeviceToDevice,
                                      stream));
      return;
    }
    // operands as K-contiguous rows: a [M, K], b read as [N, K]
    const int64_t kp = fp4 ? K / 2 : K;  // bytes per row
    const cuda::DevBuf ar = cuda::byte_rows(a, M, kp, a.stride(0), a.stride(1));
    const cuda::DevBuf br = cuda::byte_rows(b, N, kp, b.stride(1), b.stride(0));
    const int64_t L = (K + scale_kblock(r0, K) - 1) / scale_kblock(r0, K);
    const cuda::DevBuf sa_dev = cuda::lt_scales(sa.list[0], r0, swa, true, M, L);
    const cuda::DevBuf sb_dev = cuda::lt_scales(sb.list[0], rb.list[0], swb, false, N, L);
    // alpha (times the global scales of two-level NVFP4, on the device) and beta
    const bool two = ra.list.size() == 2;
    const float alpha32 = static_cast<float>(alpha), beta32 = c ? static_cast<float>(beta) : 0.0f;
    Tensor<float, CUDA> ab;
    if (two) {
      const Tensor<float, CUDA> ga = sa.list[1].template as<float, CUDA>(), gb = sb.list[1].template as<float, CUDA>();
      ab = cuda::gather_to<float>(2, cuda::AlphaBeta{ga.data_ptr(), gb.data_ptr(), alpha32, beta32});
    }

    int device = 0;
    REEL_CUDA_CHECK(cudaGetDevice(&device));
    cuda::ScaledLtKey key;
    key.device = device;
    key.a = cuda::lt_fp8_type(scalar_type_v<B>);  // (cuBLASLt's A is mat_b)
    key.b = cuda::lt_fp8_type(scalar_type_v<A>);
    key.out = cuda::lt_fp8_type(scalar_type_v<Out>);
    key.mode_a = cuda::lt_scale_mode(rb.list[0]);
    key.mode_b = cuda::lt_scale_mode(r0);
    key.m = N;
    key.n = M;
    key.k = K;
    key.fast = fast;
    key.bias = bias_p != nullptr;
    key.device_alpha = two;

    cuda::LtMatmulDesc desc;
    REEL_CUBLASLT_CHECK(cublasLtMatmulDescCreate(desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F));
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& v) {
      REEL_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), attr, &v, sizeof(v)));
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    const void* a_scale = sb_dev.ptr;
    const void* b_scale = sa_dev.ptr;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, key.mode_a);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, key.mode_b);
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast ? 1 : 0));
    if (bias_p) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
      const void* bp = bias_p;
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(key.out));
    }
    if (two) set(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
    cuda::LtLayoutDesc la, lb, lc;
    REEL_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(la.out(), static_cast<cudaDataType_t>(key.a), K, N, K));
    REEL_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(lb.out(), static_cast<cudaDataType_t>(key.b), K, M, K));
    REEL_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(lc.out(), static_cast<cudaDataType_t>(key.out), N, M, N));

    auto [handle, workspace] = cuda::LtContext::instance().handle_and_workspace(device, stream);
    cuda::ScaledLtChoice choice;
    {
      std::lock_guard<std::mutex> lock(cuda::scaled_lt_mutex());
      auto& cache = cuda::scaled_lt_cache();
      auto it = cache.find(key);
      if (it == cache.end()) {
        cuda::LtPreference pref;
        REEL_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(pref.out()));
        const uint64_t ws = cuda::kLtWorkspaceBytes;
        REEL_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &ws, sizeof(ws)));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), la.get(), lb.get(), lc.get(),
                                                                 lc.get(), pref.get(), 1, &result, &found);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))
          raise<not_implemented_error>("scaled_mm: cuBLASLt has no algorithm for this product (", scaling_name(r0),
                                       " scales, M=", M, " N=", N, " K=", K, ", ", dtype_name(scalar_type_v<A>), " x ",
                                       dtype_name(scalar_type_v<B>), " -> ", dtype_name(scalar_type_v<Out>),
                                       ") on compute capability ", cc / 10, ".", cc % 10);
        REEL_CUBLASLT_CHECK(st);
        it = cache.emplace(key, cuda::ScaledLtChoice{result.algo, result.workspaceSize}).first;
      }
      choice = it->second;
    }
    const void* alpha_p = two ? static_cast<const void*>(ab.data_ptr()) : &alpha32;
    const void* beta_p = two ? static_cast<const void*>(ab.data_ptr() + 1) : &beta32;
    const void* cp = c ? static_cast<const void*>(c->data_ptr()) : static_cast<const void*>(o);
    REEL_CUBLASLT_CHECK(cublasLtMatmul(handle, desc.get(), alpha_p, br.ptr, la.get(), ar.ptr, lb.get(),
                                       beta_p, cp, lc.get(), o, lc.get(), &choice.algo, workspace->data,
                                       choice.workspace_bytes, stream));
  }
};

}  // namespace reel::detail
