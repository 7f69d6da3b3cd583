#pragma once
// reel::optim: SGD, Adam and AdamW with PyTorch's update equations, written with foreach ops
// (the order of operations is PyTorch's _multi_tensor_* code, so float results match it).
//
// Parameters come from an ordered sequence: the optimizer state is keyed by parameter
// position, so a container whose iteration order changes between runs (an unordered set,
// or a std::set of handles ordered by address) would silently pair a checkpoint's moments
// with the wrong tensors. Such containers do not compile; sources whose order reel cannot
// check warn (FutureWarning: this will become an error).
#include "../core/config.hpp"

#include "optimizer.hpp"
#include "adam_rule.hpp"

namespace reel::inline REEL_ABI::optim {

namespace detail {
template <class T, class D>
struct SGDState {
  int64_t step = 0;
  Tensor<T, D> momentum_buffer;
  static constexpr bool has_step = false;  // (counted, not saved: PyTorch's SGD keeps no step)
  static constexpr std::array<const char*, 1> names{"momentum_buffer"};
  Tensor<T, D>& buffer(size_t) { return momentum_buffer; }
  const Tensor<T, D>& buffer(size_t) const { return momentum_buffer; }
};
template <class T, class D>
struct AdamState {
  int64_t step = 0;
  Tensor<T, D> exp_avg, exp_avg_sq, max_exp_avg_sq;
  static constexpr bool has_step = true;
  static constexpr std::array<const char*, 3> names{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  Tensor<T, D>& buffer(size_t j) { return j == 0 ? exp_avg : j == 1 ? exp_avg_sq : max_exp_avg_sq; }
  const Tensor<T, D>& buffer(size_t j) const { return j == 0 ? exp_avg : j == 1 ? exp_avg_sq : max_exp_avg_sq; }
};

// The state tensors j of a list of states (scratch reused between steps).
template <class T, class D, class State>
const std::vector<Tensor<T, D>>& gather_state(std::vector<Tensor<T, D>>& into, const std::vector<State*>& s, size_t j) {
  into.clear();
  for (auto* x : s) into.push_back(x->buffer(j));
  return into;
}

// After a fused step wrote them in place: the versions of the parameters and their moments.
template <class T, class D>
void bump_adam_versions(const AdamOptions& o, const std::vector<Tensor<T, D>>& params,
                        const std::vector<AdamState<T, D>*>& states) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].bump_version();
    states[i]->exp_avg.bump_version();
    states[i]->exp_avg_sq.bump_version();
    if (o.amsgrad()) states[i]->max_exp_avg_sq.bump_version();
  }
}

// Whether a fused step (the CPU's adam_fused, CUDA's multi-tensor kernel) may run: every
// parameter, gradient and moment contiguous, with no autograd stake (foreach's fast path).
template <class T, class D>
bool adam_fusable(const AdamOptions& o, const std::vector<Tensor<T, D>>& params, const std::vector<Tensor<T, D>>& grads,
                  const std::vector<AdamState<T, D>*>& states) {
  using reel::detail::fe::fast_ok;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& s = *states[i];
    if (!fast_ok(params[i].impl(), true) || !fast_ok(grads[i].impl(), false) || !fast_ok(s.exp_avg.impl(), true) ||
        !fast_ok(s.exp_avg_sq.impl(), true) || (o.amsgrad() && !fast_ok(s.max_exp_avg_sq.impl(), true)))
      return false;
  }
  return true;
}

// adam_rule's operations on blocks of Eigen arrays (foreach.hpp's Eigen forms).
struct EigenAdamOps {
  template <class M, class E, class W> static void lerp_(M& m, const E& e, W w) {
    reel::detail::fe::lerp([&](const auto& r) { m = r; }, m, e, w);
  }
  template <class A, class B> static auto maximum(const A& a, const B& b) { return reel::detail::fe::maximum(a, b); }
  template <class A> static auto sqrt(const A& a) { return reel::detail::fe::sqrt(a); }
};

