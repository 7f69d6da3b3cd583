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
#include <array>
#include <atomic>
#include <mutex>

#include "../autograd/ir_program.hpp"
#include "runtime.hpp"

namespace reel::detail::cuda {

inline constexpr int kMaxDevices = 64;

template <class Op, class C, size_t N>
__global__ void ir_fn_address_kernel(ir::ElemFn* out) {
  *out = &ir::apply_elem<Op, C, N>;  // (in device code: the device function's address)
}

// The device address of apply_elem<Op, C, N> on the current device (fetched once per device).
template <class Op, class C, size_t N>
const void* ir_op_fn() {
  static std::array<std::atomic<ir::ElemFn>, kMaxDevices> cache{};
  const int dev = current_device();
  REEL_CHECK(dev >= 0 && dev < kMaxDevices, not_implemented_error, "autograd on CUDA: device ", dev, " (at most ",
             kMaxDevices, " devices)");
  ir::ElemFn f = cache[dev].load(std::memory_order_acquire);
  if (!f) {
    auto buf = make_device_storage(sizeof(ir::ElemFn));
    auto* p = static_cast<ir::ElemFn*>(buf->data);
    ir_fn_address_kernel<Op, C, N><<<1, 1, 0, current_stream()>>>(p);
    REEL_CUDA_CHECK_LAUNCH("ir_fn_address_kernel");
    copy_bytes(&f, p, sizeof f, cudaMemcpyDeviceToHost);  // (waits for the kernel)
    cache[dev].store(f, std::memory_order_release);
  }
  return reinterpret_cast<const void*>(f);
}

// (a template only so that every translation unit may instantiate it)
template <int = 0>
__global__ void __launch_bounds__(128) ir_eval_kernel(const ir::ProgNode* prog, const ir::ProgLaunch a) {
  REEL_CUDA_GRID_STRIDE(i, a.numel) { ir::run_program_at(prog, a, i); }
}

// The kernel calls op functions through pointers, so its stack use is not known when it is
// compiled: the per-thread stack limit (1 KiB by default) is raised once per device to hold
// the value slots, the offsets and the callees' frames.
inline void ensure_stack_for_programs() {
  static std::array<std::atomic<bool>, kMaxDevices> done{};
  const int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices || done[dev].load(std::memory_order_acquire)) return;
  constexpr size_t kNeed = 4096;
  size_t cur = 0;
  REEL_CUDA_CHECK(cudaDeviceGetLimit(&cur, cudaLimitStackSize));
  if (cur < kNeed) REEL_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitStackSize, kNeed));
  done[dev].store(true, std::memory_order_release);
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
      static_cast<const ir::ProgNode*>(buf->data), a);
  REEL_CUDA_CHECK_LAUNCH("ir_eval_kernel");
}

inline std::shared_ptr<Storage> ir_storage(size_t nbytes) { return make_device_storage(nbytes); }

}  // namespace reel::detail::cuda
