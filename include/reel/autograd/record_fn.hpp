#pragma once
// Ops whose derivative rules are written with reel ops (record_fn: a backward and a forward
// rule, recorded in turn for higher orders): linalg, gather/scatter, losses, custom
// functions (autograd::Function) build on it.
#include "../core/config.hpp"
#include <optional>
#include <span>
#include <vector>

#include "../core/tensor.hpp"

namespace reel::inline REEL_ABI {
namespace detail {

// Records `out = op(inputs...)`: `bw(grad_out)` returns the inputs' gradients (undefined:
// none), `fw(tangents)` the output's tangent from the inputs' tangents (undefined: zero).
// Both are written with reel ops, so they are recorded in turn (higher orders). Only the
// calls of bw and fw are typed; the bookkeeping is shared by every op.
struct FnNodeBase : Node {
  const char* op_name = "";
  std::vector<SavedTensor> saved;  // tensors bw reads (checked against in-place writes)
  std::vector<Shape> input_sizes;
  const char* name() const override { return op_name; }
  void saved_versions(std::vector<std::pair<const TensorImpl*, uint64_t>>& out) const override {
    for (const auto& s : saved) out.push_back({s.t.get(), s.version});
  }
  virtual GradList call(const GradPtr& g) = 0;
  GradList apply(GradList& grads) override {
    for (auto& s : saved) check_version(*s.t, s.version, op_name);
    auto res = call(grads[0]);
    for (size_t k = 0; k < res.size(); ++k)
      REEL_CHECK(!res[k] || res[k]->sizes == input_sizes[k], error, "autograd: ", op_name,
                 " returned a gradient of shape ", res[k]->sizes, " for an input of shape ", input_sizes[k]);
    return res;
  }
};
// A backward's gradients as the engine's list (undefined: none).
template <class T, class D>
GradList grad_list(std::span<const Tensor<T, D>> gs) {
  GradList res(gs.size());
  for (size_t k = 0; k < gs.size(); ++k)
    if (gs[k].defined()) res[k] = gs[k].impl_ptr();
  return res;
}
template <class T, class D, class Bw>
struct FnNode final : FnNodeBase {
  std::optional<Bw> bw;
  explicit FnNode(Bw f) : bw(std::move(f)) {}
  void release_saved() override { bw.reset(); }
  GradList call(const GradPtr& g) override {
    const auto gs = (*bw)(Tensor<T, D>(g));
    return grad_list<T, D>(std::span<const Tensor<T, D>>(gs.data(), gs.size()));
  }
};

struct FnPlan {
  std::vector<const TensorImpl*> ins;
  bool reverse = false;
  std::vector<uint64_t> levels;
  bool any() const { return reverse || !levels.empty(); }
};
inline void plan_fn(FnPlan& p) {
  if (!autograd_needed(p.ins.data(), p.ins.size())) return;
  if (grad_mode_flag())
    for (auto* t : p.ins) p.reverse = p.reverse || (t && impl_requires_grad(*t));
  if (any_level_active()) collect_levels(p.ins.data(), p.ins.size(), p.levels);
}
REEL_INLINE void attach_fn(const std::shared_ptr<FnNodeBase>& node, const char* name, const FnPlan& p,
                      GradList inputs, GradList saved, const GradType* type, TensorImpl& out);

// A forward rule by reference: fw(tangents of the inputs) -> the output's tangent (undefined:
// zero). What the typed bookkeeping below calls, so it is instantiated once per (T, D), not
// once per op.
template <class T, class D>
class FwRule {
 public:
  template <class F>
  FwRule(F& f)
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, const std::vector<Tensor<T, D>>& ts) { return Tensor<T, D>((*static_cast<F*>(o))(ts)); }) {}
  Tensor<T, D> operator()(const std::vector<Tensor<T, D>>& ts) const { return call_(obj_, ts); }

 private:
  void* obj_;
  Tensor<T, D> (*call_)(void*, const std::vector<Tensor<T, D>>&);
};

// A forward rule written for one direction, applied to each of a batched level's `batch`
// directions (the fallback of vector mode: elementwise ops, views and sums have batched rules
// of their own; these ops loop).
template <class T, class D>
Tensor<T, D> batched_rule(FwRule<T, D> fw, const std::vector<Tensor<T, D>>& ts, const Tensor<T, D>& out, int64_t batch) {
  std::vector<Tensor<T, D>> parts;
  bool any = false;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor<T, D>> tb(ts.size());
    for (size_t k = 0; k < ts.size(); ++k)
      if (ts[k].defined()) tb[k] = ts[k].select(0, b);
    Tensor<T, D> r = fw(tb);
    any = any || r.defined();
    parts.push_back(r);
  }
  if (!any) return {};
  for (auto& r : parts)
    if (!r.defined()) r = Tensor<T, D>(ir::grad_type_of<T, D>()->zeros(out.sizes()));
  return stack(parts, 0);
}

