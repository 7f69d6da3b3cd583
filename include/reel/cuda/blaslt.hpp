#pragma once
// GEMM through cuBLASLt, and matmul / mm / bmm for CUDA tensors on top of it (the
// Backend<CUDA>::bmm that products.hpp dispatches to). Host code only: it compiles with
// g++ when the CUDA headers are on the include path, and with nvcc.
//
// Per device: one cuBLASLt handle, created on first use. Per (device, stream): one 32 MiB
// workspace (two streams' GEMMs may run at once, so they must not share scratch memory),
// taken from the caching allocator on that stream at first use and kept until the stream is
// destroyed or gpu::empty_cache() runs (runtime.hpp's release hooks). Streams are keyed by
// their id, not their handle: the null handle is a different stream in each thread under
// --default-stream per-thread. The algorithm cuBLASLt's
// heuristic picks is cached per problem (gemm_plan.hpp's GemmKey: device, dtypes, compute
// type, shape, transposes, leading dims, batch and strides, operand alignment), together
// with the descriptors it was chosen for, so a repeated product costs one map lookup.
#include "../core/config.hpp"
#include <cublasLt.h>

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "../ops/products.hpp"
#include "gemm_plan.hpp"
#include "check.hpp"
#include "runtime.hpp"

namespace reel::inline REEL_ABI {
namespace detail::cuda {

[[noreturn, gnu::cold]] inline void raise_cublaslt(const char* call, cublasStatus_t st, const char* file, int line) {
  (void)cudaGetLastError();  // (a failed launch inside cuBLASLt leaves it set; see check.hpp)
  raise<error>("cuBLASLt call `", call, "` failed with ", cublasLtGetStatusName(st), " (", static_cast<int>(st),
               "): ", cublasLtGetStatusString(st), " [", file, ":", line, "]");
}

}  // namespace detail::cuda
}  // namespace reel

