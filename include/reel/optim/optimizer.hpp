#pragma once
// reel::optim::detail::Optimizer: what every optimizer shares (groups, per-parameter state,
// zero_grad, state_dict / load_state_dict, the step's gathering of parameters and gradients).
#include "../core/config.hpp"

#include "options.hpp"

namespace reel::inline REEL_ABI::optim {

namespace detail {
// What every optimizer shares: groups, per-parameter state, zero_grad, state_dict.
// State: a struct with `int64_t step` and the tensors named by State::names.
template <class T, class D, class Options, class State>
class Optimizer {
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::optim: parameters must be floating point or complex");

 public:
  using value_type = T;
  using device_type = D;
  using options_type = Options;
  struct Group {
    std::vector<Tensor<T, D>> params;
    Options options;
    std::vector<State> state;  // parallel to params
  };

  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // PyTorch's step(closure): re-evaluates the loss (with grad enabled) before stepping.
  template <class F> auto step(F&& closure) {
    decltype(closure()) loss;
    {
      autograd::enable_grad g;
      loss = closure();
    }
    step();
    return loss;
  }
  void zero_grad(bool set_to_none = true) {
    for (auto& g : groups_)
      for (auto& p : g.params) {
        if (set_to_none) {
          p.set_grad({});
        } else if (auto gr = p.grad(); gr.defined()) {
          autograd::no_grad ng;
          gr.zero_();
        }
      }
  }
  const std::vector<Group>& param_groups() const { return groups_; }
  std::vector<Group>& param_groups() { return groups_; }
  const Options& defaults() const { return defaults_; }
  void add_param_group(ParamGroup<T, D, Options> g) {
    REEL_CHECK(!g.params.empty(), value_error, name_, ": a parameter group needs at least one parameter");
    Options o = g.options ? *g.options : defaults_;
    o.validate();
    for (size_t i = 0; i < g.params.size(); ++i) {
      const auto& p = g.params[i];
      REEL_CHECK(p.defined(), value_error, name_, ": got an undefined tensor as a parameter");
      // (PyTorch only warns about a duplicate inside a group, then updates it twice per step)
      for (size_t j = 0; j < i; ++j)
        REEL_CHECK(g.params[j].impl_ptr() != p.impl_ptr(), value_error, name_, ": parameter ", i,
                   " appears more than once in its parameter group");
      REEL_CHECK(p.is_leaf(), value_error, name_, ": can't optimize a non-leaf tensor");
      for (const auto& h : groups_)
        for (const auto& q : h.params)
          REEL_CHECK(q.impl_ptr() != p.impl_ptr(), value_error, name_,
                     ": some parameters appear in more than one parameter group");
    }
    groups_.push_back({std::move(g.params), o, {}});
    groups_.back().state.resize(groups_.back().params.size());
  }

  StateDict state_dict() const {
    StateDict sd;
    int64_t k = 0;
    for (const auto& g : groups_) {
      ParamGroupState gs{g.options.to_map(), {}};
      for (size_t i = 0; i < g.params.size(); ++i, ++k) {
        gs.params.push_back(k);
        const State& s = g.state[i];
        if (s.step == 0) continue;  // no state yet (PyTorch leaves it out)
        auto& m = sd.state[k];
        if constexpr (State::has_step) m["step"] = AnyTensor(full<float>({}, static_cast<float>(s.step)));
        for (size_t j = 0; j < State::names.size(); ++j)
          if (s.buffer(j).defined()) m[State::names[j]] = AnyTensor(s.buffer(j).clone());
      }
      sd.param_groups.push_back(std::move(gs));
    }
    return sd;
  }
  void load_state_dict(const StateDict& sd) {
    REEL_CHECK(sd.param_groups.size() == groups_.size(), value_error,
               "load_state_dict: loaded state dict has a different number of parameter groups (", sd.param_groups.size(),
               " instead of ", groups_.size(), ")");
    for (size_t gi = 0; gi < groups_.size(); ++gi)
      REEL_CHECK(sd.param_groups[gi].params.size() == groups_[gi].params.size(), value_error,
                 "load_state_dict: loaded state dict contains a parameter group that doesn't match the size of "
                 "optimizer's group ",
                 gi, " (", sd.param_groups[gi].params.size(), " parameters instead of ", groups_[gi].params.size(), ")");
    // Check everything before changing anything.
    std::vector<std::vector<State>> states;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      auto& g = groups_[gi];
      auto& st = states.emplace_back(g.params.size());
      for (size_t i = 0; i < g.params.size(); ++i) {
        auto it = sd.state.find(sd.param_groups[gi].params[i]);
        if (it == sd.state.end()) continue;
        st[i] = load_state(it->second, g.params[i], sd.param_groups[gi].params[i]);
      }
    }
    std::vector<Options> options;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      options.push_back(groups_[gi].options);
      options.back().from_map(sd.param_groups[gi].options);
      options.back().validate();
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      groups_[gi].options = options[gi];
      groups_[gi].state = std::move(states[gi]);
    }
  }

