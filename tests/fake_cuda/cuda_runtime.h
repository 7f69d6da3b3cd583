#pragma once
// A stand-in for a few calls of the CUDA runtime, for testing on machines without a GPU the
// host side of reel's error handling: how its checks treat the runtime's "last error"
// (reel/cuda/check.hpp), and the mapped record kernels report bad indices into
// (reel/cuda/device_errors.hpp). It models what matters there: a failed call sets a
// per-thread last error that stays set until cudaGetLastError reads it (cudaPeekAtLastError
// reads without clearing); mapped pinned memory has one address for host and device.
#include <cstdlib>

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidDevice = 101 };
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02

namespace fake_cuda {
inline cudaError_t& last_error() {
  thread_local cudaError_t e = cudaSuccess;
  return e;
}
// What a runtime call does when it fails with st.
inline cudaError_t fail(cudaError_t st) {
  last_error() = st;
  return st;
}
}  // namespace fake_cuda

inline cudaError_t cudaGetLastError() {
  cudaError_t e = fake_cuda::last_error();
  fake_cuda::last_error() = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return fake_cuda::last_error(); }
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorInvalidDevice ? "invalid device ordinal" : e == cudaSuccess ? "no error" : "invalid argument";
}
// A runtime call that fails like cudaSetDevice(9999).
inline cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < 1 ? cudaSuccess : fake_cuda::fail(cudaErrorInvalidDevice);
}
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : fake_cuda::fail(cudaErrorInvalidValue);
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  *d = h;
  return cudaSuccess;
}
