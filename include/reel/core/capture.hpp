#pragma once
// Kernel capture for autograd::compile (autograd_compile.hpp).
//
// While a function is captured, every kernel that reel can replay runs through
// CaptureTrace::record: it runs at once, as always, and is kept (owning the tensors it reads
// and writes) so that a replay runs the same kernels on the same buffers with no planning,
// allocation, recording or graph walk. Everything else that touches tensor memory is
// watched, so a capture that replay would get wrong is refused instead (the compiled
// function then runs eagerly): a storage allocated outside a kept kernel that is still alive
// at the end but was written by none of them (an op compile cannot replay produced it), an
// in-place write (version bump) that no kept kernel made, a read of values on the host
// (item, to_vector: control flow would be frozen), random draws, and accumulation into
// .grad. Only the outermost kernel is kept: kernels called inside it run as its parts.
#include "config.hpp"
#include <algorithm>
#include <utility>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace reel::inline REEL_ABI::detail {

struct Storage;
struct TensorImpl;
namespace ir {
struct Graph;
}

// What a kept kernel computes, where compile can fuse and generate code for it
// (autograd/fusion.hpp): outs[r] = the graph's node roots[r] over its leaf tensors (leaf
// slot k reads leaves[k] in place, broadcast to `space`; null: a slot no root needs), or,
// when `reduced` marks dims of `space`, the sum (mean) of the one root over those dims.
struct KernelDesc {
  std::shared_ptr<const ir::Graph> graph;
  std::vector<int> roots;
  std::vector<std::shared_ptr<TensorImpl>> leaves;
  std::vector<std::shared_ptr<TensorImpl>> outs;
  std::vector<int64_t> space;
  std::vector<char> reduced;  // per dim of space; empty: elementwise
  bool mean = false;
};

// A kept kernel: the callable on the heap and two plain functions (an expression type
// instantiates these two, far cheaper to compile than a std::function of its own).
class CaptureStep {
 public:
  template <class F>
  explicit CaptureStep(F&& f)
      : obj_(new std::decay_t<F>(std::forward<F>(f))), run_(&call<std::decay_t<F>>), del_(&destroy<std::decay_t<F>>) {}
  CaptureStep(CaptureStep&& o) noexcept : obj_(std::exchange(o.obj_, nullptr)), run_(o.run_), del_(o.del_) {}
  CaptureStep& operator=(CaptureStep&& o) noexcept {
    std::swap(obj_, o.obj_);
    std::swap(run_, o.run_);
    std::swap(del_, o.del_);
    return *this;
  }
  ~CaptureStep() {
    if (obj_) del_(obj_);
  }
  void operator()() const { run_(obj_); }

 private:
  template <class F> static void call(void* f) { (*static_cast<F*>(f))(); }
  template <class F> static void destroy(void* f) { delete static_cast<F*>(f); }
  void* obj_;
  void (*run_)(void*);
  void (*del_)(void*);
};