// The same update as adam_update's foreach sequence (same operations in the same order on
// each element), fused into one pass per parameter over cache-sized blocks: the moments and
// parameters are read and written once instead of once per foreach op. For contiguous
// tensors autograd has no stake in; returns false (doing nothing) otherwise.
template <class T, class D>
bool adam_fused(const AdamOptions& o, bool decoupled, const std::vector<Tensor<T, D>>& params,
                const std::vector<Tensor<T, D>>& grads, const std::vector<AdamState<T, D>*>& states,
                const std::vector<double>& step_size, const std::vector<double>& bc2_sqrt) {
  if constexpr (!reel::detail::Backend<D>::host_memory || is_complex_v<T>) {  // (a device: Backend<D>::adam)
    return false;
  } else {
    if (!adam_fusable(o, params, grads, states)) return false;
    using C = compute_t<T>;
    using Block = Eigen::Array<C, Eigen::Dynamic, 1, 0, 1024, 1>;  // at most 1024: no heap
    const AdamCoeffs<C> coeffs = adam_coeffs<C>(o, decoupled);
    auto one = [&](size_t i) {
      const int64_t n = params[i].numel();
      T* p = params[i].mutable_data_ptr();
      const T* g = grads[i].data_ptr();
      T* m = states[i]->exp_avg.mutable_data_ptr();
      T* v = states[i]->exp_avg_sq.mutable_data_ptr();
      T* mx = o.amsgrad() ? states[i]->max_exp_avg_sq.mutable_data_ptr() : nullptr;
      const C ss = static_cast<C>(step_size[i]), bc = static_cast<C>(bc2_sqrt[i]);
      constexpr int64_t kBlock = 1024;
      Block gb(kBlock), pb(kBlock), mb(kBlock), vb(kBlock), xb(kBlock), db(kBlock);  // (on the stack)
      for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
        const int64_t k = std::min(kBlock, n - b0);
        auto G = gb.head(k), P = pb.head(k), M = mb.head(k), V = vb.head(k), Xm = xb.head(k), Dn = db.head(k);
        using MapT = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
        MapT pm(p + b0, k), mm(m + b0, k), vm(v + b0, k), xm(mx ? mx + b0 : nullptr, mx ? k : 0);
        G = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(g + b0, k).template cast<C>();
        P = pm.template cast<C>();
        M = mm.template cast<C>();
        V = vm.template cast<C>();
        if (mx) Xm = xm.template cast<C>();
        adam_rule<EigenAdamOps>(coeffs, ss, bc, P, G, M, V, mx ? &Xm : nullptr, Dn);
        pm = P.template cast<T>();
        mm = M.template cast<T>();
        vm = V.template cast<T>();
        if (mx) xm = Xm.template cast<T>();
      }
    };
    int64_t total = 0;
    for (const auto& t : params) total += t.numel();
    auto range = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) one(static_cast<size_t>(i));
    };
    if (total >= (int64_t(1) << 16) && params.size() > 1)
      reel::detail::parallel_range(static_cast<int64_t>(params.size()), range, 1);
    else
      range(0, static_cast<int64_t>(params.size()));
    bump_adam_versions(o, params, states);
    return true;
  }
}

// Adam and AdamW (decoupled = true): PyTorch's _multi_tensor_adam.
template <class T, class D>
void adam_update(const AdamOptions& o, bool decoupled, const std::vector<Tensor<T, D>>& params,
                 std::vector<Tensor<T, D>>& grads, const std::vector<AdamState<T, D>*>& states,
                 std::array<std::vector<Tensor<T, D>>, 3>& scratch, std::vector<double>& s1, std::vector<double>& s2) {
  namespace fe = reel::foreach;
  auto [beta1, beta2] = o.betas();
  for (size_t i = 0; i < params.size(); ++i) {
    auto& s = *states[i];  // (buffers missing from a loaded state start at zero)
    if (s.step == 0 || !s.exp_avg.defined()) s.exp_avg = zeros_like(params[i]);
    if (s.step == 0 || !s.exp_avg_sq.defined()) s.exp_avg_sq = zeros_like(params[i]);
    if (o.amsgrad() && (s.step == 0 || !s.max_exp_avg_sq.defined())) s.max_exp_avg_sq = zeros_like(params[i]);
    ++s.step;
  }
  s1.clear();
  s2.clear();
  for (auto* s : states) {
    double bc1 = 1 - std::pow(beta1, static_cast<double>(s->step));
    double bc2 = 1 - std::pow(beta2, static_cast<double>(s->step));
    s1.push_back(-(o.lr() / bc1));
    s2.push_back(std::sqrt(bc2));
  }
  if constexpr (reel::detail::device_memory_v<D>) {
    // one multi-tensor kernel for the whole group (contiguous tensors autograd has no stake in)
    if (reel::detail::Backend<D>::adam(o, decoupled, params, grads, states, s1, s2)) return;
  } else if (adam_fused(o, decoupled, params, grads, states, s1, s2)) {
    return;
  }
  if (o.maximize()) grads = fe::neg(grads);
  if (o.weight_decay() != 0) {
    if (decoupled)
      fe::mul_(params, 1 - o.lr() * o.weight_decay());
    else
      grads = fe::add(grads, params, o.weight_decay());
  }
  const auto& exp_avg = gather_state(scratch[0], states, 0);
  const auto& exp_avg_sq = gather_state(scratch[1], states, 1);
  fe::lerp_(exp_avg, grads, 1 - beta1);
  fe::mul_(exp_avg_sq, beta2);
  fe::addcmul_(exp_avg_sq, grads, grads, 1 - beta2);
  std::vector<Tensor<T, D>> denom;
  if (o.amsgrad()) {
    const auto& mx = gather_state(scratch[2], states, 2);
    fe::maximum_(mx, exp_avg_sq);
    denom = fe::sqrt(mx);
  } else {
    denom = fe::sqrt(exp_avg_sq);
  }
  fe::div_(denom, foreach::ScalarList<double>(s2));
  fe::add_(denom, o.eps());
  fe::addcdiv_(params, exp_avg, denom, foreach::ScalarList<double>(s1));
}
}  // namespace detail

