// Speed and memory of the CUDA matmul and fused linear_cross_entropy, as ratios against a
// baseline run in the same process:
//   matmul_bf16_tflops   reel::matmul of two 8192 x 8192 bf16 matrices vs the same product
//                        through cuBLASLt called directly here (its own handle, heuristic
//                        and workspace): the cost of reel's layer on top.
//   lce_time / lce_peak  fused linear_cross_entropy forward + backward at N = 32768,
//                        D = 4096, V = 128256 (bf16, mean over class indices) vs the unfused
//                        composition: logits = reel::matmul(X, Wᵀ) held as [N, V] bf16, one
//                        softmax-cross-entropy kernel writing the loss and the [N, V] bf16
//                        gradient of the logits (what torch's fused log_softmax / nll backward
//                        leaves), then dX = G W and dW = Gᵀ X through reel::matmul. (PyTorch's
//                        eager path also keeps fp32 copies of the logits; this baseline does
//                        not, so its memory is a lower bound.)
//   scaled_mm_tflops     FP8 scaled_mm (e4m3, each recipe the device runs) at M = 4096,
//                        N = 7168, K = 16384 vs reel's bf16 matmul of the same shape.
// Timing: cudaEvents around each run, warm-up first, median of several runs. Peak memory:
// reel::gpu::max_memory_allocated over each path (inputs included), reset in between.
// Runs in well under a minute on an H200. Usage: reel_cuda_bench matmul_lce [--quick] (smaller sizes).
#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <reel/cuda.hpp>

#include "bench_timing.cuh"
#include <functional>
#include <vector>

using namespace reel;
namespace F = reel::nn::functional;

namespace {

#define BENCH_CUDA(call) REEL_CUDA_CHECK(call)
#define BENCH_LT(call) REEL_CUBLASLT_CHECK(call)

// 64 pseudo-random bits for element i (a fixed mix of i and the seed).
__device__ uint64_t random_bits(int64_t i, uint64_t seed) {
  uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}
// Deterministic pseudo-random values in [-scale, scale) without a host round trip.
__global__ void fill_kernel(reel::bfloat16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t x = random_bits(i, seed);
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = reel::bfloat16((2 * u - 1) * scale);
  }
}
Tensor<reel::bfloat16, CUDA> random_bf16(Shape s, uint64_t seed, float scale) {
  auto t = empty<reel::bfloat16, CUDA>(s);
  fill_kernel<<<1024, 256, 0, reel::gpu::current_stream()>>>(t.data_ptr(), t.numel(), seed, scale);
  REEL_CUDA_CHECK_LAUNCH("fill_kernel");
  return t;
}

// Random e4m3 codes (no NaN: magnitudes up to code 0x77) without a host round trip.
__global__ void fill_fp8_kernel(std::uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t x = random_bits(i, seed);
    p[i] = static_cast<std::uint8_t>(((x >> 8) % 0x78) | ((x >> 20) & 0x80));
  }
}
Tensor<float8_e4m3fn, CUDA> random_e4m3(Shape s, uint64_t seed) {
  auto t = empty<float8_e4m3fn, CUDA>(s);
  fill_fp8_kernel<<<1024, 256, 0, reel::gpu::current_stream()>>>(reinterpret_cast<std::uint8_t*>(t.mutable_data_ptr()),
                                                                 t.numel(), seed);
  REEL_CUDA_CHECK_LAUNCH("fill_fp8_kernel");
  return t;
}

// FP8 scaled_mm's TFLOP/s per recipe (e4m3 x e4m3 -> bf16, mat_b = W^T as PyTorch passes it)
// against reel's bf16 matmul of the same shape (cuBLASLt both): the FP8 speed-up.
void bench_scaled_mm(bool quick) {
  using F::ScalingType;
  const int64_t M = quick ? 1024 : 4096, N = quick ? 1792 : 7168, K = quick ? 4096 : 16384, L = K / 128;
  auto a = random_e4m3({M, K}, 5), w = random_e4m3({N, K}, 6);
  auto b = w.mT();
  auto A16 = random_bf16({M, K}, 7, 1.0f), W16 = random_bf16({N, K}, 8, 1.0f);
  auto B16 = W16.mT();
  const double flops = 2.0 * M * N * K;
  const double t16 = median_ms([&] { Tensor<reel::bfloat16, CUDA> c = matmul(A16, B16); }, 3, 15);
  std::printf("scaled_mm M=%lld N=%lld K=%lld: bf16 matmul %.0f TFLOP/s\n", static_cast<long long>(M),
              static_cast<long long>(N), static_cast<long long>(K), flops / (t16 * 1e-3) / 1e12);
  auto ones = [](Shape s) { return full<float, CUDA>(s, 1.0f); };
  struct Case {
    const char* name;
    ScalingType ra, rb;
    Shape sa, sb;
    bool fast;
  };
  const Case cases[] = {
      {"TensorWise", ScalingType::TensorWise, ScalingType::TensorWise, {}, {}, false},
      {"TensorWise, fast accum", ScalingType::TensorWise, ScalingType::TensorWise, {}, {}, true},
      {"RowWise", ScalingType::RowWise, ScalingType::RowWise, {M, 1}, {1, N}, false},
      {"BlockWise1x128", ScalingType::BlockWise1x128, ScalingType::BlockWise1x128, {M, L}, {L, N}, false},
      {"BlockWise128x128 x 1x128", ScalingType::BlockWise128x128, ScalingType::BlockWise1x128, {M / 128, L}, {L, N}, false},
  };
  for (const Case& c : cases) {
    auto sa = ones(c.sa), sb = ones(c.sb);
    try {
      const double t = median_ms([&] { Tensor<reel::bfloat16, CUDA> y = F::scaled_mm(a, b, sa, c.ra, sb, c.rb, {.use_fast_accum = c.fast}); }, 3, 15);
      const double tf = flops / (t * 1e-3) / 1e12;
      std::printf("scaled_mm_tflops recipe=%s fp8=%.0f bf16=%.0f ratio=%.2f\n", c.name, tf, flops / (t16 * 1e-3) / 1e12,
                  t16 / t);
    } catch (const not_implemented_error& e) {
      std::printf("scaled_mm_tflops recipe=%s skipped: %s\n", c.name, e.what());
    }
  }
}