#define REEL_CUBLASLT_CHECK(call)                                                          \
  do {                                                                                     \
    cublasStatus_t reel_cublaslt_status_ = (call);                                         \
    if (reel_cublaslt_status_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::reel::detail::cuda::raise_cublaslt(#call, reel_cublaslt_status_, __FILE__, __LINE__); \
  } while (0)

namespace reel::inline REEL_ABI {

namespace gpu {  // (reel's public CUDA namespace; see runtime.hpp for why not `cuda`)
// torch.backends.cuda.matmul.allow_tf32: let fp32 GEMMs use TF32 tensor cores (10-bit
// mantissa inputs, fp32 accumulation). Off by default: fp32 products stay fp32-exact.
inline std::atomic<bool>& allow_tf32_flag() {
  static std::atomic<bool> f{false};
  return f;
}
inline void set_allow_tf32(bool on) { allow_tf32_flag().store(on, std::memory_order_relaxed); }
inline bool allow_tf32() { return allow_tf32_flag().load(std::memory_order_relaxed); }
}  // namespace gpu

namespace detail::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

// One batched row-major product C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, every
// pointer on the device. trans_a: A is stored as [k, m] and read in place (likewise
// trans_b: B stored as [n, k]). Strides are in elements between consecutive matrices.
// alpha / beta are rounded to fp32 for fp32-accumulated products.
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1, beta = 0;
  GemmDtype ab_type = GemmDtype::Float32;  // A and B
  GemmDtype c_type = GemmDtype::Float32;   // C: the same, or fp32 for fp16 / bf16 inputs
  bool allow_tf32 = false;                 // fp32 inputs only
  cudaStream_t stream = nullptr;
};

template <class T> inline constexpr bool gemm_element_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
template <class T>
constexpr GemmDtype gemm_dtype_v() {
  static_assert(gemm_element_v<T>, "reel: cuBLASLt GEMMs take float, double, half or bfloat16");
  if constexpr (std::is_same_v<T, float>) return GemmDtype::Float32;
  else if constexpr (std::is_same_v<T, double>) return GemmDtype::Float64;
  else if constexpr (std::is_same_v<T, half>) return GemmDtype::Float16;
  else return GemmDtype::BFloat16;
}

inline cudaDataType_t lt_data_type(GemmDtype t) {
  switch (t) {
    case GemmDtype::Float32: return CUDA_R_32F;
    case GemmDtype::Float64: return CUDA_R_64F;
    case GemmDtype::Float16: return CUDA_R_16F;
    case GemmDtype::BFloat16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}
inline cublasComputeType_t lt_compute_type(GemmCompute c) {
  switch (c) {
    case GemmCompute::Float32: return CUBLAS_COMPUTE_32F;
    case GemmCompute::Float32FastTF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmCompute::Float64: return CUBLAS_COMPUTE_64F;
  }
  return CUBLAS_COMPUTE_32F;
}

// Owns one cuBLASLt descriptor.
template <class H, cublasStatus_t (*Destroy)(H)>
class LtDesc {
 public:
  LtDesc() = default;
  LtDesc(const LtDesc&) = delete;
  LtDesc& operator=(const LtDesc&) = delete;
  LtDesc(LtDesc&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ~LtDesc() {
    if (h_) (void)Destroy(h_);
  }
  H* out() { return &h_; }
  H get() const { return h_; }

 private:
  H h_ = nullptr;
};
using LtMatmulDesc = LtDesc<cublasLtMatmulDesc_t, &cublasLtMatmulDescDestroy>;
using LtLayoutDesc = LtDesc<cublasLtMatrixLayout_t, &cublasLtMatrixLayoutDestroy>;
using LtPreference = LtDesc<cublasLtMatmulPreference_t, &cublasLtMatmulPreferenceDestroy>;

// A cached choice: the descriptors it was made for and the algorithm.
struct LtPlan {
  cublasLtHandle_t handle = nullptr;
  LtMatmulDesc desc;
  LtLayoutDesc first, second, c;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

class LtContext {
 public:
  static LtContext& instance() {
    static auto* c = new LtContext();  // leaked on purpose: no cuBLASLt / CUDA calls at exit
    return *c;
  }

  // The plan for `key` (built on first use; plan references stay valid: entries are never
  // erased, and unordered_map keeps its elements in place when it rehashes) and the
  // workspace for (device, stream), which the caller holds until its GEMM is queued: if the
  // workspace is dropped meanwhile, its block still goes back to the stream's free list only
  // after that.
  std::pair<const LtPlan*, std::shared_ptr<Storage>> lookup(const GemmKey& key, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [h, ws] = handle_and_workspace_locked(key.device, stream);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make_plan(h, key)).first;
    return {&it->second, ws};
  }
  // The handle of `device` (the current one) and the workspace of (device, stream), for GEMMs
  // that plan themselves (scaled_mm.cuh).
  std::pair<cublasLtHandle_t, std::shared_ptr<Storage>> handle_and_workspace(int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    return handle_and_workspace_locked(device, stream);
  }

 private:
  LtContext() {
    add_release_hook([](std::optional<StreamId> s) { instance().drop_workspaces(s); });
  }
  // Gives the workspaces of stream s (all streams: nullopt) back to the caching allocator.
  void drop_workspaces(std::optional<StreamId> s) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = workspaces_.begin(); it != workspaces_.end();)
      it = !s || it->first.second == *s ? workspaces_.erase(it) : std::next(it);
  }

  std::pair<cublasLtHandle_t, std::shared_ptr<Storage>> handle_and_workspace_locked(int device, cudaStream_t stream) {
    const StreamId sid = stream_id(stream);
    cublasLtHandle_t h = handle(device);
    auto& ws = workspaces_[{device, sid}];
    if (!ws) ws = make_device_storage(kLtWorkspaceBytes, sid);  // (on the current device)
    return {h, ws};
  }
  cublasLtHandle_t handle(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cublasLtHandle_t h = nullptr;
    REEL_CUBLASLT_CHECK(cublasLtCreate(&h));
    handles_.emplace(device, h);
    return h;
  }

  static void make_layout(LtLayoutDesc& d, cudaDataType_t type, const LtLayout& l, int64_t batch) {
    REEL_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(d.out(), type, static_cast<uint64_t>(l.rows),
                                                   static_cast<uint64_t>(l.cols), l.ld));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      const int64_t stride = l.stride;
      REEL_CUBLASLT_CHECK(
          cublasLtMatrixLayoutSetAttribute(d.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      REEL_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(d.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                           &stride, sizeof(stride)));
    }
  }

  static LtPlan make_plan(cublasLtHandle_t h, const GemmKey& key) {
    const ColMajorGemm& g = key.shape;
    LtPlan p;
    p.handle = h;
    const cudaDataType_t scale = key.compute == GemmCompute::Float64 ? CUDA_R_64F : CUDA_R_32F;
    REEL_CUBLASLT_CHECK(cublasLtMatmulDescCreate(p.desc.out(), lt_compute_type(key.compute), scale));
    const cublasOperation_t ta = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    REEL_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    REEL_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    make_layout(p.first, lt_data_type(key.ab), g.first, g.batch);
    make_layout(p.second, lt_data_type(key.ab), g.second, g.batch);
    make_layout(p.c, lt_data_type(key.c), g.c, g.batch);  // C and D: one buffer, one layout

    LtPreference pref;
    REEL_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(pref.out()));
    const uint64_t ws = kLtWorkspaceBytes;
    REEL_CUBLASLT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // The heuristic assumes 256-byte aligned buffers unless told otherwise; a view into a
    // tensor (a slice, a chunk of rows) may be far less aligned than that.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_first},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_second},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
    for (const auto& [attr, v] : aligns)
      REEL_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &v, sizeof(v)));

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p.desc.get(), p.first.get(), p.second.get(), p.c.get(),
                                                             p.c.get(), pref.get(), 1, &result, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0))
      raise<not_implemented_error>("cuBLASLt has no algorithm for this GEMM (column-major m=", g.m, " n=", g.n, " k=", g.k,
                                   " batch=", g.batch, " lds ", g.first.ld, "/", g.second.ld, "/", g.c.ld,
                                   ", alignments ", key.align_first, "/", key.align_second, "/", key.align_c, " bytes)");
    REEL_CUBLASLT_CHECK(st);
    p.algo = result.algo;
    p.workspace_bytes = result.workspaceSize;
    return p;
  }

  std::mutex mu_;
  std::map<int, cublasLtHandle_t> handles_;
  std::map<std::pair<int, StreamId>, std::shared_ptr<Storage>> workspaces_;
  std::unordered_map<GemmKey, LtPlan, GemmKeyHash> plans_;
};

