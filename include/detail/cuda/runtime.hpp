#pragma once
// Device memory, streams and host <-> device copies. Host code only: it compiles with g++
// when REEL_WITH_CUDA is defined and the CUDA headers are on the include path, and with nvcc.
#include <cuda_runtime.h>

#include <memory>

#include "../device_cache.hpp"
#include "../storage.hpp"
#include "check.hpp"

namespace reel {
namespace detail::cuda {

// The device allocator's backend: cudaMalloc / cudaFree on the given device.
struct CudaMallocBackend {
  static void* allocate(size_t n, int device) {
    int prev = 0;
    REEL_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device) REEL_CUDA_CHECK(cudaSetDevice(device));
    void* p = nullptr;
    cudaError_t st = cudaMalloc(&p, n);
    if (prev != device) REEL_CUDA_CHECK(cudaSetDevice(prev));
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the cache is emptied and the call retried
      return nullptr;
    }
    REEL_CUDA_CHECK(st);
    return p;
  }
  static void release(void* p, int) {
    // cudaFree synchronizes the device, so a block still in use by queued work is safe.
    REEL_CUDA_CHECK(cudaFree(p));
  }
};

inline BlockCache<CudaMallocBackend>& device_cache() {
  static auto* c = new BlockCache<CudaMallocBackend>();  // leaked on purpose: outlives static tensors
  return *c;
}

inline int current_device() {
  int d = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// The stream reel's kernels, copies and cuBLASLt calls are queued on, per thread (the legacy
// default stream unless a StreamGuard says otherwise).
inline cudaStream_t& current_stream_slot() {
  thread_local cudaStream_t s = nullptr;
  return s;
}
inline cudaStream_t current_stream() { return current_stream_slot(); }

inline std::shared_ptr<Storage> make_device_storage(size_t nbytes) {
  auto s = make_pooled<Storage>();
  s->nbytes = nbytes;
  s->device = DeviceType::CUDA;
  if (nbytes > 0) {
    s->data = device_cache().allocate(nbytes, current_device(), current_stream());
    s->free_fn = [](void* p, size_t) { device_cache().free(p); };
  }
  return s;
}

// Copies n bytes; waits for the copy when the destination is host memory (the caller reads it
// next) and, for pageable host sources, cudaMemcpyAsync returns once the source is staged.
inline void copy_bytes(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return;
  cudaStream_t s = current_stream();
  REEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s));
  if (kind == cudaMemcpyDeviceToHost) REEL_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace detail::cuda

// Public device API. Named `gpu`, not `cuda`: with `using namespace reel;` at file scope, a
// reel::cuda would make nvcc's generated code for Thrust/CUB kernels (which names ::cuda::std)
// ambiguous.
namespace gpu {

inline int device_count() {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
inline bool is_available() { return device_count() > 0; }
inline void set_device(int d) { REEL_CUDA_CHECK(cudaSetDevice(d)); }
inline int current_device() { return detail::cuda::current_device(); }
// Waits for all work queued on the current device.
inline void synchronize() { REEL_CUDA_CHECK(cudaDeviceSynchronize()); }

// An owned CUDA stream (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  Stream() { REEL_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_) (void)cudaStreamDestroy(s_);  // (destructors must not throw)
  }
  cudaStream_t get() const { return s_; }
  void synchronize() const { REEL_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

// Makes `s` this thread's current stream until the guard goes out of scope. Memory freed
// while it is current returns to that stream's free lists; keep tensors allocated under a
// guard alive only while their stream's work is ordered (synchronize before sharing them
// with another stream).
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t s) : prev_(detail::cuda::current_stream_slot()) { detail::cuda::current_stream_slot() = s; }
  explicit StreamGuard(const Stream& s) : StreamGuard(s.get()) {}
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;
  ~StreamGuard() { detail::cuda::current_stream_slot() = prev_; }

 private:
  cudaStream_t prev_;
};
inline cudaStream_t current_stream() { return detail::cuda::current_stream(); }

// torch.cuda.memory_allocated / max_memory_allocated / memory_reserved / empty_cache.
inline int64_t memory_allocated() { return detail::cuda::device_cache().stats().allocated; }
inline int64_t max_memory_allocated() { return detail::cuda::device_cache().stats().peak_allocated; }
inline int64_t memory_reserved() { return detail::cuda::device_cache().stats().reserved; }
inline void reset_peak_memory_stats() { detail::cuda::device_cache().reset_peak(); }
inline void empty_cache() { detail::cuda::device_cache().empty_cache(); }
inline detail::DeviceMemoryStats memory_stats() { return detail::cuda::device_cache().stats(); }

}  // namespace gpu
}  // namespace reel
