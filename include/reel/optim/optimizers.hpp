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
#include <deque>
#include <list>
#include <map>
#include <set>
#include <tuple>
#include <typeinfo>
#ifdef __GNUG__
#include <cxxabi.h>
#endif
#include <unordered_set>
#include <variant>

#include "../foreach.hpp"
#include "adam_rule.hpp"

// The fused CUDA optimizer steps (specialized in reel/cuda/multi_tensor.cuh, <cuda.hpp>).
namespace reel::inline REEL_ABI::detail {
template <class D> struct DeviceOptim;
}

namespace reel::inline REEL_ABI::optim {

// Declares a container type's iteration order stable (specialize for your own containers).
template <class C> struct is_ordered_param_source : std::false_type {};
template <class X, class A> struct is_ordered_param_source<std::vector<X, A>> : std::true_type {};
template <class X, size_t N> struct is_ordered_param_source<std::span<X, N>> : std::true_type {};
template <class X, size_t N> struct is_ordered_param_source<std::array<X, N>> : std::true_type {};
template <class X, class A> struct is_ordered_param_source<std::deque<X, A>> : std::true_type {};
template <class X, class A> struct is_ordered_param_source<std::list<X, A>> : std::true_type {};
template <class X> struct is_ordered_param_source<std::initializer_list<X>> : std::true_type {};
template <class T, class D> struct is_ordered_param_source<foreach::TensorList<T, D>> : std::true_type {};

// Containers whose order is not reproducible: rejected at compile time.
template <class C> struct is_unordered_param_source : std::false_type {};
template <class... A> struct is_unordered_param_source<std::unordered_set<A...>> : std::true_type {};
template <class... A> struct is_unordered_param_source<std::unordered_multiset<A...>> : std::true_type {};
template <class... A> struct is_unordered_param_source<std::set<A...>> : std::true_type {};
template <class... A> struct is_unordered_param_source<std::multiset<A...>> : std::true_type {};

// A value in a parameter group's options, as PyTorch's param_groups dicts hold them.
using OptionValue = std::variant<bool, double, std::vector<double>>;

struct ParamGroupState {
  std::map<std::string, OptionValue> options;
  std::vector<int64_t> params;  // positions in the optimizer's parameter order
};
// PyTorch's optimizer.state_dict(): per-parameter state keyed by position, and the groups.
struct StateDict {
  std::map<int64_t, std::map<std::string, AnyTensor>> state;
  std::vector<ParamGroupState> param_groups;
};

#define REEL_TUPLE2 std::tuple<double, double>
#define REEL_OPTION(TYPE, NAME, DEFAULT)          \
 public:                                          \
  auto& NAME(TYPE v) {                            \
    NAME##_ = v;                                  \
    return *this;                                 \
  }                                               \
  TYPE NAME() const { return NAME##_; }           \
                                                  \
 private:                                         \
  TYPE NAME##_ = DEFAULT;

struct SGDOptions {
  REEL_OPTION(double, lr, 1e-3)
  REEL_OPTION(double, momentum, 0)
  REEL_OPTION(double, dampening, 0)
  REEL_OPTION(double, weight_decay, 0)
  REEL_OPTION(bool, nesterov, false)
  REEL_OPTION(bool, maximize, false)
 public:
  std::map<std::string, OptionValue> to_map() const {
    return {{"lr", lr_}, {"momentum", momentum_}, {"dampening", dampening_}, {"weight_decay", weight_decay_},
            {"nesterov", nesterov_}, {"maximize", maximize_}};
  }
  void from_map(const std::map<std::string, OptionValue>& m);
  void validate() const {
    REEL_CHECK(lr_ >= 0, value_error, "SGD: invalid learning rate: ", lr_);
    REEL_CHECK(momentum_ >= 0, value_error, "SGD: invalid momentum value: ", momentum_);
    REEL_CHECK(weight_decay_ >= 0, value_error, "SGD: invalid weight_decay value: ", weight_decay_);
    REEL_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), value_error,
               "SGD: Nesterov momentum requires a momentum and zero dampening");
  }
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  REEL_OPTION(double, lr, 1e-3)
  REEL_OPTION(REEL_TUPLE2, betas, std::make_tuple(0.9, 0.999))
  REEL_OPTION(double, eps, 1e-8)
  REEL_OPTION(double, weight_decay, 0)
  REEL_OPTION(bool, amsgrad, false)
  REEL_OPTION(bool, maximize, false)
 public:
  std::map<std::string, OptionValue> to_map() const {
    return {{"lr", lr_}, {"betas", std::vector<double>{std::get<0>(betas_), std::get<1>(betas_)}}, {"eps", eps_},
            {"weight_decay", weight_decay_}, {"amsgrad", amsgrad_}, {"maximize", maximize_}};
  }
  void from_map(const std::map<std::string, OptionValue>& m);
  void validate() const {
    REEL_CHECK(lr_ >= 0, value_error, "Adam: invalid learning rate: ", lr_);
    REEL_CHECK(eps_ >= 0, value_error, "Adam: invalid epsilon value: ", eps_);
    REEL_CHECK(std::get<0>(betas_) >= 0 && std::get<0>(betas_) < 1, value_error, "Adam: invalid beta parameter at index 0: ",
               std::get<0>(betas_));
    REEL_CHECK(std::get<1>(betas_) >= 0 && std::get<1>(betas_) < 1, value_error, "Adam: invalid beta parameter at index 1: ",
               std::get<1>(betas_));
    REEL_CHECK(weight_decay_ >= 0, value_error, "Adam: invalid weight_decay value: ", weight_decay_);
  }
};
// AdamW: Adam with decoupled weight decay (default 0.01).
struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { AdamOptions::weight_decay(0.01); }
  // the setters return AdamWOptions& so a fluent chain keeps the type