// Sets out's tangent at each of `levels` to fw(the tangents of `ins` at that level).
template <class T, class D>
void forward_levels(FwRule<T, D> fw, const std::vector<const TensorImpl*>& ins, Tensor<T, D>& out,
                    const std::vector<uint64_t>& levels) {
  for (uint64_t level : levels) {
    std::vector<Tensor<T, D>> ts(ins.size());
    for (size_t k = 0; k < ins.size(); ++k)
      if (ins[k])
        if (GradPtr t = tangent_of(*ins[k], level)) ts[k] = Tensor<T, D>(t);
    LevelMask mask(level);
    GradModeGuard history(grad_mode_flag() && !tangents_as_values(level));
    Tensor<T, D> t = level_batch(level) ? batched_rule(fw, ts, out, level_batch(level)) : fw(ts);
    if (t.defined()) set_tangent(out.impl(), level, t.impl_ptr());
  }
}

// record_fn's bookkeeping (typed by (T, D) only): `make_node(bw)` builds the op's node, called
// only when a gradient will flow back through it.
template <class T, class D>
Tensor<T, D> record_fn_typed(Tensor<T, D> out, const char* name, std::span<const Tensor<T, D>> inputs,
                             std::span<const Tensor<T, D>> saved, std::shared_ptr<FnNodeBase> (*make_node)(void*),
                             void* bw, FwRule<T, D> fw) {
  FnPlan p;
  p.ins.reserve(inputs.size());
  for (const auto& t : inputs) p.ins.push_back(t.defined() ? &t.impl() : nullptr);
  plan_fn(p);
  if (!p.any()) return out;
  if (out.impl().autograd) out = Tensor<T, D>(plain_alias(out.impl()));  // a fresh handle for the new history
  if (p.reverse) {
    GradList in, sv;
    for (const auto& t : inputs) in.push_back(t.defined() ? t.impl_ptr() : nullptr);
    for (const auto& t : saved)
      if (t.defined()) sv.push_back(t.impl_ptr());
    attach_fn(make_node(bw), name, p, std::move(in), std::move(sv), ir::grad_type_of<T, D>(), out.impl());
  }
  forward_levels(fw, p.ins, out, p.levels);
  return out;
}

template <class T, class D, class Bw, class Fw>
Tensor<T, D> record_fn(Tensor<T, D> out, const char* name, std::span<const Tensor<T, D>> inputs,
                       std::span<const Tensor<T, D>> saved, Bw&& bw, Fw&& fw) {
  if constexpr (autograd_type_v<T, D>) {
    using B = std::remove_reference_t<Bw>;
    auto make = [](void* f) -> std::shared_ptr<FnNodeBase> {
      return std::make_shared<FnNode<T, D, std::decay_t<Bw>>>(std::forward<Bw>(*static_cast<B*>(f)));
    };
    return record_fn_typed<T, D>(std::move(out), name, inputs, saved, make,
                                 const_cast<void*>(static_cast<const void*>(std::addressof(bw))), FwRule<T, D>(fw));
  }
  return out;
}
template <class T, class D, class Bw, class Fw>
Tensor<T, D> record_fn(Tensor<T, D> out, const char* name, std::span<const Tensor<T, D>> inputs,
                       std::initializer_list<Tensor<T, D>> saved, Bw&& bw, Fw&& fw) {
  return record_fn(std::move(out), name, inputs, std::span<const Tensor<T, D>>(saved.begin(), saved.size()),
                   std::forward<Bw>(bw), std::forward<Fw>(fw));
}
template <class T, class D, class Bw, class Fw>
Tensor<T, D> record_fn(Tensor<T, D> out, const char* name, std::initializer_list<Tensor<T, D>> inputs,
                       std::initializer_list<Tensor<T, D>> saved, Bw&& bw, Fw&& fw) {
  return record_fn(std::move(out), name, std::span<const Tensor<T, D>>(inputs.begin(), inputs.size()),
                   std::span<const Tensor<T, D>>(saved.begin(), saved.size()), std::forward<Bw>(bw),
                   std::forward<Fw>(fw));
}

}  // namespace detail
}  // namespace reel

#ifndef REEL_COMPILED_LIB
#include "record_fn-inl.hpp"
#endif
