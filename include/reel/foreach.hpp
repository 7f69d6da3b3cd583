#pragma once
// reel::foreach: elementwise ops over lists of tensors (PyTorch's torch._foreach_*), the
// building block of the optimizers, EMA and gradient clipping.
//
// Each op is one definition (a body written once for both Eigen arrays and reel
// expressions) plus the forms it accepts. The runner validates every list first (lengths,
// shapes: value_error naming the index), then makes one pass per tensor: contiguous tensors
// without autograd involvement go through an Eigen map (vectorized, no heap allocation);
// anything else (strided views, tensors that record history or carry tangents) goes through
// reel's expressions, so autograd sees the op exactly as it would see the per-tensor loop.
// Lists of AnyTensor may mix dtypes: they are grouped by dtype and device first.
#include "core/config.hpp"

#include "foreach/defs.hpp"

namespace reel::inline REEL_ABI {
namespace detail::fe {

// ---- the callable objects: the forms each kind of op accepts.
template <class L> struct list_traits {};
template <class T, class D> struct list_traits<std::vector<Tensor<T, D>>> {
  using value_type = T;
  using device_type = D;
};
template <class T, class D> struct list_traits<std::span<const Tensor<T, D>>> : list_traits<std::vector<Tensor<T, D>>> {};
template <class T, class D> struct list_traits<std::span<Tensor<T, D>>> : list_traits<std::vector<Tensor<T, D>>> {};
template <class T, class D> struct list_traits<TensorList<T, D>> : list_traits<std::vector<Tensor<T, D>>> {};
template <class L> concept List = requires { typename list_traits<std::decay_t<L>>::value_type; };
template <class L> using list_t = TensorList<typename list_traits<std::decay_t<L>>::value_type,
                                             typename list_traits<std::decay_t<L>>::device_type>;
template <class L> using list_value_t = typename list_traits<std::decay_t<L>>::value_type;
template <class L> using sarg_t = scalar_arg_t<list_value_t<L>>;

// Result of an op: void in place, the new tensors otherwise.
template <class Def, bool InPlace>
struct Unary {
  template <List L> auto operator()(const L& self) const { return run<Def, InPlace>(list_t<L>(self)); }
  template <class T, class D> auto operator()(std::initializer_list<Tensor<T, D>> self) const {
    return run<Def, InPlace>(TensorList<T, D>(self));
  }
  auto operator()(const std::vector<AnyTensor>& self) const {
    return run_any(Def::name, self, [](auto s) { return run<Def, InPlace>(s); });
  }
};

// op(self, other_list, alpha = 1) | op(self, scalar) | op(self, scalars) | op(self, 0-dim tensor)
template <class Def, bool InPlace, bool Alpha>
struct Binary {
  template <class T, class D> using TL = TensorList<T, D>;
  template <class T, class D>
  static auto with_list(TL<T, D> s, TL<T, D> o, double alpha) {
    REEL_CHECK(Alpha || alpha == 1, value_error, "foreach::", Def::name, ": takes no alpha");
    return run<Def, InPlace>(s, ListArg<T, D>{o, alpha});
  }
  template <class T, class D>
  static auto with_tensor(TL<T, D> s, const Tensor<T, D>& t, double alpha) {
    REEL_CHECK(t.numel() == 1, value_error, "foreach::", Def::name, ": the tensor operand must have one element, got shape ",
               t.sizes());
    T v = t.item();
    if constexpr (is_complex_v<T>)
      return run<Def, InPlace>(s, ScalarArg<T>{v * alpha});
    else
      return run<Def, InPlace>(s, ScalarArg<T>{static_cast<double>(v) * alpha});
  }
  template <List L>
  auto operator()(const L& self, std::type_identity_t<TL<list_value_t<L>, typename list_traits<L>::device_type>> other,
                  double alpha = 1) const {
    return with_list(list_t<L>(self), other, alpha);
  }
  template <class T, class D>
  auto operator()(std::initializer_list<Tensor<T, D>> self, std::type_identity_t<TL<T, D>> other, double alpha = 1) const {
    return with_list(TL<T, D>(self), other, alpha);
  }
  template <List L> auto operator()(const L& self, sarg_t<L> scalar) const {
    return run<Def, InPlace>(list_t<L>(self), ScalarArg<list_value_t<L>>{scalar});
  }
  template <class T, class D> auto operator()(std::initializer_list<Tensor<T, D>> self, scalar_arg_t<T> scalar) const {
    return run<Def, InPlace>(TL<T, D>(self), ScalarArg<T>{scalar});
  }
  template <List L> auto operator()(const L& self, ScalarList<sarg_t<L>> scalars) const {
    return run<Def, InPlace>(list_t<L>(self), ScalarListArg<list_value_t<L>>{scalars});
  }
  template <List L>
  auto operator()(const L& self, const Tensor<list_value_t<L>, typename list_traits<L>::device_type>& scalar,
                  double alpha = 1) const {
    return with_tensor(list_t<L>(self), scalar, alpha);
  }
  // AnyTensor lists (grouped by dtype)
  auto operator()(const std::vector<AnyTensor>& self, const std::vector<AnyTensor>& other, double alpha = 1) const {
    return run_any(Def::name, self, [alpha](auto s, auto o) { return with_list(s, o, alpha); }, other);
  }
  auto operator()(const std::vector<AnyTensor>& self, double scalar) const {
    return run_any(Def::name, self, [](auto s, double v) {
      using T = typename std::decay_t<decltype(s[0])>::value_type;
      return run<Def, InPlace>(s, ScalarArg<T>{scalar_arg_t<T>(v)});
    }, scalar);
  }
};

// op(self, t1, t2, value = 1) | op(self, t1, t2, values) | op(self, t1, t2, 0-dim tensor)
template <class Def, bool InPlace>
struct Pointwise {
  template <class T, class D> using TL = TensorList<T, D>;
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> t1, std::type_identity_t<TL<T, D>> t2,
                  sarg_t<L> value = 1) const {
    return run<Def, InPlace>(list_t<L>(self), ListArg<T, D>{t1}, ListArg<T, D>{t2}, ScalarArg<T>{value});
  }
  template <class T, class D>
  auto operator()(std::initializer_list<Tensor<T, D>> self, std::type_identity_t<TL<T, D>> t1,
                  std::type_identity_t<TL<T, D>> t2, scalar_arg_t<T> value = 1) const {
    return run<Def, InPlace>(TL<T, D>(self), ListArg<T, D>{t1}, ListArg<T, D>{t2}, ScalarArg<T>{value});
  }
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> t1, std::type_identity_t<TL<T, D>> t2,
                  ScalarList<sarg_t<L>> values) const {
    return run<Def, InPlace>(list_t<L>(self), ListArg<T, D>{t1}, ListArg<T, D>{t2}, ScalarListArg<T>{values});
  }
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> t1, std::type_identity_t<TL<T, D>> t2,
                  const Tensor<T, D>& value) const {
    REEL_CHECK(value.numel() == 1, value_error, "foreach::", Def::name, ": the value tensor must have one element");
    return (*this)(self, t1, t2, sarg_t<L>(value.item()));
  }
};