// The baseline product: column-major D[n, n] = A B with bf16 inputs, fp32 accumulation,
// straight through cuBLASLt (the same flops as reel's row-major product of the same buffers).
struct DirectGemm {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* ws = nullptr;
  size_t ws_bytes = size_t(32) << 20;
  explicit DirectGemm(int64_t n) {
    BENCH_LT(cublasLtCreate(&h));
    BENCH_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    BENCH_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
    BENCH_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
    BENCH_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n));
    BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
    cublasLtMatmulPreference_t pref = nullptr;
    BENCH_LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = ws_bytes;
    BENCH_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    BENCH_LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &r, &found));
    BENCH_LT(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) reel::raise<reel::error>("direct cuBLASLt: no algorithm");
    algo = r.algo;
    ws_bytes = r.workspaceSize;
  }
  void operator()(const void* A, const void* B, void* C) const {
    const float one = 1, zero = 0;
    BENCH_LT(cublasLtMatmul(h, desc, &one, A, la, B, lb, &zero, C, lc, C, lc, &algo, ws, ws_bytes,
                            reel::gpu::current_stream()));
  }
  ~DirectGemm() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    cudaFree(ws);
  }
};

// The unfused baseline's cross-entropy: one block per row of the [N, V] bf16 logits; the
// row's loss (fp32) and its gradient (softmax - onehot) / N, in bf16, over a second [N, V].
__global__ void __launch_bounds__(256) ce_rows_kernel(const reel::bfloat16* Z, const int64_t* y, int64_t V, float inv_n,
                                                      float* loss, reel::bfloat16* G) {
  __shared__ float red[32];
  __shared__ float bcast;
  const int64_t n = blockIdx.x;
  const reel::bfloat16* z = Z + n * V;
  auto block_sum = [&](float v, bool is_max) {
    for (int off = 16; off > 0; off >>= 1) {
      float o = __shfl_down_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
      float r = red[0];
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
      bcast = r;
    }
    __syncthreads();
    float r = bcast;
    __syncthreads();
    return r;
  };
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, static_cast<float>(z[j]));
  m = block_sum(m, true);
  float s = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += __expf(static_cast<float>(z[j]) - m);
  s = block_sum(s, false);
  const float lse = m + logf(s);
  const int64_t yi = y[n];
  if (threadIdx.x == 0) loss[n] = lse - static_cast<float>(z[yi]);
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float g = __expf(static_cast<float>(z[j]) - lse);
    if (j == yi) g -= 1;
    G[n * V + j] = reel::bfloat16(g * inv_n);
  }
}

struct LceSizes {
  int64_t N, D, V;
};

}  // namespace