// C = alpha op(A) op(B) + beta C (see GemmArgs). Empty products are no-ops; k = 0 scales C by
// beta (only 0 and 1 occur: cuBLASLt is not asked about a zero-length inner dimension).
inline void gemm(const GemmArgs& g) {
  REEL_CHECK(gemm_types_supported(g.ab_type, g.c_type), value_error,
             "cuBLASLt gemm: unsupported combination of input and output dtypes");
  REEL_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, value_error, "cuBLASLt gemm: negative size (m=", g.m,
             " n=", g.n, " k=", g.k, " batch=", g.batch, ")");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const int64_t esc = gemm_dtype_size(g.c_type);
  REEL_CHECK(g.ldc >= g.n, value_error, "cuBLASLt gemm: ldc ", g.ldc, " < n ", g.n);
  if (g.k == 0) {
    if (g.beta == 1) return;
    REEL_CHECK(g.beta == 0, not_implemented_error, "cuBLASLt gemm: k = 0 with beta other than 0 or 1");
    auto* c = static_cast<char*>(g.c);
    if (g.batch == 1 || g.stride_c == g.m * g.ldc) {  // the batches' rows follow each other
      REEL_CUDA_CHECK(cudaMemset2DAsync(c, g.ldc * esc, 0, g.n * esc, g.m * g.batch, g.stream));
    } else {
      for (int64_t i = 0; i < g.batch; ++i)
        REEL_CUDA_CHECK(cudaMemset2DAsync(c + i * g.stride_c * esc, g.ldc * esc, 0, g.n * esc, g.m, g.stream));
    }
    return;
  }
  REEL_CHECK(g.lda >= (g.trans_a ? g.m : g.k) && g.ldb >= (g.trans_b ? g.k : g.n), value_error,
             "cuBLASLt gemm: leading dimension smaller than a row (lda ", g.lda, ", ldb ", g.ldb, ")");
  REEL_CHECK(g.batch <= INT32_MAX, not_implemented_error, "cuBLASLt gemm: more than 2^31 - 1 matrices in one batch");

  RowMajorGemm r;
  r.m = g.m;
  r.n = g.n;
  r.k = g.k;
  r.trans_a = g.trans_a;
  r.trans_b = g.trans_b;
  r.lda = g.lda;
  r.ldb = g.ldb;
  r.ldc = g.ldc;
  r.batch = g.batch;
  // (one matrix: strides are meaningless, and leaving them out of the key shares the plan)
  r.stride_a = g.batch > 1 ? g.stride_a : 0;
  r.stride_b = g.batch > 1 ? g.stride_b : 0;
  r.stride_c = g.batch > 1 ? g.stride_c : 0;
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  const GemmCompute compute = gemm_compute_for(g.ab_type, g.allow_tf32);
  const GemmKey key = make_gemm_key(device, g.ab_type, g.c_type, compute, r, reinterpret_cast<uintptr_t>(g.a),
                                    reinterpret_cast<uintptr_t>(g.b), reinterpret_cast<uintptr_t>(g.c));
  auto [plan, workspace] = LtContext::instance().lookup(key, g.stream);
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const bool f64 = compute == GemmCompute::Float64;
  const void* alpha = f64 ? static_cast<const void*>(&g.alpha) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&g.beta) : &beta32;
  // cuBLASLt's first matrix is B and its second is A (gemm_plan.hpp: Cᵀ = op(B)ᵀ op(A)ᵀ).
  REEL_CUBLASLT_CHECK(cublasLtMatmul(plan->handle, plan->desc.get(), alpha, g.b, plan->first.get(), g.a,
                                     plan->second.get(), beta, g.c, plan->c.get(), g.c, plan->c.get(), &plan->algo,
                                     workspace->data, plan->workspace_bytes, g.stream));
}

