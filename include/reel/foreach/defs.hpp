#pragma once
// reel::foreach's machinery (foreach.hpp describes the ops): the list types, the functions a
// body needs for Eigen arrays and reel expressions, the argument kinds, the op definitions
// (one body each) and the runner, and the grouping of AnyTensor lists by dtype and device.
#include "../core/config.hpp"
#include <map>

#include "../interop/any_tensor.hpp"
#include "../autograd/autograd.hpp"

namespace reel::inline REEL_ABI {
namespace foreach {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
// A borrowed list of tensors: from a std::vector, a std::span or a braced list (which lives
// until the end of the call).
template <class T, class D>
class TensorList {
 public:
  TensorList(std::span<const Tensor<T, D>> s) : p_(s.data()), n_(s.size()) {}
  TensorList(std::span<Tensor<T, D>> s) : p_(s.data()), n_(s.size()) {}
  TensorList(const std::vector<Tensor<T, D>>& v) : p_(v.data()), n_(v.size()) {}
  TensorList(std::initializer_list<Tensor<T, D>> l) : p_(l.begin()), n_(l.size()) {}
  size_t size() const { return n_; }
  const Tensor<T, D>& operator[](size_t i) const { return p_[i]; }
  const Tensor<T, D>* begin() const { return p_; }
  const Tensor<T, D>* end() const { return p_ + n_; }

 private:
  const Tensor<T, D>* p_;
  size_t n_;
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// (A braced list's array lives until the end of the full expression, i.e. the whole call.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
// One scalar per tensor (PyTorch's ScalarList).
template <class S>
class ScalarList {
 public:
  ScalarList(std::span<const S> s) : p_(s.data()), n_(s.size()) {}
  ScalarList(const std::vector<S>& v) : p_(v.data()), n_(v.size()) {}
  ScalarList(std::initializer_list<S> l) : p_(l.begin()), n_(l.size()) {}
  size_t size() const { return n_; }
  S operator[](size_t i) const { return p_[i]; }

