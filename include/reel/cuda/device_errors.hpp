#pragma once
// Errors that kernels find (an index out of range), reported without stopping the host.
//
// Checking indices on the host means copying them there and waiting for the GPU before every
// gather, embedding or cross-entropy: the pipeline drains each time. Instead the kernel that
// meets a bad index writes it into a small record in pinned host memory mapped into the
// device (the first report wins; the kernel skips the bad element and writes nothing for it),
// and the host reads the record whenever it synchronizes with the device anyway: a copy to
// the host, item(), gpu::synchronize(), Stream::synchronize(). The error is raised there as
// an index_error saying which kind of kernel reported what. So, as with PyTorch's device-side
// asserts, a bad index surfaces at the next synchronization rather than at the call (but
// without destroying the CUDA context).
#include "../core/config.hpp"
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "check.hpp"

namespace reel::inline REEL_ABI::detail::cuda {

enum class DeviceErrorSite : int32_t { Gather = 1, ScatterAdd, CrossEntropyTarget, Scatter };

struct DeviceErrorRecord {
  unsigned long long claimed;  // 0: none; 1: a kernel is writing its report; 2: the report is there
  int32_t site;                // a DeviceErrorSite
  int64_t value;               // the bad index
  int64_t bound;               // the valid range is [0, bound)
};

// The index_error a record stands for (host only; tested on the CPU).
[[noreturn, gnu::cold]] inline void raise_device_error(const DeviceErrorRecord& r) {
  const char* what = r.site == static_cast<int32_t>(DeviceErrorSite::Gather)       ? "gather (or embedding)"
                     : r.site == static_cast<int32_t>(DeviceErrorSite::ScatterAdd) ? "scatter_add"
                     : r.site == static_cast<int32_t>(DeviceErrorSite::Scatter)    ? "scatter"
                     : r.site == static_cast<int32_t>(DeviceErrorSite::CrossEntropyTarget)
                         ? "linear_cross_entropy: a target class"
                         : "a CUDA kernel";
  raise<index_error>(what, ": index ", r.value, " is out of range for size ", r.bound,
                     " (found by the device; raised at the first synchronization after the kernel, so the "
                     "failing call may be an earlier one)");
}

// The record of the current device, as the device addresses it (allocated on first use,
// pinned and mapped; never freed: kernels may hold its address until the process ends).
struct DeviceErrorMailbox {
  DeviceErrorRecord* host = nullptr;
  DeviceErrorRecord* device = nullptr;
};
inline std::mutex& device_error_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<DeviceErrorMailbox>& device_error_mailboxes() {
  static auto* v = new std::vector<DeviceErrorMailbox>();  // (leaked on purpose, like the allocator)
  return *v;
}
inline DeviceErrorRecord* device_error_record() {
  int dev = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(device_error_mutex());
  auto& boxes = device_error_mailboxes();
  if (static_cast<int>(boxes.size()) <= dev) boxes.resize(dev + 1);
  DeviceErrorMailbox& b = boxes[dev];
  if (!b.host) {
    void* p = nullptr;
    REEL_CUDA_CHECK(cudaHostAlloc(&p, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, sizeof(DeviceErrorRecord));
    void* d = nullptr;
    REEL_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    b.host = static_cast<DeviceErrorRecord*>(p);
    b.device = static_cast<DeviceErrorRecord*>(d);
  }
  return b.device;
}
// After the host has synchronized with device `dev`: raises the first error a kernel there
// reported since the last check (and clears it).
inline void check_device_errors(int dev) {
  DeviceErrorRecord r;
  {
    std::lock_guard<std::mutex> lock(device_error_mutex());
    auto& boxes = device_error_mailboxes();
    if (static_cast<int>(boxes.size()) <= dev || !boxes[dev].host) return;  // nothing ever reported here
    volatile DeviceErrorRecord* h = boxes[dev].host;
    // (1: a kernel on another stream, not synchronized with, is still writing: its report is
    // raised at a later check)
    if (h->claimed != 2) return;
    r.claimed = h->claimed;
    r.site = h->site;
    r.value = h->value;
    r.bound = h->bound;
    __atomic_store_n(&boxes[dev].host->claimed, 0ull, __ATOMIC_SEQ_CST);
  }
  raise_device_error(r);
}
inline void check_device_errors() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  check_device_errors(dev);
}

#if defined(__CUDACC__)
// In a kernel: report a bad index (the first report of all threads and kernels is kept). The
// claim (0 -> 1) comes first, the fields next, then the report is published (-> 2), so a host
// that reads the record while the kernel runs never takes half-written fields. (The plain
// read first spares a system-wide atomic per bad element once a report is there.)
__device__ inline void report_device_error(DeviceErrorRecord* r, DeviceErrorSite site, int64_t value, int64_t bound) {
  if (*reinterpret_cast<volatile unsigned long long*>(&r->claimed) != 0) return;
  if (atomicCAS_system(&r->claimed, 0ull, 1ull) == 0ull) {
    r->site = static_cast<int32_t>(site);
    r->value = value;
    r->bound = bound;
    __threadfence_system();
    atomicExch_system(&r->claimed, 2ull);
  }
}
#endif

}  // namespace reel::detail::cuda
