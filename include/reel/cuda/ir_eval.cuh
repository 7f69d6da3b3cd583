#pragma once
// Autograd's graphs on the GPU. A recorded expression's backward (and forward-mode tangent)
// is a run-time graph (autograd/ir.hpp) built from the ops' single definitions; on CUDA it is
// flattened into a program (autograd/ir_program.hpp) and one kernel evaluates it fused: each
// thread computes its elements' operand offsets and walks the program, calling each op's
// __host__ __device__ `apply` through a device function pointer.
//
// The device function of an (op, compute type, arity) is instantiated where the CUDA graph
// node for it is (ir::op_info<..., CUDA>, in an nvcc translation unit) and its address is
// read once per device by a one-thread kernel.
//
// A device function may only be called from a kernel of its own device module (the module
// binds its constants). Without relocatable device code every .cu file is a module of its
// own, so a program that differentiates on CUDA from several .cu files must compile them
// with -rdc=true (CMake: CUDA_SEPARABLE_COMPILATION ON), which links one module; a program
// of one .cu file needs nothing. The op's module and the evaluator's are compared (by the
// address of an inline device function each module has one copy of) and a mismatch is an
// error saying so, not a wrong result.
#include "../core/config.hpp"
#include <array>
#include <atomic>
#include <mutex>

#include "../autograd/ir_program.hpp"
#include "runtime.hpp"

namespace reel::inline REEL_ABI::detail::cuda {

inline constexpr int kMaxDevices = 64;

// One copy per device module (vague linkage: the device linker keeps one under -rdc).
inline __device__ void module_marker() {}
using MarkerFn = void (*)();

template <class Op, class C, size_t N>
__global__ void ir_fn_address_kernel(ir::ElemFn* out, MarkerFn* module) {
  *out = &ir::apply_elem<Op, C, N>;  // (in device code: the device function's address)
  *module = &module_marker;
}

// (a template only so that every translation unit may instantiate it) With `probe`, it only
// reports its module.
template <int = 0>
// (__grid_constant__: run_program_at reads the 3.5 KB launch description in place, in the
// parameter space, instead of from a copy on each thread's stack.)
__global__ void __launch_bounds__(128) ir_eval_kernel(const ir::ProgNode* prog, const __grid_constant__ ir::ProgLaunch a,
                                                      MarkerFn* probe) {
  if (probe) {
    *probe = &module_marker;
    return;
  }
  REEL_CUDA_GRID_STRIDE(i, a.numel) { ir::run_program_at(prog, a, i); }
}

// Runs a one-thread kernel that writes two pointers, and returns them.
template <class Launch>
std::array<void*, 2> fetch_two_pointers(Launch&& launch) {
  auto buf = make_device_storage(2 * sizeof(void*));
  auto* p = static_cast<void**>(buf->data);
  launch(p);
  std::array<void*, 2> r{};
  copy_bytes(r.data(), p, sizeof r, cudaMemcpyDeviceToHost);  // (waits for the kernel)
  return r;
}

inline int checked_device() {
  const int dev = current_device();
  REEL_CHECK(dev >= 0 && dev < kMaxDevices, not_implemented_error, "autograd on CUDA: device ", dev, " (at most ",
             kMaxDevices, " devices)");
  return dev;
}

// The kernel calls op functions through pointers, so the compiler cannot size the stack of
// the whole call chain, and the per-thread stack limit (1 KiB by default) must cover it: the
// kernel's own frame (its value slots and offsets: 800 bytes for sm_90 with nvcc 13, from
// `nvcc -Xptxas -v`; read here at run time as the kernel's local memory size) plus the
// deepest callee chain, an op's apply_elem and the math routines it calls. Measured the same
// way over the ops the CUDA tests differentiate, the deepest is 72 bytes (double sin/cos: an
// 8-byte frame, then CUDA's 40-byte trigonometric slow path), so kCalleeStack = 1 KiB leaves
// a wide margin for ops with larger routines. The limit is set once per device; the driver
// reserves it for every resident thread (about 0.5 GB on an H200 with this limit, against
// 1.1 GB for the 4 KiB used before the measurement).
inline constexpr size_t kCalleeStack = 1024;
inline void ensure_stack_for_programs() {
  static std::array<std::atomic<bool>, kMaxDevices> done{};
  const int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices || done[dev].load(std::memory_order_acquire)) return;
  cudaFuncAttributes attr{};
  REEL_CUDA_CHECK(cudaFuncGetAttributes(&attr, ir_eval_kernel<0>));
  const size_t need = (attr.localSizeBytes + kCalleeStack + 255) / 256 * 256;
  size_t cur = 0;
  REEL_CUDA_CHECK(cudaDeviceGetLimit(&cur, cudaLimitStackSize));
  if (cur < need) REEL_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitStackSize, need));
  done[dev].store(true, std::memory_order_release);
}
// The stack limit the device runs programs with (for tests and diagnostics).
inline size_t program_stack_limit() {
  ensure_stack_for_programs();
  size_t cur = 0;
  REEL_CUDA_CHECK(cudaDeviceGetLimit(&cur, cudaLimitStackSize));
  return cur;
}