 private:
  const S* p_;
  size_t n_;
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace foreach

namespace detail::fe {
using foreach::ScalarList;
using foreach::TensorList;

// The scalar type of a list's scalar arguments: double for real tensors, T for complex ones.
template <class T> using scalar_arg_t = std::conditional_t<is_complex_v<T>, T, double>;

// ---- the few functions a body needs, for Eigen arrays (fast path) and reel expressions
template <class D> void eigen_array_probe(const Eigen::ArrayBase<D>&);  // (declared only)
template <class X> concept EigenArray = requires(const X& x) { eigen_array_probe(x); };  // (blocks too)
template <EigenArray X> auto sqrt(const X& x) { return reel::detail::vec_sqrt<typename X::Scalar>(x); }  // (exact, vectorized)
template <EigenArray X> auto exp(const X& x) { return x.exp(); }
template <EigenArray X> auto abs(const X& x) { return x.abs(); }
template <EigenArray X> auto reciprocal(const X& x) { return x.inverse(); }
template <TensorLike X> auto sqrt(const X& x) { return reel::sqrt(x); }
template <TensorLike X> auto exp(const X& x) { return reel::exp(x); }
template <TensorLike X> auto abs(const X& x) { return reel::abs(x); }
template <TensorLike X> auto reciprocal(const X& x) { return reel::reciprocal(x); }
// NaN-propagating maximum / minimum (torch.maximum): a NaN on either side wins.
template <EigenArray X, class O> auto maximum(const X& x, const O& o) { return (x.isNaN() || x > o).select(x, o); }
template <EigenArray X, class O> auto minimum(const X& x, const O& o) { return (x.isNaN() || x < o).select(x, o); }
template <TensorLike X, class O> auto maximum(const X& x, const O& o) { return reel::maximum(x, o); }
template <TensorLike X, class O> auto minimum(const X& x, const O& o) { return reel::minimum(x, o); }
// torch.lerp: s + w (e - s) where |w| < 0.5, else e - (e - s)(1 - w) (exact at w = 1).
template <class Put, class S, class E, class W>
void lerp(Put&& put, const S& s, const E& e, const W& w) {
  if constexpr (std::is_arithmetic_v<W> || is_complex_v<W>) {
    if (std::abs(w) < 0.5)
      put(s + w * (e - s));
    else
      put(e - (e - s) * (W(1) - w));
  } else if constexpr (EigenArray<W>) {
    using C = typename W::Scalar;
    using R = typename Eigen::NumTraits<C>::Real;
    put((w.abs() < R(0.5)).select(s + w * (e - s), e - (e - s) * (C(1) - w)));
  } else {
    put(reel::where(lt(reel::abs(w), 0.5), s + w * (e - s), e - (e - s) * (1 - w)));
  }
}

// ---- argument kinds. Each gives, for tensor i, what the fast path and the general path see.
template <class T, class D>
struct ListArg {
  TensorList<T, D> l;
  double alpha = 1;  // add_/sub_ scale the other list
  static constexpr bool is_list = true;
  const Tensor<T, D>& tensor(size_t i) const { return l[i]; }
  auto eigen(size_t i) const {
    using C = compute_t<T>;
    auto m = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(l[i].data_ptr(), l[i].numel()).template cast<C>();
    return m * C(alpha);  // (alpha == 1 multiplies exactly)
  }
  auto reel(size_t i) const {
    if constexpr (is_complex_v<T>)
      return l[i] * T(alpha);
    else
      return l[i] * alpha;
  }
  // add_(list, other, alpha = 1) reads `other` directly
  bool plain() const { return alpha == 1; }
};
template <class T>
struct ScalarArg {
  scalar_arg_t<T> v;
  static constexpr bool is_list = false;
  auto eigen(size_t) const { return static_cast<compute_t<T>>(v); }
  auto reel(size_t) const { return v; }
};
template <class T>
struct ScalarListArg {
  ScalarList<scalar_arg_t<T>> v;
  static constexpr bool is_list = false;
  auto eigen(size_t i) const { return static_cast<compute_t<T>>(v[i]); }
  auto reel(size_t i) const { return v[i]; }
};

template <class A> struct is_list_arg : std::false_type {};
template <class T, class D> struct is_list_arg<ListArg<T, D>> : std::true_type {};

// Whether tensor t can be written / read by the fast path: contiguous, and autograd has no
// stake in it (no tangents; under grad mode, nothing that requires grad).
inline bool fast_ok(const TensorImpl& t, bool written) {
  if (!is_contiguous(t.sizes, t.strides)) return false;
  auto* m = meta_of(t);
  if (!m) return true;
  if (!m->tangents.empty()) return false;
  if (grad_mode_flag()) return !m->requires_grad;
  return !written || !m->grad_fn;
}

// An integer list with a fractional scalar would need a floating result (PyTorch refuses
// the in-place form and promotes the other); reel keeps the list's type, so it refuses both.
inline void check_integral_scalar(const char* fn, double v) {
  REEL_CHECK(v == std::trunc(v), type_error, "foreach::", fn, ": the scalar ", v,
             " is not an integer, so the result cannot keep the list's integer dtype (convert the tensors first)");
}

template <class T, class D>
void check_list(const char* fn, int pos, const TensorList<T, D>& self, const TensorList<T, D>& other) {
  REEL_CHECK(other.size() == self.size(), value_error, "foreach::", fn, ": argument ", pos, " has ", other.size(),
             " tensors but self has ", self.size(), " (the lists must have the same length)");
  for (size_t i = 0; i < self.size(); ++i)
    REEL_CHECK(other[i].sizes() == self[i].sizes(), value_error, "foreach::", fn, ": tensor ", i, " of argument ", pos,
               " has shape ", other[i].sizes(), " but tensor ", i, " of self has shape ", self[i].sizes());
}
template <class T, class D, class A>
void check_arg(const char* fn, int pos, const TensorList<T, D>& self, const A& a) {
  if constexpr (is_list_arg<A>::value) {
    check_list(fn, pos, self, a.l);
  } else if constexpr (std::is_same_v<A, ScalarListArg<T>>) {
    REEL_CHECK(a.v.size() == self.size(), value_error, "foreach::", fn, ": argument ", pos, " has ", a.v.size(),
               " scalars but self has ", self.size(), " tensors (one scalar per tensor)");
    if constexpr (std::is_integral_v<T>)
      for (size_t i = 0; i < a.v.size(); ++i) check_integral_scalar(fn, a.v[i]);
  } else if constexpr (std::is_same_v<A, ScalarArg<T>> && std::is_integral_v<T>) {
    check_integral_scalar(fn, a.v);
  }
}

// Runs Def over the lists: out[i] = Def(self[i], args[i]...). InPlace writes into self.
template <class Def, bool InPlace, class T, class D, class... A>
auto run(TensorList<T, D> self, const A&... args) {
  static_assert(!is_fp8_v<T>, "reel::foreach: float8 tensors are storage types; convert with .to<float>() first");
  Def::template check_type<T>();
  int pos = 2;
  (check_arg(Def::name, pos++, self, args), ...);
  std::vector<Tensor<T, D>> outs;
  if constexpr (!InPlace) outs.reserve(self.size());
  if constexpr (!Backend<D>::has_data) {
    if constexpr (!InPlace)
      for (const auto& s : self) outs.push_back(empty_like(s));
  } else {
    // General path for tensor i: reel expressions (records autograd, handles strides).
    auto general = [&](size_t i) {
      const Tensor<T, D>& s = self[i];
      auto put = [&](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (InPlace)
          assign_expr(s, e);
        else if constexpr (std::is_same_v<typename E::value_type, T>)
          outs[i] = Tensor<T, D>(e);
        else  // (an integer list with a double scalar: the scalar is integral, checked above)
          outs[i] = Tensor<T, D>(cast<T>(e));
      };
      Def::apply(put, s, args.reel(i)...);
    };
    auto is_fast = [&](size_t i) {
      bool ok = fast_ok(self[i].impl(), InPlace);
      [[maybe_unused]] auto arg_ok = [&](const auto& a) {
        if constexpr (std::decay_t<decltype(a)>::is_list) ok = ok && fast_ok(a.tensor(i).impl(), false);
      };
      (arg_ok(args), ...);
      return ok;
    };
    if constexpr (device_memory_v<D>) {
      // A device: the tensors the fast path could take go through the multi-tensor kernel, a
      // few launches for the whole list; the others through the general path (kernels per tensor).
      constexpr bool kernel = Backend<D>::template foreach_supports<Def, T>;
      std::vector<size_t> mt;
      for (size_t i = 0; i < self.size(); ++i) {
        if constexpr (!InPlace) outs.push_back(Tensor<T, D>());
        if (kernel && is_fast(i)) {
          if constexpr (!InPlace) outs[i] = empty_like(self[i]);
          mt.push_back(i);
        } else {
          general(i);
        }
      }
      if constexpr (kernel)
        if (!mt.empty()) Backend<D>::template foreach_run<Def, InPlace>(mt, self, outs, args...);
      if constexpr (InPlace)
        for (size_t i : mt) self[i].bump_version();
    } else {
      // Fast path for tensor i: one vectorized pass over Eigen maps, no allocation.
      using C = compute_t<T>;
      auto fast = [&](size_t i, T* dst) {
        int64_t n = self[i].numel();
        Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> o(dst, n);
        auto put = [&](const auto& e) {
          if constexpr (std::is_same_v<C, T>)
            o = e;
          else
            o = e.template cast<T>();
        };
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> s0(self[i].data_ptr(), n);
        Def::apply(put, s0.template cast<C>(), args.eigen(i)...);
      };
      // Pass 1 (serial: may throw): the general path, and the outputs of the fast one.
      int64_t fast_elems = 0;
      bool all_fast = true;
      for (size_t i = 0; i < self.size(); ++i) {
        if constexpr (!InPlace) outs.push_back(Tensor<T, D>());
        if (is_fast(i)) {
          if constexpr (!InPlace) outs[i] = empty_like(self[i]);
          fast_elems += self[i].numel();
        } else {
          all_fast = false;
          general(i);
        }
      }
      // Pass 2: the fast tensors, split between threads when there is enough work.
      auto body = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          if (!all_fast && !is_fast(i)) continue;
          if constexpr (InPlace)
            fast(i, self[i].mutable_data_ptr());
          else
            fast(i, outs[i].mutable_data_ptr());
        }
      };
      int64_t n = static_cast<int64_t>(self.size());
      if (fast_elems >= (int64_t(1) << 16) && n > 1)
        parallel_range(n, body, 1);
      else
        body(0, n);
      if constexpr (InPlace)
        for (size_t i = 0; i < self.size(); ++i)
          if (all_fast || is_fast(i)) self[i].bump_version();
    }
  }
  if constexpr (!InPlace) return outs;
}

// ---- op definitions: name, element types accepted, body.
struct AnyType {
  template <class T> static void check_type() {}
};
struct Ordered {
  template <class T> static void check_type() {
    static_assert(!is_complex_v<T>, "reel::foreach: complex numbers have no order (maximum, minimum, clamp)");
  }
};
struct Floating {
  template <class T> static void check_type() {
    static_assert(is_floating_v<T> || is_complex_v<T>, "reel::foreach: needs floating point or complex tensors");
  }
};
#define REEL_FOREACH_DEF(NAME, KIND, ...)          \
  struct NAME##_def : KIND {                        \
    static constexpr const char* name = #NAME "_"; \
    template <class Put, class S, class... A>      \
    static void apply(Put&& put, [[maybe_unused]] const S& s, const A&... a) { __VA_ARGS__; } \
  };
REEL_FOREACH_DEF(add, AnyType, put((s + ... + a)))
REEL_FOREACH_DEF(sub, AnyType, put((s - ... - a)))
REEL_FOREACH_DEF(mul, AnyType, put((s * ... * a)))
REEL_FOREACH_DEF(div, Floating, put((s / ... / a)))  // (true division: floating lists)
REEL_FOREACH_DEF(maximum, Ordered, put(fe::maximum(s, a...)))
REEL_FOREACH_DEF(minimum, Ordered, put(fe::minimum(s, a...)))
REEL_FOREACH_DEF(clamp_min, Ordered, put(fe::maximum(s, a...)))
REEL_FOREACH_DEF(clamp_max, Ordered, put(fe::minimum(s, a...)))
REEL_FOREACH_DEF(sqrt, Floating, put(fe::sqrt(s)))
REEL_FOREACH_DEF(exp, Floating, put(fe::exp(s)))
REEL_FOREACH_DEF(abs, AnyType, put(fe::abs(s)))
REEL_FOREACH_DEF(neg, AnyType, put(-s))
REEL_FOREACH_DEF(reciprocal, Floating, put(fe::reciprocal(s)))
REEL_FOREACH_DEF(copy, AnyType, put((a, ...)))
// self + value * t1 * t2 and self + value * t1 / t2 (PyTorch's evaluation order)
REEL_FOREACH_DEF(addcmul, Floating, [&](const auto& t1, const auto& t2, const auto& v) { put(s + v * t1 * t2); }(a...))
REEL_FOREACH_DEF(addcdiv, Floating, [&](const auto& t1, const auto& t2, const auto& v) { put(s + v * t1 / t2); }(a...))
REEL_FOREACH_DEF(lerp, Floating, fe::lerp(put, s, a...))
#undef REEL_FOREACH_DEF

// ---- AnyTensor lists: group by (dtype, device), run each group with its static type.
// (Moving the outer vectors keeps the inner buffers, which the lists borrow.)
template <class T, class D>
struct Regrouped {
  std::vector<std::vector<Tensor<T, D>>> tensors;
  std::vector<std::vector<double>> scalars;
};
template <class T, class D, class A>
decltype(auto) regroup(const A& a, const std::vector<size_t>& idx, Regrouped<T, D>& keep) {
  if constexpr (std::is_same_v<A, std::vector<AnyTensor>>) {
    auto& v = keep.tensors.emplace_back();
    for (size_t i : idx) v.push_back(a[i].template as<T, D>());
    return TensorList<T, D>(v);
  } else if constexpr (std::is_same_v<A, ScalarList<double>>) {
    auto& v = keep.scalars.emplace_back();
    for (size_t i : idx) v.push_back(a[i]);
    return ScalarList<double>(v);
  } else {
    return a;
  }
}
template <class F, class... A>
std::vector<AnyTensor> run_any(const char* fn, const std::vector<AnyTensor>& self, F&& typed, const A&... args) {
  [[maybe_unused]] auto check_len = [&](const auto& a) {
    if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::vector<AnyTensor>> ||
                  std::is_same_v<std::decay_t<decltype(a)>, ScalarList<double>>)
      REEL_CHECK(a.size() == self.size(), value_error, "foreach::", fn, ": the lists have ", self.size(), " and ",
                 a.size(), " entries");
  };
  (check_len(args), ...);
  std::map<std::pair<ScalarType, DeviceType>, std::vector<size_t>> groups;
  for (size_t i = 0; i < self.size(); ++i) groups[{self[i].dtype(), self[i].device()}].push_back(i);
  std::vector<AnyTensor> out(self.size());
  for (const auto& group : groups) {
    const auto& key = group.first;  // (not a structured binding: clang before 16 cannot capture one)
    const auto& idx = group.second;
    REEL_CHECK(key.second == DeviceType::CPU, not_implemented_error, "foreach::", fn,
               ": AnyTensor lists on this device are not supported");
    visit_dtype(key.first, [&](auto v) {
      using T = decltype(v);
      if constexpr ((is_floating_v<T> || is_complex_v<T>) && !is_fp8_v<T>) {
        Regrouped<T, CPU> keep;
        keep.tensors.reserve(sizeof...(A) + 1);  // (s must stay put)
        auto& s = keep.tensors.emplace_back();
        for (size_t i : idx) s.push_back(self[i].template as<T, CPU>());
        auto call = [&] { return typed(TensorList<T, CPU>(s), regroup<T, CPU>(args, idx, keep)...); };
        if constexpr (std::is_void_v<decltype(call())>) {
          call();
        } else {
          auto r = call();
          for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = AnyTensor(r[k]);
        }
      } else {
        raise<type_error>("foreach::", fn, ": AnyTensor lists support floating point and complex tensors, got ",
                          dtype_name(key.first));
      }
    });
  }
  return out;
}

}  // namespace detail::fe
}  // namespace reel
