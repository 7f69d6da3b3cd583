#pragma once
// reel's CUDA backend: Tensor<T, CUDA>. Include this (instead of, or after, <reel.hpp>) from a
// translation unit compiled by nvcc with `--expt-relaxed-constexpr --extended-lambda`, and
// link CUDA::cudart and CUDA::cublasLt. CPU-only code never needs it.
//
//   auto a = reel::randn<float, reel::CUDA>({1024, 1024});
//   auto c = reel::matmul(a, a) + 1.0f;          // cuBLASLt, then one elementwise kernel
//   auto h = c.to_device<reel::CPU>();
#if !defined(__CUDACC__)
#error "reel: <cuda.hpp> holds CUDA kernels; compile this translation unit with nvcc"
#endif

#include "reel.hpp"
#include "cuda/backend.cuh"

// ---- the kernel sets of the areas
#include "cuda/multi_tensor.cuh"  // foreach and fused optimizer steps (CudaForeachKernels, CudaOptimKernels)
#include "cuda/blaslt.hpp"       // matmul / mm / bmm through cuBLASLt (CudaGemmKernels)
#include "cuda/lce.cuh"          // fused linear_cross_entropy (CudaLceKernels)
#include "cuda/scaled_mm.cuh"    // FP8 / FP4 scaled GEMMs through cuBLASLt (CudaScaledMmKernels)

namespace reel::inline REEL_ABI::detail {
// The device seam for CUDA (core/backend.hpp lists what a backend provides): one
// specialization, assembled from the kernel sets above.
template <>
struct Backend<CUDA> : CudaCoreKernels, CudaGemmKernels, CudaForeachKernels, CudaOptimKernels, CudaLceKernels,
                      CudaScaledMmKernels {};
// (core/storage.hpp's hook for type-erased host -> device copies)
inline const bool storage_to_cuda_registered = [] {
  storage_to_cuda = [](const void* host, size_t n) {
    auto s = Backend<CUDA>::make_storage(n);
    if (n) cuda::copy_bytes(s->data, host, n, cudaMemcpyHostToDevice);
    return s;
  };
  return true;
}();
}  // namespace reel::detail