int main(int argc, char** argv) {
  if (!reel::gpu::is_available()) {
    std::printf("no CUDA device\n");
    return 1;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, reel::gpu::current_device()));
  std::printf("device %s\n", prop.name);

  // ---------------------------------------------------------------- FP8 scaled_mm
  bench_scaled_mm(quick);

  // ---------------------------------------------------------------- bf16 matmul
  {
    const int64_t n = quick ? 4096 : 8192;
    auto A = random_bf16({n, n}, 1, 1.0f), B = random_bf16({n, n}, 2, 1.0f);
    auto C = empty<reel::bfloat16, CUDA>({n, n});
    DirectGemm direct(n);
    const double flops = 2.0 * n * n * n;
    const double t_reel = median_ms([&] { Tensor<reel::bfloat16, CUDA> c = matmul(A, B); }, 3, 15);
    const double t_direct = median_ms([&] { direct(B.data_ptr(), A.data_ptr(), C.data_ptr()); }, 3, 15);
    const double reel_tf = flops / (t_reel * 1e-3) / 1e12, direct_tf = flops / (t_direct * 1e-3) / 1e12;
    std::printf("matmul_bf16_tflops n=%lld reel=%.1f direct=%.1f ratio=%.3f\n", static_cast<long long>(n), reel_tf,
                direct_tf, reel_tf / direct_tf);
  }

  // ---------------------------------------------------------------- fused vs unfused LCE
  const LceSizes S = quick ? LceSizes{4096, 2048, 32768} : LceSizes{32768, 4096, 128256};
  auto X = random_bf16({S.N, S.D}, 3, 1.0f);
  auto W = random_bf16({S.V, S.D}, 4, 0.02f);
  reel::Generator gen(7);
  auto y = randint<int64_t, CUDA>(0, S.V, {S.N}, gen);
  reel::gpu::synchronize();
  const int64_t base = reel::gpu::memory_allocated();
  const bool autograd = reel::detail::autograd_type_v<reel::bfloat16, CUDA>;

  // Fused: the op with backward() where CUDA tensors record autograd; otherwise the direct
  // entry that yields the loss and the gradients from one pass (the same kernels).
  auto fused = [&] {
    if constexpr (reel::detail::autograd_type_v<reel::bfloat16, CUDA>) {
      auto Xg = X.detach().requires_grad_(), Wg = W.detach().requires_grad_();
      auto loss = F::linear_cross_entropy(Xg, Wg, y);
      loss.backward();
    } else {
      auto g = full<reel::bfloat16, CUDA>({}, reel::bfloat16(1.0f));
      (void)reel::detail::cuda::lce::value_and_grads(X, W, y, F::LinearCrossEntropyOptions<reel::bfloat16, CUDA>{}, g);
    }
  };
  auto unfused = [&] {
    Tensor<reel::bfloat16, CUDA> Z = matmul(X, W.mT());  // [N, V]
    auto G = empty<reel::bfloat16, CUDA>({S.N, S.V});
    auto loss_rows = empty<float, CUDA>({S.N});
    ce_rows_kernel<<<static_cast<unsigned>(S.N), 256, 0, reel::gpu::current_stream()>>>(
        Z.data_ptr(), y.data_ptr(), S.V, 1.0f / static_cast<float>(S.N), loss_rows.data_ptr(), G.data_ptr());
    REEL_CUDA_CHECK_LAUNCH("ce_rows_kernel");
    Tensor<float, CUDA> loss = mean(loss_rows);
    Tensor<reel::bfloat16, CUDA> dX = matmul(G, W);
    Tensor<reel::bfloat16, CUDA> dW = matmul(G.mT(), X);
  };

  reel::gpu::reset_peak_memory_stats();
  const double t_fused = median_ms(fused, 1, quick ? 3 : 5);
  reel::gpu::synchronize();
  const int64_t peak_fused = reel::gpu::max_memory_allocated();

  double t_unfused = -1;
  int64_t peak_unfused = -1;
  const int64_t unfused_estimate = base + 2 * S.N * S.V * 2 + S.N * 4 + (S.N + S.V) * S.D * 2;  // Z, G, loss, dX, dW
  try {
    reel::gpu::empty_cache();
    reel::gpu::reset_peak_memory_stats();
    t_unfused = median_ms(unfused, 1, quick ? 3 : 5);
    reel::gpu::synchronize();
    peak_unfused = reel::gpu::max_memory_allocated();
  } catch (const reel::error& e) {
    std::printf("unfused path failed (%s)\n", e.what());
  }

  std::printf("lce_bf16 N=%lld D=%lld V=%lld fused_path=%s\n", static_cast<long long>(S.N), static_cast<long long>(S.D),
              static_cast<long long>(S.V), autograd ? "linear_cross_entropy+backward" : "value_and_grads (one pass)");
  const double flops = 6.0 * S.N * S.V * S.D;  // logits, dX, dW
  if (t_unfused > 0) {
    std::printf("lce_time_ms fused=%.1f unfused=%.1f ratio=%.3f (fused %.0f TFLOP/s)\n", t_fused, t_unfused,
                t_fused / t_unfused, flops / (t_fused * 1e-3) / 1e12);
    std::printf("lce_peak_bytes fused=%lld unfused=%lld ratio=%.4f (inputs %lld)\n", static_cast<long long>(peak_fused),
                static_cast<long long>(peak_unfused), static_cast<double>(peak_fused) / static_cast<double>(peak_unfused),
                static_cast<long long>(base));
  } else {
    std::printf("lce_time_ms fused=%.1f unfused=n/a\n", t_fused);
    std::printf("lce_peak_bytes fused=%lld unfused_estimate=%lld ratio_estimate=%.4f (inputs %lld)\n",
                static_cast<long long>(peak_fused), static_cast<long long>(unfused_estimate),
                static_cast<double>(peak_fused) / static_cast<double>(unfused_estimate), static_cast<long long>(base));
  }
  return 0;
}
