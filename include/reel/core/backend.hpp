#pragma once
// The one device seam. Wherever what an op does depends on its device, it asks Backend<D>:
// where the device's memory is, and, for a device whose memory the host cannot read, the
// kernels that run there. Each device specializes it in one place:
//   Backend<CPU>   here: host memory; an op runs its own loop (Eigen, OpenMP) in its file
//   Backend<Meta>  here: no memory at all (shapes, dtypes and storage identity only)
//   Backend<CUDA>  <reel/cuda.hpp>: device memory, its kernels assembled there from the
//                  kernel sets of reel/cuda/ (core, GEMM, foreach, optimizers, cross-entropy)
// So no header outside reel/cuda/ names a device to choose a code path, CPU-only translation
// units never see CUDA code, and one that uses CUDA tensors without <reel/cuda.hpp> stops at
// "incomplete type Backend<CUDA>". (PyTorch's DispatchStub registers a kernel per device at
// run time; here the registration is the specialization, resolved at compile time.)
//
// Every backend:
//   has_data, host_memory          Meta: false, false; CPU: true, true; CUDA: true, false
//   make_storage(nbytes)
// A backend with device memory (device_memory_v<D>) also provides, for the ops that use them:
//   eval_into(out, e)                                one elementwise kernel for an expression
//   copy_between<T, D2>(src)                         host <-> device (src contiguous)
//   fill_by_index(p, n, f)                           p[i] = f(i)
//   reduce_runs<K>(src, dst, outer, inner)           sum / mean / max / argmax ... of each run
//   gather_lines<LineOp>(src, idx, out, lines, k, n), scan_lines<Prod>(...), sort_lines(...)
//   ir_device(), ir_op_fn<Op, C, N>()                autograd's graphs evaluated on the device
//   bmm(a, b, out)                                   batched GEMM
//   foreach_supports<Def, T>, foreach_run<Def, InPlace>(...), foreach_zero_supports<T>,
//   foreach_zero(...)                                multi-tensor kernels
//   sgd(...), adam(...)                              fused optimizer steps (false: not fusable)
//   linear_cross_entropy(...)                        the fused loss
#include "config.hpp"
#include <memory>

#include "storage.hpp"

namespace reel::inline REEL_ABI::detail {

// What gather_lines does with element j of line l: gather o[l, j] = s[l, idx[l, j]], or into
// o[l, idx[l, j]] add (ScatterAdd) or store (Scatter: the last index of a line wins on the
// CPU; on CUDA, as in PyTorch, one of the duplicates, unspecified) s[l, j].
enum class LineOp { Gather, ScatterAdd, Scatter };

template <class D>
struct Backend;

template <>
struct Backend<CPU> {
  static constexpr bool has_data = true, host_memory = true;
  static std::shared_ptr<Storage> make_storage(size_t nbytes) { return detail::make_storage(nbytes, DeviceType::CPU); }
};

template <>
struct Backend<Meta> {
  static constexpr bool has_data = false, host_memory = false;
  static std::shared_ptr<Storage> make_storage(size_t nbytes) { return detail::make_storage(nbytes, DeviceType::Meta); }
};

// Defined by <reel/cuda.hpp>.
template <>
struct Backend<CUDA>;

// The device holds data the host cannot read: its ops run the backend's kernels.
template <class D>
inline constexpr bool device_memory_v = Backend<D>::has_data && !Backend<D>::host_memory;

}  // namespace reel::detail
