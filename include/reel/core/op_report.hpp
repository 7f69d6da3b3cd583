#pragma once
// What activation checkpointing (autograd/checkpoint.hpp) sees of the ops a checkpointed
// function runs. Ops that report themselves (the matrix products, custom ops of
// reel::library) run their computation through detail::report_op: outside a checkpoint that
// costs one look at a thread-local list. Inside one, while the function runs forward, the
// checkpoint's policy decides per call whether the result is kept for backward; when backward
// runs the function again (a replay), a kept result is served instead of computing it, so a
// kept op is neither recomputed nor (for an op with a side effect) run twice. In-place writes
// a replay makes into storages older than it (buffers outside the function, its inputs) are
// not made again either: their effect happened once, in the forward.
#include "config.hpp"
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "errors.hpp"
#include "storage.hpp"
#include "tensor_impl.hpp"

namespace reel {
// Properties of a custom op (reel::library) a checkpoint acts on. side_effect: the op has an
// ordered effect outside its outputs (I/O, counters, buffers): it runs exactly once per
// forward, and activation checkpointing keeps its result instead of running it again.
// (Outside the settings namespace: the op registry, which stores them, is one per process
// for every copy of reel in it, whatever its settings.)
enum class OpTag { side_effect, nondeterministic, inplace_view, pointwise };
}  // namespace reel

namespace reel::inline REEL_ABI {

// What a selective checkpoint's policy says of one op call (PyTorch's CheckpointPolicy):
// *_SAVE: its result is kept for backward; *_RECOMPUTE: backward computes it again. MUST and
// PREFER act alike, except for an op with a side effect, which is always kept: the policy's
// PREFER_RECOMPUTE is overridden, and MUST_RECOMPUTE raises reel::error.
enum class CheckpointPolicy { MUST_SAVE, PREFER_SAVE, MUST_RECOMPUTE, PREFER_RECOMPUTE };

// One op call as a checkpoint policy sees it: "matmul" (every matrix product: mm, bmm,
// matmul, linear, mv, dot) or a custom op's "ns::name", and its tags.
class OpCall {
 public:
  OpCall(std::string_view name, std::span<const OpTag> tags) : name_(name), tags_(tags) {}
  std::string_view name() const { return name_; }
  bool has_tag(OpTag t) const { return std::find(tags_.begin(), tags_.end(), t) != tags_.end(); }

