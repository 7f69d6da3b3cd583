#pragma once
// Device memory, streams and host <-> device copies. Host code only: it compiles with g++
// when REEL_WITH_CUDA is defined and the CUDA headers are on the include path, and with nvcc.
#include "../core/config.hpp"
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "../core/device_cache.hpp"
#include "../core/storage.hpp"
#include "check.hpp"
#include "device_errors.hpp"

namespace reel::inline REEL_ABI {
template <class T, class D> class Tensor;
namespace detail::cuda {

// The CUDA handle behind a StreamId the allocator may record events on (see record_stream).
struct StreamRef {
  cudaStream_t handle;
  int device;
};
class StreamRefs {
 public:
  void remember(StreamId id, StreamRef r) {
    std::lock_guard<std::mutex> lock(mu_);
    refs_[id] = r;
  }
  std::optional<StreamRef> find(StreamId id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = refs_.find(id);
    return it == refs_.end() ? std::nullopt : std::optional<StreamRef>(it->second);
  }
  void forget(StreamId id) {
    std::lock_guard<std::mutex> lock(mu_);
    refs_.erase(id);
  }

 private:
  std::mutex mu_;
  std::unordered_map<StreamId, StreamRef> refs_;
};
inline StreamRefs& stream_refs() {
  static auto* r = new StreamRefs();  // leaked on purpose, like device_cache()
  return *r;
}

// Makes `device` current for its lifetime; never throws (failures are cleared: its users
// run in destructors).
class DeviceSwitch {
 public:
  explicit DeviceSwitch(int device) noexcept : want_(device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = device;
    }
    if (prev_ != device && cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;
  ~DeviceSwitch() {
    if (prev_ != want_ && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  int prev_ = 0, want_;
};

// The device allocator's backend: cudaMalloc / cudaFree on the given device, and events on
// the streams record_stream named.
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
  // Runs when a tensor is freed (often in a destructor), so it never throws: when no event can
  // be recorded it waits for the device instead and returns no event (already complete).
  static cudaEvent_t record_event(int device, StreamId s) noexcept {
    const std::optional<StreamRef> ref = stream_refs().find(s);
    DeviceSwitch on(ref ? ref->device : device);  // an event lives on its stream's device
    cudaEvent_t e = nullptr;
    if (ref) {
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess) {
        if (cudaEventRecord(e, ref->handle) == cudaSuccess) return e;
        (void)cudaEventDestroy(e);
      }
      (void)cudaGetLastError();
    }
    if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
    return nullptr;
  }
  static bool event_done(cudaEvent_t e) {
    if (!e) return true;
    cudaError_t st = cudaEventQuery(e);
    if (st == cudaSuccess) return true;
    (void)cudaGetLastError();  // (cudaErrorNotReady too: it is not a failure)
    if (st == cudaErrorNotReady) return false;
    raise_cuda("cudaEventQuery", st, __FILE__, __LINE__);
  }
  static void event_synchronize(cudaEvent_t e) {
    if (e) REEL_CUDA_CHECK(cudaEventSynchronize(e));
  }
  static void destroy_event(cudaEvent_t e) noexcept {
    if (e && cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
  }
};

inline BlockCache<CudaMallocBackend>& device_cache() {
  static auto* c = new BlockCache<CudaMallocBackend>();  // leaked on purpose: outlives static tensors
  return *c;
}
inline void free_device_block(void* p, size_t) { device_cache().free(p); }

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

// A stream's identity, the allocator's key for it. cudaStreamGetId resolves the default-stream
// handles to the stream they mean for the calling thread and current device: 0 to the legacy
// default stream (one per device, shared by all threads) or, compiled with
// --default-stream per-thread, to the calling thread's own default stream;
// cudaStreamPerThread to the calling thread's default stream; cudaStreamLegacy to the legacy
// one. Ids are unique for the life of the program, so a destroyed stream's is never reused.
inline StreamId stream_id(cudaStream_t s) {
  unsigned long long id = 0;
  REEL_CUDA_CHECK(cudaStreamGetId(s, &id));
  return id;
}
inline StreamId current_stream_id() { return stream_id(current_stream()); }

// Memory that other parts keep per stream for the life of the process (cuBLASLt workspaces)
// is given back through these hooks: for one stream when it is destroyed, for all streams
// (nullopt) when the cache is emptied.
using ReleaseHook = void (*)(std::optional<StreamId>);
inline std::mutex& release_hooks_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<ReleaseHook>& release_hooks() {
  static auto* v = new std::vector<ReleaseHook>();
  return *v;
}
inline void add_release_hook(ReleaseHook h) {
  std::lock_guard<std::mutex> lock(release_hooks_mutex());
  release_hooks().push_back(h);
}
inline void run_release_hooks(std::optional<StreamId> s) {
  std::vector<ReleaseHook> hooks;
  {
    std::lock_guard<std::mutex> lock(release_hooks_mutex());
    hooks = release_hooks();
  }
  for (ReleaseHook h : hooks) h(s);
}

// Device memory for work queued on `stream` (by default the current stream).
inline std::shared_ptr<Storage> make_device_storage(size_t nbytes, StreamId stream) {
  auto s = make_pooled<Storage>();
  s->nbytes = nbytes;
  s->device = DeviceType::CUDA;
  if (nbytes > 0) {
    s->data = device_cache().allocate(nbytes, current_device(), stream);
    s->free_fn = &free_device_block;
  }
  return s;
}
inline std::shared_ptr<Storage> make_device_storage(size_t nbytes) {
  return nbytes > 0 ? make_device_storage(nbytes, current_stream_id()) : make_device_storage(0, 0);
}

// Copies n bytes; waits for the copy when the destination is host memory (the caller reads it
// next) and, for pageable host sources, cudaMemcpyAsync returns once the source is staged.
inline void copy_bytes(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return;
  cudaStream_t s = current_stream();
  REEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s));
  if (kind == cudaMemcpyDeviceToHost) {
    REEL_CUDA_CHECK(cudaStreamSynchronize(s));
    check_device_errors();  // (what the kernels before the copy reported)
  }
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
// Waits for all work queued on the current device; raises what its kernels reported
// (reel/cuda/device_errors.hpp).
inline void synchronize() {
  REEL_CUDA_CHECK(cudaDeviceSynchronize());
  detail::cuda::check_device_errors();
}

// An owned CUDA stream (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  Stream() {
    REEL_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    id_ = detail::cuda::stream_id(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // Waits for the stream's work, so the allocator may hand its blocks to any stream. (It
  // must not throw: failures are cleared, and a stream that could not be synchronized keeps
  // its blocks to itself.)
  ~Stream() {
    if (cudaStreamSynchronize(s_) == cudaSuccess) {
      try {
        detail::cuda::run_release_hooks(id_);
      } catch (...) {  // (a destructor: the memory stays with the hook's owner)
      }
      detail::cuda::device_cache().stream_destroyed(id_);
    } else {
      (void)cudaGetLastError();
    }
    detail::cuda::stream_refs().forget(id_);
    if (cudaStreamDestroy(s_) != cudaSuccess) (void)cudaGetLastError();
  }
  cudaStream_t get() const { return s_; }
  void synchronize() const {
    REEL_CUDA_CHECK(cudaStreamSynchronize(s_));
    int device = 0;
    REEL_CUDA_CHECK(cudaStreamGetDevice(s_, &device));
    detail::cuda::check_device_errors(device);
  }

 private:
  cudaStream_t s_ = nullptr;
  detail::StreamId id_ = 0;
};

// Makes `s` this thread's current stream until the guard goes out of scope. Memory allocated
// while it is current belongs to `s`: once freed, it is handed out again only for work on `s`
// (ordered after the earlier work there). A tensor also used on another stream needs
// gpu::record_stream(t, other), or its memory may be reused while `other` still reads it;
// this holds after `s` is destroyed too (its blocks then go to every stream), so a tensor made
// under a gpu::Stream and used later on the default stream is recorded for that stream.
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

// torch.Tensor.record_stream: t's memory is also used by work queued on `s`, so when t's
// storage is freed the allocator waits for the work queued on `s` by then before handing
// the memory out again. A raw `s` must outlive t's storage (a gpu::Stream may go first: its
// destructor waits for its work). Storage the allocator does not own is left alone.
template <class T>
void record_stream(const Tensor<T, CUDA>& t, cudaStream_t s) {
  const auto& st = t.impl().storage;
  if (!st || !st->data || st->free_fn != &detail::cuda::free_device_block) return;
  const detail::StreamId id = detail::cuda::stream_id(s);
  int device = 0;
  REEL_CUDA_CHECK(cudaStreamGetDevice(s, &device));
  // The default-stream handles name the calling thread's stream, but the event is recorded by
  // whichever thread frees t: use the legacy default stream, whose work is ordered after the
  // work of every blocking stream, per-thread default streams included.
  const bool default_stream = s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
  detail::cuda::stream_refs().remember(id, {default_stream ? cudaStreamLegacy : s, device});
  detail::cuda::device_cache().record_stream(st->data, id);
}

// torch.cuda.memory_allocated / max_memory_allocated / memory_reserved / empty_cache.
inline int64_t memory_allocated() { return detail::cuda::device_cache().stats().allocated; }
inline int64_t max_memory_allocated() { return detail::cuda::device_cache().stats().peak_allocated; }
inline int64_t memory_reserved() { return detail::cuda::device_cache().stats().reserved; }
inline void reset_peak_memory_stats() { detail::cuda::device_cache().reset_peak(); }
inline void empty_cache() {
  detail::cuda::run_release_hooks(std::nullopt);  // cuBLASLt workspaces too
  detail::cuda::device_cache().empty_cache();
}
inline detail::DeviceMemoryStats memory_stats() { return detail::cuda::device_cache().stats(); }

}  // namespace gpu
}  // namespace reel
