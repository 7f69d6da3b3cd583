#pragma once
// Tensor's members that reach autograd (requires_grad_, grad, backward, hooks, ...).
#include "../core/config.hpp"

#include "../core/tensor.hpp"

namespace reel::inline REEL_ABI {
template <class T, class D>
Tensor<T, D>& Tensor<T, D>::requires_grad_(bool on) {
  if (on)
    REEL_CHECK((detail::autograd_type_v<T, D>), type_error, "requires_grad_: only floating point and complex CPU ",
               "tensors and floating point CUDA tensors can require gradients, got ", scalar_type_of<T>::name, " on ",
               D::name);
  auto& m = detail::ensure_meta(impl());
  REEL_CHECK(on || !m.grad_fn, error, "requires_grad_: you can only change requires_grad flags of leaf tensors");
  m.requires_grad = on;
  return *this;
}
template <class T, class D>
bool Tensor<T, D>::requires_grad() const {
  return detail::impl_requires_grad(impl());
}
template <class T, class D>
bool Tensor<T, D>::is_leaf() const {
  auto* m = detail::meta_of(impl());
  return !m || !m->grad_fn;
}
template <class T, class D>
Tensor<T, D> Tensor<T, D>::grad() const {
  auto* m = detail::meta_of(impl());
  return m && m->grad ? Tensor<T, D>(m->grad) : Tensor<T, D>();
}
template <class T, class D>
void Tensor<T, D>::set_grad(const Tensor& g) const {
  REEL_CHECK(!g.defined() || g.sizes() == sizes(), value_error, "set_grad: assigned grad has shape ", g.sizes(),
             " but the tensor has shape ", sizes());
  detail::ensure_meta(impl()).grad = g.defined() ? g.impl_ptr() : nullptr;
}
template <class T, class D>
void Tensor<T, D>::retain_grad() const {
  auto* m = detail::meta_of(impl());
  REEL_CHECK(m && m->requires_grad, error, "retain_grad: can't retain_grad on a tensor that has requires_grad = false");
  if (!m->grad_fn || m->retains_grad) return;
  m->retains_grad = true;
  m->grad_fn->retained.push_back({m->output_nr, impl_ptr()});
}
template <class T, class D>
bool Tensor<T, D>::retains_grad() const {
  auto* m = detail::meta_of(impl());
  return m && m->retains_grad;
}
template <class T, class D>
template <class F>
RemovableHandle Tensor<T, D>::register_hook(F&& f) const {
  auto* m = detail::meta_of(impl());
  REEL_CHECK(m && m->requires_grad, error, "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  detail::HookFn fn = [f = std::forward<F>(f)](const detail::GradPtr& g) -> detail::GradPtr {
    using R = std::invoke_result_t<F&, const Tensor<T, D>&>;
    if constexpr (std::is_void_v<R>) {
      f(Tensor<T, D>(g));
      return nullptr;
    } else {
      Tensor<T, D> r = f(Tensor<T, D>(g));
      if (r.defined())
        REEL_CHECK(r.sizes() == Shape(g->sizes), value_error, "register_hook: a hook returned a gradient of shape ",
                   r.sizes(), " for a tensor of shape ", g->sizes);
      return r.defined() ? r.impl_ptr() : nullptr;
    }
  };
  uint64_t id = detail::next_hook_id();
  std::shared_ptr<detail::HookList> list;
  if (!m->grad_fn) {
    if (!m->hooks) m->hooks = std::make_shared<detail::HookList>();
    list = m->hooks;
  } else {
    for (auto& [slot, l] : m->grad_fn->pre_hooks)
      if (slot == m->output_nr) list = l;
    if (!list) {
      list = std::make_shared<detail::HookList>();
      m->grad_fn->pre_hooks.push_back({m->output_nr, list});
    }
  }
  list->hooks.push_back({id, std::move(fn)});
  return RemovableHandle(list, id);
}
template <class T, class D>
template <class F>
RemovableHandle Tensor<T, D>::register_post_accumulate_grad_hook(F&& f) const {
  auto* m = detail::meta_of(impl());
  REEL_CHECK(m && m->requires_grad && !m->grad_fn, error,
             "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate gradients");
  detail::HookFn fn = [f = std::forward<F>(f)](const detail::GradPtr& leaf) -> detail::GradPtr {
    f(Tensor<T, D>(leaf));
    return nullptr;
  };
  if (!m->post_accumulate_hooks) m->post_accumulate_hooks = std::make_shared<detail::HookList>();
  const uint64_t id = detail::next_hook_id();
  m->post_accumulate_hooks->hooks.push_back({id, std::move(fn)});
  return RemovableHandle(m->post_accumulate_hooks, id);
}
template <class T, class D>
void Tensor<T, D>::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  if constexpr (detail::autograd_type_v<T, D>) {
    detail::GradRequest q;
    q.outputs.push_back(impl_ptr());
    q.output_types.push_back(detail::ir::grad_type_of<T, D>());
    if (grad.defined()) {
      q.grad_outputs.push_back(grad.impl_ptr());
    } else {
      REEL_CHECK(numel() == 1, value_error, "backward: grad can be implicitly created only for scalar outputs (this ",
                 "tensor has shape ", sizes(), "); pass a gradient of the same shape");
      q.grad_outputs.push_back(detail::ir::grad_zeros<T, D>(sizes()));
      Tensor<T, D>(q.grad_outputs[0]).fill_(T(1));
    }
    q.create_graph = create_graph;
    q.retain_graph = retain_graph || q.create_graph;
    detail::run_grad(q);
  } else {
    raise<error>("backward: element 0 of tensors does not require grad and does not have a grad_fn (dtype ",
                 scalar_type_of<T>::name, " cannot require grad)");
  }
}
}  // namespace reel