#define REEL_SETTER(TYPE, NAME)  \
  AdamWOptions& NAME(TYPE v) {     \
    AdamOptions::NAME(v);          \
    return *this;                  \
  }                                \
  using AdamOptions::NAME;
  REEL_SETTER(double, lr)
  REEL_SETTER(REEL_TUPLE2, betas)
  REEL_SETTER(double, eps)
  REEL_SETTER(double, weight_decay)
  REEL_SETTER(bool, amsgrad)
  REEL_SETTER(bool, maximize)
#undef REEL_SETTER
};
#undef REEL_OPTION
#undef REEL_TUPLE2

namespace detail {
using reel::detail::MsgArg;
template <class V>
V option_get(const std::map<std::string, OptionValue>& m, const char* key, V fallback) {
  auto it = m.find(key);
  if (it == m.end()) return fallback;
  REEL_CHECK(std::holds_alternative<V>(it->second), type_error, "load_state_dict: option '", key,
             "' has the wrong type");
  return std::get<V>(it->second);
}
}  // namespace detail

inline void SGDOptions::from_map(const std::map<std::string, OptionValue>& m) {
  using detail::option_get;
  lr_ = option_get(m, "lr", lr_);
  momentum_ = option_get(m, "momentum", momentum_);
  dampening_ = option_get(m, "dampening", dampening_);
  weight_decay_ = option_get(m, "weight_decay", weight_decay_);
  nesterov_ = option_get(m, "nesterov", nesterov_);
  maximize_ = option_get(m, "maximize", maximize_);
}
inline void AdamOptions::from_map(const std::map<std::string, OptionValue>& m) {
  using detail::option_get;
  lr_ = option_get(m, "lr", lr_);
  auto b = option_get(m, "betas", std::vector<double>{std::get<0>(betas_), std::get<1>(betas_)});
  REEL_CHECK(b.size() == 2, value_error, "load_state_dict: betas needs two values");
  betas_ = {b[0], b[1]};
  eps_ = option_get(m, "eps", eps_);
  weight_decay_ = option_get(m, "weight_decay", weight_decay_);
  amsgrad_ = option_get(m, "amsgrad", amsgrad_);
  maximize_ = option_get(m, "maximize", maximize_);
}

