#pragma once
// The public autograd API (PyTorch's torch.autograd): grad, backward, grad-mode guards and
// forward mode (forward_ad). The tape and the recording live in detail/autograd/.
#include "../core/config.hpp"
#include <span>

#include "../ops/products.hpp"

namespace reel::inline REEL_ABI::autograd {

inline bool is_grad_enabled() { return detail::grad_mode_flag(); }
inline void set_grad_enabled(bool on) { detail::grad_mode_flag() = on; }
// RAII guards, thread-local like PyTorch's.
class no_grad : detail::GradModeGuard {
 public:
  no_grad() : GradModeGuard(false) {}
};
class enable_grad : detail::GradModeGuard {
 public:
  enable_grad() : GradModeGuard(true) {}
};

struct GradOptions {
  std::optional<bool> retain_graph = std::nullopt;  // default: create_graph
  bool create_graph = false;
  bool allow_unused = false;
};

namespace detail_api {
template <class T, class D>
using Tensors = std::vector<Tensor<T, D>>;
// f(inputs) for the functions the functional API and the checks take: of the whole list, or
// of its one tensor.
template <class T, class D>
Tensor<T, D> call(const auto& f, const Tensors<T, D>& x) {
  if constexpr (std::is_invocable_v<decltype(f), const Tensors<T, D>&>)
    return f(x);
  else
    return f(x[0]);
}

template <class T, class D>
reel::detail::GradRequest request(std::span<const Tensor<T, D>> outputs, std::span<const Tensor<T, D>> grad_outputs,
                                  const GradOptions& o) {
  static_assert(reel::detail::autograd_type_v<T, D>,
                "reel::autograd: gradients exist for floating point and complex CPU tensors and floating point CUDA tensors");
  reel::detail::GradRequest q;
  REEL_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), value_error, "grad: got ",
             grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& out = outputs[k];
    q.outputs.push_back(out.impl_ptr());
    q.output_types.push_back(reel::detail::ir::grad_type_of<T, D>());
    if (!grad_outputs.empty() && grad_outputs[k].defined()) {
      q.grad_outputs.push_back(grad_outputs[k].impl_ptr());
    } else {
      REEL_CHECK(out.numel() == 1, value_error, "grad can be implicitly created only for scalar outputs (output ", k,
                 " has shape ", out.sizes(), ")");
      auto one = reel::detail::make_tensor<T, D>(out.sizes());
      {
        reel::detail::GradModeGuard ng(false);
        one.fill_(T(1));
      }
      q.grad_outputs.push_back(one.impl_ptr());
    }
  }
  q.create_graph = o.create_graph;
  q.retain_graph = o.retain_graph.value_or(o.create_graph);
  q.allow_unused = o.allow_unused;
  return q;
}
}  // namespace detail_api

// Gradients of `outputs` with respect to `inputs` (not accumulated into .grad). Unused inputs
// give undefined tensors when allow_unused is set.
template <class T, class D>
std::vector<Tensor<T, D>> grad(std::span<const Tensor<T, D>> outputs, std::span<const Tensor<T, D>> inputs,
                               std::span<const Tensor<T, D>> grad_outputs = {}, GradOptions o = {}) {
  auto q = detail_api::request(outputs, grad_outputs, o);
  q.accumulate = false;
  for (const auto& t : inputs) {
    q.inputs.push_back(t.impl_ptr());
    q.input_types.push_back(reel::detail::ir::grad_type_of<T, D>());
  }
  auto res = reel::detail::run_grad(q);
  std::vector<Tensor<T, D>> out;
  for (auto& g : res) out.push_back(g ? Tensor<T, D>(g) : Tensor<T, D>());
  return out;
}
template <class T, class D>
std::vector<Tensor<T, D>> grad(const std::vector<Tensor<T, D>>& outputs, const std::vector<Tensor<T, D>>& inputs,
                               const std::vector<Tensor<T, D>>& grad_outputs = {}, GradOptions o = {}) {
  return grad(std::span<const Tensor<T, D>>(outputs), std::span<const Tensor<T, D>>(inputs),
              std::span<const Tensor<T, D>>(grad_outputs), o);
}
template <class T, class D>
std::vector<Tensor<T, D>> grad(std::initializer_list<Tensor<T, D>> outputs, std::initializer_list<Tensor<T, D>> inputs,
                               std::initializer_list<Tensor<T, D>> grad_outputs = {}, GradOptions o = {}) {
  return grad(std::span<const Tensor<T, D>>(outputs.begin(), outputs.size()),
              std::span<const Tensor<T, D>>(inputs.begin(), inputs.size()),
              std::span<const Tensor<T, D>>(grad_outputs.begin(), grad_outputs.size()), o);
}