 private:
  std::string_view name_;
  std::span<const OpTag> tags_;
};

namespace detail {

struct KeptResult {
  std::shared_ptr<void> value;          // the result, or null: a replay computes it again
  std::shared_ptr<TensorImpl> tensor;   // a kept tensor result (without history)
  uint64_t version = 0;                 // its version when kept
  bool side_effect = false;
};
// A checkpoint's record of the reported calls of its function, per op name in call order.
struct CheckpointFrame {
  bool replaying = false;
  std::function<CheckpointPolicy(const OpCall&)> policy;  // empty: recompute what may be
  std::unordered_map<std::string, std::vector<KeptResult>> calls;
  std::unordered_map<std::string, size_t> seen;  // replaying: calls of each op so far
  uint64_t first_serial = 0;                     // replaying: storages made before it began
};
inline std::vector<CheckpointFrame*>& checkpoint_frames() {
  thread_local std::vector<CheckpointFrame*> frames;
  return frames;
}
struct FrameScope {
  explicit FrameScope(CheckpointFrame* f) { checkpoint_frames().push_back(f); }
  ~FrameScope() { checkpoint_frames().pop_back(); }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;
};

// Whether an in-place write into t is one a replay must not make again.
inline bool replay_skips_write(const TensorImpl& t) {
  auto& frames = checkpoint_frames();
  if (frames.empty()) [[likely]]
    return false;
  for (const CheckpointFrame* f : frames)
    if (f->replaying && t.storage && t.storage->serial <= f->first_serial) return true;
  return false;
}

template <class R>
concept ReportedTensor = requires(const R& r) {
  r.impl_ptr();
  r.requires_grad();
};

inline CheckpointPolicy policy_for(const CheckpointFrame& f, const OpCall& op) {
  CheckpointPolicy p = f.policy ? f.policy(op) : CheckpointPolicy::PREFER_RECOMPUTE;
  if (!op.has_tag(OpTag::side_effect)) return p;
  REEL_CHECK(p != CheckpointPolicy::MUST_RECOMPUTE, error, "checkpoint: the policy says MUST_RECOMPUTE for ",
             op.name(), ", an op with a side effect, which a checkpoint never runs again; let the policy save it");
  return CheckpointPolicy::MUST_SAVE;
}

// report_op under checkpoints, typed by the result only: call(f) computes it.
template <class R>
R report_op_framed(const OpCall& op, R (*call)(void*), void* f) {
  auto& frames = checkpoint_frames();
  const std::string key(op.name());
  // 1. A replay serves the result its forward kept.
  const KeptResult* served = nullptr;
  for (CheckpointFrame* f : frames) {
    if (!f->replaying) continue;
    auto& calls = f->calls[key];
    const size_t i = f->seen[key]++;
    REEL_CHECK(i < calls.size(), error, "checkpoint: recomputing the checkpointed function called ", op.name(),
               " more often than its forward did (", calls.size(),
               " times): a checkpointed function must run the same ops each time");
    if (served || !calls[i].value) continue;
    served = &calls[i];
    if (served->tensor) {
      const uint64_t now = served->tensor->storage->version.load(std::memory_order_relaxed);
      REEL_CHECK(now == served->version, error, "checkpoint: the result of ", op.name(),
                 " kept for backward was modified in place after the forward (version ", now, ", expected ",
                 served->version, ")");
    }
  }
  auto fresh_alias = [](const std::shared_ptr<TensorImpl>& t) {
    auto p = make_pooled<TensorImpl>(*t);
    p->autograd.reset();
    return p;
  };
  // 2. The result (any R: no default constructor needed).
  std::optional<std::conditional_t<std::is_void_v<R>, char, R>> result;
  if (served) {
    if constexpr (ReportedTensor<R>)
      result.emplace(R(fresh_alias(served->tensor)));
    else if constexpr (!std::is_void_v<R>)
      result.emplace(*static_cast<const R*>(served->value.get()));
  } else if constexpr (std::is_void_v<R>) {
    call(f);
  } else {
    result.emplace(call(f));
  }
  // 3. The forwards being recorded keep it where their policies (or a side effect) say so.
  KeptResult keep;
  for (CheckpointFrame* f : frames) {
    if (f->replaying) continue;
    const CheckpointPolicy p = policy_for(*f, op);
    bool save = p == CheckpointPolicy::MUST_SAVE || p == CheckpointPolicy::PREFER_SAVE;
    if constexpr (ReportedTensor<R>) {
      if (save && result->impl_ptr() && result->requires_grad()) {
        // Its history was recorded inside the op: a kept result could not carry it.
        REEL_CHECK(p == CheckpointPolicy::PREFER_SAVE, error, "checkpoint: ", op.name(),
                   op.has_tag(OpTag::side_effect) ? " has a side effect, so" : " is to be saved, so",
                   " its result is kept instead of computed again, but the op records its own autograd history; ",
                   "give it a backward with library.register_autograd so the history is recorded around it");
        save = false;
      }
    }
    if (save && !keep.value) {
      if constexpr (ReportedTensor<R>) {
        if (result->impl_ptr()) {
          keep.tensor = fresh_alias(result->impl_ptr());
          keep.version = keep.tensor->storage->version.load(std::memory_order_relaxed);
          keep.value = std::make_shared<R>(R(keep.tensor));
        }
      } else if constexpr (!std::is_void_v<R>) {
        keep.value = std::make_shared<R>(*result);
      } else {
        keep.value = std::make_shared<char>(0);
      }
      keep.side_effect = op.has_tag(OpTag::side_effect);
    }
    f->calls[key].push_back(save ? keep : KeptResult{});
  }
  if constexpr (!std::is_void_v<R>) return std::move(*result);
}

// Runs one call of a reported op (compute() computes its result) under the checkpoints
// active on this thread.
template <class R, class F>
R report_op(const OpCall& op, F&& compute) {
  if (checkpoint_frames().empty()) [[likely]]
    return compute();
  using Fn = std::remove_reference_t<F>;
  return report_op_framed<R>(op, [](void* c) -> R { return (*static_cast<Fn*>(c))(); },
                             const_cast<void*>(static_cast<const void*>(std::addressof(compute))));
}

}  // namespace detail
}  // namespace reel