namespace detail {
template <class X> struct param_elem { using type = void; };
template <class T, class D> struct param_elem<Tensor<T, D>> { using type = Tensor<T, D>; };
template <class T, class D> struct param_elem<Tensor<T, D>*> { using type = Tensor<T, D>; };
template <class T, class D> struct param_elem<const Tensor<T, D>*> { using type = Tensor<T, D>; };
template <class R> using range_elem_t = typename param_elem<std::remove_cvref_t<std::ranges::range_value_t<R>>>::type;

template <class R>
std::string type_name() {
  const char* mangled = typeid(R).name();
#ifdef __GNUG__
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  if (status == 0 && d) return d.get();
#endif
  return mangled;
}

// The parameters of a range, checked for a reproducible order.
template <class T, class D, class R>
std::vector<Tensor<T, D>> ordered_params(const R& r, const char* fn) {
  static_assert(!is_unordered_param_source<std::remove_cvref_t<R>>::value,
                "reel::optim: parameters must come from an ordered sequence. The iteration order of a "
                "std::unordered_set (or of a std::set of tensor handles, which follows their addresses) changes "
                "between runs, so optimizer state could be matched to the wrong parameters; pass a std::vector "
                "instead (e.g. model.parameters()).");
  static_assert(std::is_same_v<range_elem_t<R>, Tensor<T, D>>,
                "reel::optim: parameters must be tensors of the optimizer's element type and device");
  if constexpr (!is_ordered_param_source<std::remove_cvref_t<R>>::value)
    warn(std::string(fn) + ": parameters were given as a " + type_name<R>() +
             ", whose iteration order reel cannot check. Optimizer state is keyed by parameter order, so this "
             "will become an error in a future release; pass a std::vector (or specialize "
             "reel::optim::is_ordered_param_source for your container).",
         "FutureWarning");
  std::vector<Tensor<T, D>> out;
  for (const auto& p : r) {
    if constexpr (std::is_pointer_v<std::remove_cvref_t<decltype(p)>>)
      out.push_back(*p);
    else
      out.push_back(p);
  }
  return out;
}
}  // namespace detail

template <class T, class D, class Options>
struct ParamGroup {
  std::vector<Tensor<T, D>> params;
  std::optional<Options> options;  // nullopt: the optimizer's defaults
};

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

// adam_rule's operations on blocks of Eigen arrays (foreach.hpp's Eigen forms).
struct EigenAdamOps {
  template <class M, class E, class W> static void lerp_(M& m, const E& e, W w) {
    reel::detail::fe::lerp([&](const auto& r) { m = r; }, m, e, w);
  }
  template <class A, class B> static auto maximum(const A& a, const B& b) { return reel::detail::fe::maximum(a, b); }
  template <class A> static auto sqrt(const A& a) { return a.sqrt(); }
};

// The same update as adam_update's foreach sequence (same operations in the same order on
// each element), fused into one pass per parameter over cache-sized blocks: the moments and
// parameters are read and written once instead of once per foreach op. For contiguous
// tensors autograd has no stake in; returns false (doing nothing) otherwise.
template <class T, class D>
bool adam_fused(const AdamOptions& o, bool decoupled, const std::vector<Tensor<T, D>>& params,
                const std::vector<Tensor<T, D>>& grads, const std::vector<AdamState<T, D>*>& states,
                const std::vector<double>& step_size, const std::vector<double>& bc2_sqrt) {
  namespace fe = reel::detail::fe;  // (the Eigen forms of the foreach bodies)
  using fe::fast_ok;
  if constexpr (!std::is_same_v<D, CPU> || is_complex_v<T>) {  // (CUDA: DeviceOptim<CUDA>::adam)
    return false;
  } else {
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& s = *states[i];
      bool ok = fast_ok(params[i].impl(), true) && fast_ok(grads[i].impl(), false) && fast_ok(s.exp_avg.impl(), true) &&
                fast_ok(s.exp_avg_sq.impl(), true) && (!o.amsgrad() || fast_ok(s.max_exp_avg_sq.impl(), true));
      if (!ok) return false;
    }
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
  if constexpr (std::is_same_v<D, CUDA>) {
    // one multi-tensor kernel for the whole group (contiguous tensors autograd has no stake in)
    if (reel::detail::DeviceOptim<D>::adam(o, decoupled, params, grads, states, s1, s2)) return;
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
      if constexpr (std::is_same_v<D, CUDA>)  // one multi-tensor kernel (contiguous tensors)
        if (reel::detail::DeviceOptim<D>::sgd(o, params, grads, states)) return;
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