// The module of the graph evaluator on the current device.
inline void* evaluator_module() {
  static std::array<std::atomic<void*>, kMaxDevices> cache{};
  const int dev = checked_device();
  void* m = cache[dev].load(std::memory_order_acquire);
  if (!m) {
    ensure_stack_for_programs();
    m = fetch_two_pointers([](void** p) {
      ir_eval_kernel<<<1, 1, 0, current_stream()>>>(nullptr, ir::ProgLaunch{}, reinterpret_cast<MarkerFn*>(p));
      REEL_CUDA_CHECK_LAUNCH("ir_eval_kernel (probe)");
    })[0];
    cache[dev].store(m, std::memory_order_release);
  }
  return m;
}

// The device address of apply_elem<Op, C, N> on the current device (fetched once per device).
template <class Op, class C, size_t N>
const void* ir_op_fn() {
  static std::array<std::atomic<void*>, kMaxDevices> cache{};
  const int dev = checked_device();
  void* f = cache[dev].load(std::memory_order_acquire);
  if (!f) {
    auto r = fetch_two_pointers([](void** p) {
      ir_fn_address_kernel<Op, C, N><<<1, 1, 0, current_stream()>>>(reinterpret_cast<ir::ElemFn*>(p),
                                                                      reinterpret_cast<MarkerFn*>(p + 1));
      REEL_CUDA_CHECK_LAUNCH("ir_fn_address_kernel");
    });
    REEL_CHECK(r[1] == evaluator_module(), not_implemented_error,
               "autograd on CUDA: the device code of an op (", ir::op_name<Op>(), ") and autograd's graph evaluator ",
               "are in different device modules: the program's .cu files were compiled without relocatable device ",
               "code. Compile them with -rdc=true (CMake: set_target_properties(<target> PROPERTIES ",
               "CUDA_SEPARABLE_COMPILATION ON)), or differentiate from one .cu file.");
    f = r[0];
    cache[dev].store(f, std::memory_order_release);
  }
  return f;
}

// ir::IrDevice::evaluate for CUDA graphs (the contract of ir::evaluate).
inline void ir_evaluate(const ir::Graph& g, std::span<const TensorImpl* const> leaves, std::span<const int> roots,
                        std::span<TensorImpl* const> outs, const std::vector<char>& live) {
  thread_local std::vector<ir::ProgNode> prog;
  ir::ProgLaunch a;
  auto fn_of = [](const ir::OpInfo* op) {
    REEL_CHECK(op->device_fn, error, "autograd: a CPU op (", op->name, ") in a CUDA graph");
    return reinterpret_cast<ir::ElemFn>(const_cast<void*>(op->device_fn()));
  };
  if (!ir::prepare_program(g, leaves, roots, outs, live, fn_of, prog, a)) return;
  // The program goes to device memory (stream-ordered: the block is reused only by later
  // work on this stream). A pageable source is staged before cudaMemcpyAsync returns.
  const size_t bytes = prog.size() * sizeof(ir::ProgNode);
  auto buf = make_device_storage(bytes);
  copy_bytes(buf->data, prog.data(), bytes, cudaMemcpyHostToDevice);
  ensure_stack_for_programs();
  const Launch1D l = launch_1d(a.numel, 128);
  ir_eval_kernel<<<static_cast<unsigned>(l.blocks), l.threads, 0, current_stream()>>>(
      static_cast<const ir::ProgNode*>(buf->data), a, nullptr);
  REEL_CUDA_CHECK_LAUNCH("ir_eval_kernel");
}

inline std::shared_ptr<Storage> ir_storage(size_t nbytes) { return make_device_storage(nbytes); }

}  // namespace reel::detail::cuda
