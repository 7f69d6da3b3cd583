#pragma once
// Every CUDA runtime and cuBLASLt call goes through one of these: a failure becomes a
// reel::error naming the call, the status's name and its description.
//
// A failed runtime call also sets the runtime's "last error", which stays set until someone
// reads it: Thrust and CUB peek at it after their launches, and REEL_CUDA_CHECK_LAUNCH reads it,
// so a failure that was already reported (and maybe caught, as a test of an invalid device
// does) would be reported again by the next, innocent launch. raise_cuda clears it first.
// (Sticky errors, such as an illegal address inside a kernel, corrupt the context and
// cannot be cleared: every later call reports them, which is the truth.)
#include "../core/config.hpp"
#include <cuda_runtime.h>

#include "../core/errors.hpp"

namespace reel::inline REEL_ABI::detail::cuda {

[[noreturn, gnu::cold]] inline void raise_cuda(const char* call, cudaError_t st, const char* file, int line) {
  (void)cudaGetLastError();
  raise<error>("CUDA call `", call, "` failed with ", cudaGetErrorName(st), " (", static_cast<int>(st),
               "): ", cudaGetErrorString(st), " [", file, ":", line, "]");
}

}  // namespace reel::detail::cuda

#define REEL_CUDA_CHECK(call)                                                                   \
  do {                                                                                          \
    cudaError_t reel_cuda_status_ = (call);                                                     \
    if (reel_cuda_status_ != cudaSuccess)                                                       \
      ::reel::detail::cuda::raise_cuda(#call, reel_cuda_status_, __FILE__, __LINE__);           \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (cudaGetLastError also
// clears them, so the next check does not report a stale failure).
#define REEL_CUDA_CHECK_LAUNCH(kernel_name)                                                     \
  do {                                                                                          \
    cudaError_t reel_cuda_status_ = cudaGetLastError();                                         \
    if (reel_cuda_status_ != cudaSuccess)                                                       \
      ::reel::detail::cuda::raise_cuda("launch of " kernel_name, reel_cuda_status_, __FILE__, __LINE__); \
  } while (0)