// A 3-d operand [batch, rows, cols] as GEMM arguments: read in place when its matrices are
// row-major or transposed-row-major (gemm_operand), otherwise a contiguous copy.
template <class T>
struct BatchOperand {
  Tensor<T, CUDA> t;  // what is read (the input, or its copy)
  bool trans = false;
  int64_t ld = 0, stride = 0;
};
template <class T>
BatchOperand<T> batch_operand(const Tensor<T, CUDA>& x) {
  GemmOperand o = gemm_operand(x.size(1), x.size(2), x.stride(1), x.stride(2));
  BatchOperand<T> r{x, o.trans, o.ld, x.size(0) > 1 ? x.stride(0) : 0};
  if (!o.in_place) {
    r.t = x.contiguous();
    r.trans = false;
    r.ld = std::max<int64_t>(x.size(2), 1);
    r.stride = x.size(1) * x.size(2);
  }
  return r;
}

}  // namespace detail::cuda

namespace detail {
// Part of Backend<CUDA> (core/backend.hpp, assembled in <cuda.hpp>).
struct CudaGemmKernels {
  // out[i] = a[i] @ b[i]: a [B, n, k], b [B, k, m], out a fresh contiguous [B, n, m].
  // Batch strides of 0 (a broadcast operand) are never handed to cuBLASLt: a broadcast right
  // operand folds the batch into the rows of one product, a small broadcast product is
  // copied out, a large one runs matrix by matrix.
  template <class T>
  static void bmm(const Tensor<T, CUDA>& a, const Tensor<T, CUDA>& b, const Tensor<T, CUDA>& out) {
    if constexpr (!cuda::gemm_element_v<T>) {
      raise<not_implemented_error>("matmul: CUDA matmul supports float, double, half and bfloat16 tensors, got ",
                                   dtype_name(scalar_type_v<T>));
    } else {
      const int64_t B = a.size(0), n = a.size(1), k = a.size(2), m = b.size(2);
      if (out.numel() == 0) return;
      cuda::GemmArgs g;
      g.ab_type = g.c_type = cuda::gemm_dtype_v<T>();
      g.allow_tf32 = ::reel::gpu::allow_tf32();
      g.stream = cuda::current_stream();
      g.m = n;
      g.n = m;
      g.k = k;
      g.c = out.mutable_data_ptr();
      g.ldc = m;
      if (k == 0) {  // sums of nothing
        REEL_CUDA_CHECK(cudaMemsetAsync(g.c, 0, static_cast<size_t>(out.numel()) * sizeof(T), g.stream));
        return;
      }
      auto A = cuda::batch_operand(a);
      auto Bo = cuda::batch_operand(b);
      const bool bcast_a = B > 1 && A.stride == 0, bcast_b = B > 1 && Bo.stride == 0;
      if (bcast_b && !bcast_a && !A.trans && A.stride == n * A.ld) {
        // b shared by every matrix and a's matrices stacked row after row: one [B n, k] product
        g.m = B * n;
        issue(g, A, Bo);
        return;
      }
      if ((bcast_a || bcast_b) && n * m * k < (int64_t(1) << 21)) {
        if (bcast_a) A = cuda::batch_operand(Tensor<T, CUDA>(a.contiguous()));
        if (bcast_b) Bo = cuda::batch_operand(Tensor<T, CUDA>(b.contiguous()));
      } else if (bcast_a || bcast_b) {
        for (int64_t i = 0; i < B; ++i) {
          g.c = out.mutable_data_ptr() + i * n * m;
          issue(g, A, Bo, i);
        }
        return;
      }
      g.batch = B;
      g.stride_c = n * m;
      issue(g, A, Bo);
    }
  }

 private:
  // Issues g with the operands' pointers (offset to matrix i for a per-matrix call).
  template <class T>
  static void issue(cuda::GemmArgs g, const cuda::BatchOperand<T>& A, const cuda::BatchOperand<T>& Bo, int64_t i = 0) {
    g.a = A.t.data_ptr() + i * A.stride;
    g.lda = A.ld;
    g.trans_a = A.trans;
    g.stride_a = A.stride;
    g.b = Bo.t.data_ptr() + i * Bo.stride;
    g.ldb = Bo.ld;
    g.trans_b = Bo.trans;
    g.stride_b = Bo.stride;
    cuda::gemm(g);
  }
};
}  // namespace detail

}  // namespace reel