 protected:
  Optimizer(const char* name, Options defaults) : name_(name), defaults_(std::move(defaults)) { defaults_.validate(); }
  void init_params(std::vector<Tensor<T, D>> params) {
    REEL_CHECK(!params.empty(), value_error, name_, ": optimizer got an empty parameter list");
    add_param_group({std::move(params), std::nullopt});
  }
  void init_groups(std::vector<ParamGroup<T, D, Options>> groups) {
    REEL_CHECK(!groups.empty(), value_error, name_, ": optimizer got an empty parameter list");
    for (auto& g : groups) add_param_group(std::move(g));
  }

  // Calls f(options, params, grads, states) per group, with the parameters that have a gradient.
  template <class F>
  void for_each_group(F&& f) {
    autograd::no_grad ng;
    for (auto& g : groups_) {
      params_.clear();
      grads_.clear();
      states_.clear();
      for (size_t i = 0; i < g.params.size(); ++i) {
        auto gr = g.params[i].grad();
        if (!gr.defined()) continue;
        params_.push_back(g.params[i]);
        grads_.push_back(std::move(gr));
        states_.push_back(&g.state[i]);
      }
      if (!params_.empty()) f(g.options, params_, grads_, states_);
    }
  }

 private:
  static State load_state(const std::map<std::string, AnyTensor>& m, const Tensor<T, D>& p, int64_t k) {
    State s;
    s.step = 1;  // (state present)
    auto st = m.find("step");
    if constexpr (State::has_step)
      REEL_CHECK(st != m.end() && st->second.numel() == 1, value_error, "load_state_dict: state of parameter ", k,
                 " has no step");
    if (st != m.end()) st->second.visit([&](const auto& t) {
      using U = typename std::decay_t<decltype(t)>::value_type;
      if constexpr (std::is_arithmetic_v<U>)
        s.step = static_cast<int64_t>(t.item());
      else
        raise<type_error>("load_state_dict: step of parameter ", k, " must be a real number");
    });
    for (size_t j = 0; j < State::names.size(); ++j) {
      auto it = m.find(State::names[j]);
      if (it == m.end()) continue;
      REEL_CHECK(it->second.sizes() == p.sizes(), value_error, "load_state_dict: ", State::names[j], " of parameter ", k,
                 " has shape ", it->second.sizes(), " but the parameter has shape ", p.sizes());
      // floating state follows the parameter's dtype, as in PyTorch
      s.buffer(j) = it->second.visit([&](const auto& t) -> Tensor<T, D> {
        using U = typename std::decay_t<decltype(t)>::value_type;
        if constexpr (std::is_same_v<U, T> || ((is_floating_v<U> && !is_fp8_v<U>) && !is_complex_v<T>))
          return t.template to<T>().clone();
        else
          raise<type_error>("load_state_dict: ", State::names[j], " of parameter ", k, " has dtype ",
                            scalar_type_of<U>::name, ", which does not convert to the parameter's dtype");
      });
    }
    return s;
  }

  const char* name_;
  Options defaults_;
  std::vector<Group> groups_;
  // scratch lists reused between steps
  std::vector<Tensor<T, D>> params_, grads_;
  std::vector<State*> states_;
};
}  // namespace detail

}  // namespace reel::optim