// Accumulates the gradients of `outputs` into the .grad of the leaves they depend on.
template <class T, class D>
void backward(std::span<const Tensor<T, D>> outputs, std::span<const Tensor<T, D>> grad_outputs = {}, GradOptions o = {}) {
  auto q = detail_api::request(outputs, grad_outputs, o);
  reel::detail::run_grad(q);
}
template <class T, class D>
void backward(const std::vector<Tensor<T, D>>& outputs, const std::vector<Tensor<T, D>>& grad_outputs = {}, GradOptions o = {}) {
  backward(std::span<const Tensor<T, D>>(outputs), std::span<const Tensor<T, D>>(grad_outputs), o);
}
template <class T, class D>
void backward(std::initializer_list<Tensor<T, D>> outputs, std::initializer_list<Tensor<T, D>> grad_outputs = {}, GradOptions o = {}) {
  backward(std::span<const Tensor<T, D>>(outputs.begin(), outputs.size()),
           std::span<const Tensor<T, D>>(grad_outputs.begin(), grad_outputs.size()), o);
}

// Runs f when the backward pass running on this thread ends (PyTorch's
// Variable._execution_engine.queue_callback): e.g. from a hook, to act once every gradient is
// in. Called outside a backward pass, it raises.
inline void queue_callback(std::function<void()> f) {
  REEL_CHECK(reel::detail::backward_depth() > 0, error, "queue_callback: no backward pass is running on this thread");
  reel::detail::final_callbacks().push_back(std::move(f));
}

// ------------------------------------------------------------------ forward mode
namespace forward_ad {

// Enters a new forward-mode level for its lifetime (levels nest). Tangents made at a level
// are invisible once it exits. dual_level(k) (reel's vector mode, what jax.vmap(jvp) gives):
// every tangent at the level has a leading dimension of k directions, [k, *primal sizes],
// and each op propagates all k in one pass.
class dual_level {
 public:
  dual_level() : dual_level(0) {}
  explicit dual_level(int64_t batch) : id_(next_id()) {
    REEL_CHECK(batch >= 0, value_error, "dual_level: the number of directions must be >= 0, got ", batch);
    auto& s = reel::detail::level_state();
    s.live.push_back(id_);
    s.batch.push_back(batch);
  }
  ~dual_level() {
    auto& s = reel::detail::level_state();
    auto it = std::find(s.live.begin(), s.live.end(), id_);
    s.batch.erase(s.batch.begin() + (it - s.live.begin()));
    s.live.erase(it);
  }
  int64_t batch() const { return reel::detail::level_batch(id_); }
  dual_level(const dual_level&) = delete;
  dual_level& operator=(const dual_level&) = delete;
  uint64_t id() const { return id_; }

 private:
  static uint64_t next_id() {
    static std::atomic<uint64_t> n{0};
    return ++n;
  }
  uint64_t id_;
};

inline uint64_t current_level() {
  auto& live = reel::detail::level_state().live;
  REEL_CHECK(!live.empty(), error, "forward_ad: no dual level is active; create a forward_ad::dual_level first");
  return live.back();
}

namespace detail_fw {
// A view of x with a handle of its own (a tangent set on it stays off x); reverse-mode
// gradients flow to x.
template <class T, class D>
Tensor<T, D> own_view(const Tensor<T, D>& x) {
  Tensor<T, D> v = x.view(x.sizes());
  if (v.impl_ptr() == x.impl_ptr()) v = Tensor<T, D>(reel::detail::plain_alias(x.impl()));
  return v;
}
}  // namespace detail_fw

// A tensor whose value is `primal` and whose tangent at the current level is `tangent`.
// It is a view of primal, so reverse-mode gradients flow to primal.
template <class T, class D>
Tensor<T, D> make_dual(const Tensor<T, D>& primal, const Tensor<T, D>& tangent) {
  static_assert(reel::detail::autograd_type_v<T, D>, "reel::forward_ad::make_dual: needs a floating point or complex CPU tensor, or a floating point CUDA tensor");
  uint64_t level = current_level();
  if (int64_t k = reel::detail::level_batch(level)) {
    Shape want = primal.sizes();
    want.insert(0, k);
    REEL_CHECK(tangent.sizes() == want, value_error, "make_dual: the current level carries ", k,
               " directions, so the tangent must have shape ", want, " (directions first), got ", tangent.sizes());
  } else {
    REEL_CHECK(tangent.sizes() == primal.sizes(), value_error, "make_dual: expected the tangent to have the same shape as ",
               "the primal, got ", tangent.sizes(), " and ", primal.sizes());
  }
  Tensor<T, D> out = detail_fw::own_view(primal);
  reel::detail::set_tangent(out.impl(), level, tangent.impl_ptr());
  return out;
}

template <class T, class D>
struct UnpackedDual {
  Tensor<T, D> primal, tangent;
};
// The primal (a view without the current level's tangent) and the tangent (undefined if none).
template <class T, class D>
UnpackedDual<T, D> unpack_dual(const Tensor<T, D>& t) {
  uint64_t level = current_level();
  auto tan = reel::detail::tangent_of(t.impl(), level);
  if (!tan) return {t, Tensor<T, D>()};
  Tensor<T, D> p = detail_fw::own_view(t);
  reel::detail::set_tangent(p.impl(), level, nullptr);
  return {p, Tensor<T, D>(tan)};
}

}  // namespace forward_ad
}  // namespace reel::autograd