class CaptureTrace {
 public:
  // Runs `step` now and keeps it for replay; `writes` / `reads`: the storages it writes and
  // reads (for share_buffers).
  template <class F>
  void record(const std::vector<const Storage*>& writes, std::vector<const Storage*> reads, F&& step) {
    keep(writes, std::move(reads), CaptureStep(std::forward<F>(step)));
  }
  REEL_INLINE void keep(const std::vector<const Storage*>& writes, std::vector<const Storage*> reads,
                        CaptureStep kept);
  // keep for a kernel writing one storage and reading n (what an expression type instantiates).
  REEL_INLINE void keep_kernel(const Storage* write, const Storage* const* reads, size_t n, CaptureStep kept);
  // Kernel descriptions (for fusion): wanted only when the compiled function fuses. describe
  // attaches one to the kernel kept last.
  bool wants_descs() const { return want_descs_; }
  void want_descs(bool w) { want_descs_ = w; }
  void describe(std::shared_ptr<const KernelDesc> d) { descs_.back() = std::move(d); }
  // A storage allocated by the captured function (outside a kept kernel).
  void note_fresh(const std::shared_ptr<Storage>& s) {
    std::erase(written_, s.get());  // a new storage at a freed one's address is not written yet
    fresh_.emplace_back(s, s.get());
  }
  // An in-place write: it must be the last kept kernel's.
  void note_bump(const Storage* s) {
    if (std::find(last_writes_.begin(), last_writes_.end(), s) == last_writes_.end())
      refuse("an in-place write by an op that compile cannot replay");
  }
  void refuse(const char* why) {
    if (refusal_.empty()) refusal_ = why;
  }
  // After the captured function returned and dropped its temporaries: why this trace cannot
  // be replayed ("" when it can).
  std::string check() {
    if (!refusal_.empty()) return refusal_;
    for (auto& [w, p] : fresh_)
      if (!w.expired() && std::find(written_.begin(), written_.end(), p) == written_.end())
        return "a result of an op that compile cannot replay (its kernel is not captured)";
    return {};
  }
  // After check(): lets the buffers of the function's temporaries share memory as an eager
  // run's would (it frees each after its last use and allocates the next in its place),
  // so a replay's working set is an eager run's, not the sum of every buffer. Each storage
  // allocated by the function, used by the kept kernels and not in `keep` (the results) is
  // given a place in one block for the kernels from its first use to its last; places
  // whose kernels do not overlap overlap. Kernels read their buffers' addresses when they
  // run, so moving a storage's bytes moves every kernel's view of it.
  // Returns the block's bytes.
  size_t share_buffers(const std::vector<const Storage*>& keep);
  // After check(): constant folding. A kept kernel that depends on nothing a caller can
  // change (eye(n), a mask, 1 - eye(n): it reads only buffers the function allocated that
  // only such kernels write) computes the same bytes at every replay, so replays skip it and
  // its buffers keep the values of the capture. A buffer stays constant only if no other
  // kernel writes it and none reads it before its last write. Returns the constant buffers
  // (to keep out of share_buffers, which would reuse their bytes); folded() marks their
  // kernels.
  std::vector<const Storage*> fold_constants();
  const std::vector<char>& folded() const { return folded_; }
  bool inside_step() const { return depth_ > 0; }
  // Forgets the kernels kept since mark() returned m (work the function threw away).
  size_t mark() const { return steps_.size(); }
  void rollback(size_t m) {
    steps_.erase(steps_.begin() + static_cast<std::ptrdiff_t>(m), steps_.end());
    reads_.resize(m);
    writes_.resize(m);
    uses_.resize(m);
    descs_.resize(m);
    last_writes_.clear();
  }
  std::vector<CaptureStep> take_steps() { return std::move(steps_); }
  // Per kept kernel: its description (null: none), the storages it reads, those it writes.
  const std::vector<std::shared_ptr<const KernelDesc>>& descs() const { return descs_; }
  // Kernel `step` also reads storage s (fusion moved a read there): share_buffers keeps s alive
  // until then.
  void extend_use(size_t step, const Storage* s) { uses_[step].push_back(s); }
  const std::vector<std::vector<const Storage*>>& step_reads() const { return reads_; }
  // The storages the captured function allocated that are still alive.
  std::vector<const Storage*> fresh_storages() const {
    std::vector<const Storage*> r;
    for (const auto& [w, p] : fresh_)
      if (!w.expired()) r.push_back(p);
    return r;
  }
  const std::vector<std::vector<const Storage*>>& step_writes() const { return writes_; }

 private:
  std::vector<CaptureStep> steps_;
  std::vector<std::pair<std::weak_ptr<Storage>, const Storage*>> fresh_;
  std::vector<const Storage*> written_, last_writes_;
  std::vector<std::vector<const Storage*>> uses_;  // per kept kernel: the storages it reads or writes
  std::vector<std::vector<const Storage*>> reads_, writes_;  // per kept kernel: what it reads, what it writes
  std::vector<char> folded_;                                // per kept kernel: constant (fold_constants)
  std::vector<std::shared_ptr<const KernelDesc>> descs_;    // per kept kernel (null: none)
  bool want_descs_ = false;
  std::string refusal_;
  int depth_ = 0;
};


inline CaptureTrace*& capture_slot() {
  thread_local CaptureTrace* t = nullptr;
  return t;
}
// The capture this thread is recording at top level (not inside a kept kernel), or null.
inline CaptureTrace* capturing() {
  CaptureTrace* t = capture_slot();
  return t && !t->inside_step() ? t : nullptr;
}
REEL_INLINE void capture_refuse(const char* why);

// Runs `step` (which must own what it uses: tensors by value) now, and keeps it when a
// capture is recording. `writes` / `reads`: the storages it writes and reads. The step must
// take its data pointers when it runs (a capture may move buffers), not before.
template <class F>
void kernel_step(std::initializer_list<const Storage*> writes, std::initializer_list<const Storage*> reads, F&& step) {
  if (CaptureTrace* t = capturing())
    t->record(std::vector<const Storage*>(writes), std::vector<const Storage*>(reads), std::forward<F>(step));
  else
    step();
}
// The same for a kernel that reads no tensor.
template <class F>
void kernel_step(std::initializer_list<const Storage*> writes, F&& step) {
  kernel_step(writes, {}, std::forward<F>(step));
}

}  // namespace reel::detail

#ifndef REEL_COMPILED_LIB
#include "capture-inl.hpp"
#endif
