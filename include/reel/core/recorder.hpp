#pragma once
// The hook through which the core and the evaluator tell autograd what they did: views,
// clones, evaluated expressions and in-place writes. The core declares it and calls it only
// on tensors that carry autograd state; autograd (autograd/record.hpp, the next layer up)
// defines it, which is how it installs itself. So the dependency points one way: nothing
// under core/ or expr/ includes an autograd header.
//
// A translation unit that uses the core without autograd defines REEL_NO_AUTOGRAD, which
// defines the hook here as recording nothing (and selects another inline namespace, so such
// objects never meet autograd's in one program). Using the core with neither is a compile
// error at the first recorded op ("incomplete type Recorder<...>"): include
// <reel/reel.hpp>, or <reel/autograd/record.hpp>, or define REEL_NO_AUTOGRAD.
#include "config.hpp"
#include <memory>

#include "tensor_impl.hpp"

namespace reel::inline REEL_ABI {
template <class T, class D>
class Tensor;

namespace detail {
class CaptureTrace;

// What a view did, so autograd can map gradients and tangents through it.
struct ViewSpec {
  enum Kind : uint8_t { Select, Slice, Reshape, Permute, Expand } kind;
  int64_t a = 0, b = 0, c = 0, d = 0;
  Shape shape;
};

// A tensor kept for later, with the version it must still have then.
struct SavedTensor {
  std::shared_ptr<TensorImpl> t;
  uint64_t version = 0;
};

// The leaves of an expression about to be evaluated, when autograd must record it (their
// versions are taken before the evaluation, which may overwrite one of them).
struct PendingRecord {
  PoolVector<SavedTensor> inputs;
  bool active = false;
};

// Recorder<T, D> (static members; `in`, `out`: Tensor<T, D>; e: an expression of value type T):
//   view(in, out, spec)        out is view `spec` of in; returns out with history
//   as_strided(in, out)        out = in.as_strided(...): refused where in needs a gradient
//   clone(in, out)             out holds a copy of in; returns it with history
//   begin<E>(e)                before `e` is evaluated into existing storage
//   finish<E>(pending, out, e) after: out = e
//   record<E>(out, e)          out (fresh) = e
//   check_inplace(out, records) before an in-place write into out (records: it is recorded)
//   describe<E>(trace, out, e, space, reduced, mean)  a kept kernel's description for fusion
//                              (core/capture.hpp's KernelDesc: e's graph, read in `space`)
template <class T, class D>
struct Recorder;

#if defined(REEL_NO_AUTOGRAD)
template <class T, class D>
struct Recorder {
  static Tensor<T, D> view(const Tensor<T, D>&, Tensor<T, D> out, const ViewSpec&) { return out; }
  static Tensor<T, D> as_strided(const Tensor<T, D>&, Tensor<T, D> out) { return out; }
  static Tensor<T, D> clone(const Tensor<T, D>&, Tensor<T, D> out) { return out; }
  template <class E> static PendingRecord begin(const E&) { return {}; }
  template <class E> static void finish(PendingRecord&, const Tensor<T, D>&, const E&) {}
  template <class E> static void record(const Tensor<T, D>&, const E&) {}
  static void check_inplace(const Tensor<T, D>&, bool) {}
  template <class E>
  static void describe(CaptureTrace&, const Tensor<T, D>&, const E&, const Shape&, std::vector<char>, bool) {}
};
#endif

}  // namespace detail
}  // namespace reel