// lerp(self, end, weight) with a scalar weight, one weight per tensor, or a list of weight tensors
template <class Def, bool InPlace>
struct Lerp {
  template <class T, class D> using TL = TensorList<T, D>;
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> end, sarg_t<L> weight) const {
    return run<Def, InPlace>(list_t<L>(self), ListArg<T, D>{end}, ScalarArg<T>{weight});
  }
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> end, ScalarList<sarg_t<L>> weights) const {
    return run<Def, InPlace>(list_t<L>(self), ListArg<T, D>{end}, ScalarListArg<T>{weights});
  }
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  auto operator()(const L& self, std::type_identity_t<TL<T, D>> end, std::type_identity_t<TL<T, D>> weights) const {
    return run<Def, InPlace>(list_t<L>(self), ListArg<T, D>{end}, ListArg<T, D>{weights});
  }
  template <class T, class D>
  auto operator()(std::initializer_list<Tensor<T, D>> self, std::type_identity_t<TL<T, D>> end, scalar_arg_t<T> w) const {
    return run<Def, InPlace>(TL<T, D>(self), ListArg<T, D>{end}, ScalarArg<T>{w});
  }
};

// zero_(self): fills with zeros (NaNs too, which a multiplication by 0 would keep)
template <class D, class T> constexpr bool zero_kernel() {
  if constexpr (device_memory_v<D>)
    return Backend<D>::template foreach_zero_supports<T>;
  else
    return false;
}
struct Zero {
  template <List L> void operator()(const L& self) const {
    using T = list_value_t<L>;
    using D = typename list_traits<L>::device_type;
    if constexpr (zero_kernel<D, T>()) {
      // contiguous tensors autograd has no stake in: the multi-tensor kernel
      auto l = list_t<L>(self);
      std::vector<size_t> mt;
      for (size_t i = 0; i < l.size(); ++i) {
        if (fast_ok(l[i].impl(), true))
          mt.push_back(i);
        else
          assign_expr(l[i], Scalar<T>(T(0)));
      }
      if (!mt.empty()) Backend<D>::foreach_zero(mt, l);
      for (size_t i : mt) l[i].bump_version();
    } else {
      for (const auto& t : list_t<L>(self)) assign_expr(t, Scalar<T>(T(0)));
    }
  }
  template <class T, class D> void operator()(std::initializer_list<Tensor<T, D>> self) const {
    (*this)(TensorList<T, D>(self));
  }
};

