#pragma once
// reel::optim's options and parameters: SGDOptions, AdamOptions, AdamWOptions (PyTorch's
// defaults and checks), the state_dict structures, parameter groups, and the check that
// parameters come from an ordered sequence (optimizers.hpp says why).
#include "../core/config.hpp"
#include <deque>
#include <list>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>
#include <variant>

#include "../core/type_name.hpp"
#include "../foreach.hpp"
#include "../io/value.hpp"

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

// The layout torch.save writes for optimizer.state_dict(), as a Value (save() it):
//   {"state": {0: {"step": tensor, "exp_avg": tensor, ...}, ...},
//    "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), ..., "params": [0, 1]}, ...]}
inline Value to_value(const StateDict& sd) {
  Value state = Value::dict();
  for (const auto& [k, m] : sd.state) {
    Value s = Value::dict();
    for (const auto& [name, t] : m) s.set(Value(name), Value(t));
    state.set(Value(k), s);
  }
  Value groups = Value::list();
  for (const ParamGroupState& g : sd.param_groups) {
    Value d = Value::dict();
    for (const auto& [name, o] : g.options) {
      if (const auto* v = std::get_if<std::vector<double>>(&o))
        d.set(Value(name), Value::tuple(std::vector<Value>(v->begin(), v->end())));
      else if (const auto* b = std::get_if<bool>(&o))
        d.set(Value(name), Value(*b));
      else
        d.set(Value(name), Value(std::get<double>(o)));
    }
    d.set(Value("params"), Value::list(std::vector<Value>(g.params.begin(), g.params.end())));
    groups.append(d);
  }
  Value out = Value::dict();
  out.set(Value("state"), state);
  out.set(Value("param_groups"), groups);
  return out;
}
// The other way (what torch.load gives for a PyTorch optimizer's state_dict, or to_value's):
// options that are None (foreach, fused, ...) are left out; value_error naming what is
// malformed.
inline StateDict from_value(const Value& v) {
  auto need = [](bool ok, const char* what) {
    REEL_CHECK(ok, value_error, "optim::from_value: not an optimizer state_dict (", what, ")");
  };
  need(v.is_dict() && v.contains(Value("state")) && v.contains(Value("param_groups")), "no 'state' and 'param_groups'");
  StateDict sd;
  const Value& state = v.at("state");
  need(state.is_dict(), "'state' is not a dict");
  for (size_t i = 0; i < state.size(); ++i) {
    need(state.keys()[i].is_int() && state.values()[i].is_dict(), "'state' maps ints to dicts");
    auto& m = sd.state[state.keys()[i].to_int()];
    const Value& s = state.values()[i];
    for (size_t j = 0; j < s.size(); ++j) {
      need(s.keys()[j].is_string(), "a state entry's key is not a string");
      const Value& x = s.values()[j];
      if (x.is_tensor())
        m[s.keys()[j].to_string()] = x.tensor();
      else if (x.is_int() || x.is_double())  // (PyTorch before 1.12 kept step as a number)
        m[s.keys()[j].to_string()] = AnyTensor(full<float>({}, static_cast<float>(x.to_double())));
      else
        need(false, "a state entry is neither a tensor nor a number");
    }
  }
  const Value& groups = v.at("param_groups");
  need(groups.is_list() || groups.is_tuple(), "'param_groups' is not a list");
  for (const Value& g : groups.items()) {
    need(g.is_dict() && g.contains(Value("params")), "a param group without 'params'");
    ParamGroupState gs;
    for (size_t j = 0; j < g.size(); ++j) {
      need(g.keys()[j].is_string(), "a param group's key is not a string");
      const std::string& name = g.keys()[j].to_string();
      const Value& x = g.values()[j];
      if (name == "params") {
        need(x.is_list() || x.is_tuple(), "'params' is not a list");
        for (const Value& p : x.items()) {
          need(p.is_int(), "'params' holds something other than ints");
          gs.params.push_back(p.to_int());
        }
      } else if (x.is_bool()) {
        gs.options[name] = x.to_bool();
      } else if (x.is_int() || x.is_double()) {
        gs.options[name] = x.to_double();
      } else if (x.is_tuple() || x.is_list()) {
        std::vector<double> xs;
        for (const Value& e : x.items()) {
          need(e.is_int() || e.is_double(), "an option's tuple holds something other than numbers");
          xs.push_back(e.to_double());
        }
        gs.options[name] = xs;
      } else if (x.is_tensor() && x.tensor().numel() == 1 && (x.tensor().is<float>() || x.tensor().is<double>())) {
        const AnyTensor& t = x.tensor();  // (a tensor learning rate)
        gs.options[name] = t.is<float>() ? static_cast<double>(t.as<float>().item()) : t.as<double>().item();
      }  // None and strings (foreach=None, fused=None, ...): not reel's options
    }
    sd.param_groups.push_back(std::move(gs));
  }
  return sd;
}

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

using reel::detail::type_name;

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
         WarningCategory::FutureWarning);
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

}  // namespace reel::optim