#define REEL_OPTIMIZER_CONSTRUCTORS(NAME, OPTIONS)                                                  \
  using Base::step;                                                                                \
  template <class R>                                                                               \
  explicit NAME(const R& params, OPTIONS options = OPTIONS())                                      \
      : Base(#NAME, std::move(options)) {                                                          \
    this->init_params(detail::ordered_params<T, D>(params, #NAME));                                \
  }                                                                                                \
  NAME(std::initializer_list<Tensor<T, D>> params, OPTIONS options = OPTIONS())                    \
      : Base(#NAME, std::move(options)) {                                                          \
    this->init_params(std::vector<Tensor<T, D>>(params));                                          \
  }                                                                                                \
  NAME(std::vector<ParamGroup<T, D, OPTIONS>> groups, OPTIONS defaults = OPTIONS())                \
      : Base(#NAME, std::move(defaults)) {                                                         \
    this->init_groups(std::move(groups));                                                          \
  }

template <class T, class D = CPU>
class SGD : public detail::Optimizer<T, D, SGDOptions, detail::SGDState<T, D>> {
  using Base = detail::Optimizer<T, D, SGDOptions, detail::SGDState<T, D>>;

 public:
  REEL_OPTIMIZER_CONSTRUCTORS(SGD, SGDOptions)
  // PyTorch's _multi_tensor_sgd (the gradients themselves are never modified).
  void step() override {
    namespace fe = reel::foreach;
    this->for_each_group([&](const SGDOptions& o, const auto& params, auto& grads, const auto& states) {
      if constexpr (reel::detail::device_memory_v<D>)  // one multi-tensor kernel (contiguous tensors)
        if (reel::detail::Backend<D>::sgd(o, params, grads, states)) return;
      if (o.maximize()) grads = fe::neg(grads);
      if (o.weight_decay() != 0) grads = fe::add(grads, params, o.weight_decay());
      if (o.momentum() != 0) {
        auto& bufs = scratch_;
        bufs.clear();
        bool all = true;
        for (auto* s : states) all = all && s->momentum_buffer.defined();
        if (all) {
          detail::gather_state(bufs, states, 0);
          fe::mul_(bufs, o.momentum());
          fe::add_(bufs, grads, 1 - o.dampening());
        } else {
          for (size_t i = 0; i < states.size(); ++i) {
            auto& b = states[i]->momentum_buffer;
            if (!b.defined())
              b = grads[i].detach().clone();
            else
              b.mul_(static_cast<T>(o.momentum())).add_(grads[i], static_cast<T>(1 - o.dampening()));
            bufs.push_back(b);
          }
        }
        if (o.nesterov())
          grads = fe::add(grads, bufs, o.momentum());
        else
          grads = bufs;
      }
      for (auto* s : states) ++s->step;
      fe::add_(params, grads, -o.lr());
    });
  }

 private:
  std::vector<Tensor<T, D>> scratch_;
};

namespace detail {
// Adam and AdamW differ only in how weight decay is applied.
template <class T, class D, class Options, bool Decoupled>
class AdamImpl : public Optimizer<T, D, Options, AdamState<T, D>> {
  using Base = Optimizer<T, D, Options, AdamState<T, D>>;

 public:
  using Base::step;
  void step() override {
    this->for_each_group([&](const Options& o, const auto& params, auto& grads, const auto& states) {
      adam_update(o, Decoupled, params, grads, states, scratch_, s1_, s2_);
    });
  }

 protected:
  AdamImpl(const char* name, Options o) : Base(name, std::move(o)) {}

 private:
  std::array<std::vector<Tensor<T, D>>, 3> scratch_;
  std::vector<double> s1_, s2_;
};
}  // namespace detail

template <class T, class D = CPU>
class Adam : public detail::AdamImpl<T, D, AdamOptions, false> {
  using Base = detail::AdamImpl<T, D, AdamOptions, false>;

 public:
  REEL_OPTIMIZER_CONSTRUCTORS(Adam, AdamOptions)
};

// AdamW: decoupled weight decay (p *= 1 - lr * weight_decay before the Adam update).
template <class T, class D = CPU>
class AdamW : public detail::AdamImpl<T, D, AdamWOptions, true> {
  using Base = detail::AdamImpl<T, D, AdamWOptions, true>;

 public:
  REEL_OPTIMIZER_CONSTRUCTORS(AdamW, AdamWOptions)
};
#undef REEL_OPTIMIZER_CONSTRUCTORS

// Deduction from the parameters: optim::AdamW opt(model.parameters(), ...).
#define REEL_OPTIMIZER_GUIDES(NAME)                                                                                \
  template <class R, class... O>                                                                                   \
  NAME(const R&, O...) -> NAME<typename detail::range_elem_t<R>::value_type, typename detail::range_elem_t<R>::device_type>; \
  template <class T, class D, class... O> NAME(std::initializer_list<Tensor<T, D>>, O...) -> NAME<T, D>;
REEL_OPTIMIZER_GUIDES(SGD)
REEL_OPTIMIZER_GUIDES(Adam)
REEL_OPTIMIZER_GUIDES(AdamW)
#undef REEL_OPTIMIZER_GUIDES

}  // namespace reel::optim