// copy_(self, src): self[i] <- src[i]
struct Copy {
  template <List L, class T = list_value_t<L>, class D = typename list_traits<L>::device_type>
  void operator()(const L& self, std::type_identity_t<TensorList<T, D>> src) const {
    run<copy_def, true>(list_t<L>(self), ListArg<T, D>{src});
  }
  template <class T, class D>
  void operator()(std::initializer_list<Tensor<T, D>> self, std::type_identity_t<TensorList<T, D>> src) const {
    run<copy_def, true>(TensorList<T, D>(self), ListArg<T, D>{src});
  }
};

// p-norm of one tensor, fast path: a pass over contiguous data in the accumulation type.
template <class T, class D>
Tensor<real_t<T>, D> norm_one(const Tensor<T, D>& t, double p) {
  using R = real_t<T>;
  if constexpr (!Backend<D>::host_memory) {
    return reel::norm(t, p);  // (the pass below reads host memory)
  } else {
    if (!fast_ok(t.impl(), false)) return reel::norm(t, p);
    using A = std::conditional_t<std::is_same_v<real_t<compute_t<T>>, float>, double, real_t<compute_t<T>>>;
    auto a = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(t.data_ptr(), t.numel()).template cast<compute_t<T>>().abs().template cast<A>();
    A r;
    if (t.numel() == 0)
      r = 0;
    else if (std::isinf(p))
      r = p > 0 ? (a.isNaN().any() ? std::numeric_limits<A>::quiet_NaN() : a.maxCoeff())
                : (a.isNaN().any() ? std::numeric_limits<A>::quiet_NaN() : a.minCoeff());
    else if (p == 2)
      r = std::sqrt(a.square().sum());
    else if (p == 1)
      r = a.sum();
    else if (p == 0)
      r = (a != A(0)).template cast<A>().sum();
    else
      r = std::pow(a.pow(A(p)).sum(), A(1 / p));
    return full<R, D>({}, static_cast<R>(r));
  }
}
struct Norm {
  template <List L> auto operator()(const L& self, double p = 2) const {
    using T = list_value_t<L>;
    using D = typename list_traits<L>::device_type;
    static_assert(is_floating_v<T> || is_complex_v<T>, "reel::foreach::norm: needs floating point or complex tensors");
    std::vector<Tensor<real_t<T>, D>> out;
    out.reserve(list_t<L>(self).size());
    for (const auto& t : list_t<L>(self)) out.push_back(norm_one(t, p));
    return out;
  }
  template <class T, class D> auto operator()(std::initializer_list<Tensor<T, D>> self, double p = 2) const {
    return (*this)(TensorList<T, D>(self), p);
  }
};
}  // namespace detail::fe

namespace foreach {
using namespace detail::fe;  // (the op objects below name their definitions)
#define REEL_FOREACH(KIND, NAME, ...)                              \
  inline constexpr detail::fe::KIND<detail::fe::NAME##_def, true __VA_OPT__(,) __VA_ARGS__> NAME##_{}; \
  inline constexpr detail::fe::KIND<detail::fe::NAME##_def, false __VA_OPT__(,) __VA_ARGS__> NAME{};
REEL_FOREACH(Binary, add, true)
REEL_FOREACH(Binary, sub, true)
REEL_FOREACH(Binary, mul, false)
REEL_FOREACH(Binary, div, false)
REEL_FOREACH(Binary, maximum, false)
REEL_FOREACH(Binary, minimum, false)
REEL_FOREACH(Binary, clamp_min, false)
REEL_FOREACH(Binary, clamp_max, false)
REEL_FOREACH(Pointwise, addcmul)
REEL_FOREACH(Pointwise, addcdiv)
REEL_FOREACH(Lerp, lerp)
REEL_FOREACH(Unary, sqrt)
REEL_FOREACH(Unary, exp)
REEL_FOREACH(Unary, abs)
REEL_FOREACH(Unary, neg)
REEL_FOREACH(Unary, reciprocal)
#undef REEL_FOREACH
inline constexpr detail::fe::Zero zero_{};
inline constexpr detail::fe::Copy copy_{};
inline constexpr detail::fe::Norm norm{};
}  // namespace foreach

// EMA of parameters: ema = decay * ema + (1 - decay) * model, as foreach::mul_ then foreach::add_.
template <class T, class D>
void update_ema(foreach::TensorList<T, D> ema_params, std::type_identity_t<foreach::TensorList<T, D>> model_params,
                double decay) {
  autograd::no_grad guard;
  foreach::mul_(ema_params, decay);
  foreach::add_(ema_params, model_params, 1 - decay);
}
template <class T, class D>
void update_ema(const std::vector<Tensor<T, D>>& ema_params, const std::vector<Tensor<T, D>>& model_params, double decay) {
  update_ema(foreach::TensorList<T, D>(ema_params), model_params, decay);
}
template <class T, class D>
void update_ema(std::initializer_list<Tensor<T, D>> ema_params,
                std::type_identity_t<foreach::TensorList<T, D>> model_params, double decay) {
  update_ema(foreach::TensorList<T, D>(ema_params), model_params, decay);
}

}  // namespace reel
