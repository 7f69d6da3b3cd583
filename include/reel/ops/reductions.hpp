#pragma once
// Reductions and scans (sorting, histc, cat/stack, gather/scatter: sorting.hpp, histc.hpp,
// cat.hpp, indexing.hpp; the kernels: reduce_kernels.hpp).
#include "../core/config.hpp"
#include <optional>

#include "reduce_kernels.hpp"
#include "select.hpp"
#include "../autograd/record.hpp"

namespace reel::inline REEL_ABI {

// ------------------------------------------------------------------ sum / mean / prod
template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::sum_t<detail::value_t<X>>, detail::device_t<X>> sum(const X& xe, Shape dims = {}, bool keepdim = false) {
  auto x = detail::materialize(xe);
  using T = detail::value_t<X>;
  using R = detail::sum_t<T>;
  using D = detail::device_t<X>;
  auto out = detail::reduce_runs<R, detail::RunKind::Sum>(x.detach(), dims, keepdim, "sum",
                                    [](const T* p, int64_t n) { return detail::sum_run<R>(p, n); });
  if constexpr (std::is_same_v<R, T>)
    if (x.impl().autograd)
      return Tensor<T, D>(detail::record_sum(x.impl_ptr(), out.impl_ptr(), dims,
                                             detail::plan_reduce(x.sizes(), dims, true, "sum").out_keep, keepdim, 1.0,
                                             detail::grad_type_ptr<T, D>()));
  return out;
}
namespace detail {
// sum / mean of an expression without materializing it, where that gives what reducing the
// materialized tensor gives: on the CPU, float / double / complex, below the parallel
// threshold, over trailing dims (or all), nothing to record. Empty where it does not apply.
template <bool Mean, class E>
std::optional<Tensor<value_t<E>, device_t<E>>> reduce_expr(const E& e, const Shape& dims, bool keepdim,
                                                             const char* fn) {
  using T = value_t<E>;
  using D = device_t<E>;
  if constexpr (Backend<D>::host_memory && (std::is_floating_point_v<T> || is_complex_v<T>)) {
    const Shape s = shape_of(e);
    const int64_t n = numel_of(s);
    if (n == 0 || n >= kParallelThreshold || expr_records(e)) return std::nullopt;
    auto p = plan_reduce(s, dims, keepdim, fn);
    if (!std::is_sorted(p.perm.begin(), p.perm.end()) || (p.outer > 1 && p.inner > kReduceTile)) return std::nullopt;
    auto out = empty<T, D>(p.out);
    if (CaptureTrace* t = capturing()) {
      keep_expr_kernel(*t, out, e, [e, p, out] { sum_expr_cpu(e, p, Mean, out.mutable_data_ptr()); });
      Recorder<T, D>::describe(*t, out, e, s, reduced_mask(s, p), Mean);
    } else
      sum_expr_cpu(e, p, Mean, out.mutable_data_ptr());
    return out;
  } else {
    return std::nullopt;
  }
}
}  // namespace detail

// (An expression is reduced as it is evaluated where detail::reduce_expr applies.)
template <class X>
  requires is_expr_v<X>
auto sum(const X& xe, Shape dims = {}, bool keepdim = false) {
  if constexpr (std::is_same_v<detail::sum_t<detail::value_t<X>>, detail::value_t<X>>)
    if (auto r = detail::reduce_expr<false>(xe, dims, keepdim, "sum")) return *r;
  return sum(detail::materialize(xe), dims, keepdim);
}

template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::value_t<X>, detail::device_t<X>> mean(const X& xe, Shape dims = {}, bool keepdim = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T> || is_complex_v<T>,
                "reel::mean: could not infer output dtype; the input must be a floating point or complex tensor");
  using D = detail::device_t<X>;
  auto x = detail::materialize(xe);
  auto out = detail::reduce_runs<T, detail::RunKind::Mean>(x.detach(), dims, keepdim, "mean", [](const T* p, int64_t n) {
    using C = compute_t<T>;
    if (n == 0) return convert<T>(C(std::numeric_limits<real_t<C>>::quiet_NaN()));
    return convert<T>(detail::sum_run<C>(p, n) / static_cast<real_t<C>>(n));
  });
  if (x.impl().autograd) {
    double n = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(out.numel(), 1));
    return Tensor<T, D>(detail::record_sum(x.impl_ptr(), out.impl_ptr(), dims,
                                           detail::plan_reduce(x.sizes(), dims, true, "mean").out_keep, keepdim, 1.0 / n,
                                           detail::grad_type_ptr<T, D>()));
  }
  return out;
}
template <class X>
  requires is_expr_v<X>
auto mean(const X& xe, Shape dims = {}, bool keepdim = false) {
  if (auto r = detail::reduce_expr<true>(xe, dims, keepdim, "mean")) return *r;
  return mean(detail::materialize(xe), dims, keepdim);
}

template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::sum_t<detail::value_t<X>>, detail::device_t<X>> prod(const X& xe, Shape dims = {}, bool keepdim = false) {
  auto x = detail::materialize(xe);
  using T = detail::value_t<X>;
  using R = detail::sum_t<T>;
  using D = detail::device_t<X>;
  auto out = detail::reduce_runs<R, detail::RunKind::Prod>(x.detach(), dims, keepdim, "prod", [](const T* p, int64_t n) {
    using C = compute_t<R>;
    C acc(1);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (detail::wraps_v<C>)
        acc = detail::wrap_mul(acc, convert<C>(p[i]));  // integers wrap modulo 2^64, as in PyTorch
      else
        acc *= convert<C>(p[i]);
    }
    return convert<R>(acc);
  });
  if constexpr (std::is_same_v<R, T> && (is_floating_v<T> || is_complex_v<T>))
    if (x.impl().autograd) {
      // d prod / d x_i = prod / x_i: the rule needs nonzero inputs
      auto check = [](const Tensor<T, D>& v) {
        REEL_CHECK(!sum(cast<int64_t>(eq(v.detach(), T(0)))).item(), not_implemented_error,
                   "prod: the derivative at inputs that are exactly zero is not implemented");
      };
      return detail::record_fn(
          out, "ProdBackward", {x}, {x},
          [x, dims, check](const Tensor<T, D>& g) {
            check(x);
            Tensor<T, D> p = prod(x, dims, true);
            auto gk = g.reshape(p.sizes());
            if constexpr (is_complex_v<T>)
              return std::vector{Tensor<T, D>(gk * conj(p) / conj(x))};
            else
              return std::vector{Tensor<T, D>(gk * p / x)};
          },
          [x, dims, keepdim, check](const std::vector<Tensor<T, D>>& t) {
            check(x);
            return Tensor<T, D>(prod(x, dims, keepdim) * sum(Tensor<T, D>(t[0] / x), dims, keepdim));
          });
    }
  return out;
}
template <class X>
  requires is_expr_v<X>
auto prod(const X& xe, Shape dims = {}, bool keepdim = false) {
  return prod(detail::materialize(xe), dims, keepdim);
}

// ------------------------------------------------------------------ amax / amin
namespace detail {
template <bool Max, class T>
T extreme_run(const T* p, int64_t n, const char* fn) {
  REEL_CHECK(n > 0, index_error, fn, ": cannot reduce over a zero-size dimension");
  if constexpr (std::is_floating_point_v<T>) {
    auto m = eigen_run(p, n);
    if constexpr (Max)
      return m.template maxCoeff<Eigen::PropagateNaN>();
    else
      return m.template minCoeff<Eigen::PropagateNaN>();
  } else {
    compute_t<T> best = convert<compute_t<T>>(p[0]);
    for (int64_t i = 1; i < n; ++i) {
      auto v = convert<compute_t<T>>(p[i]);
      if (is_nan(best)) break;
      if (is_nan(v) || (Max ? v > best : v < best)) best = v;
    }
    return convert<T>(best);
  }
}
}  // namespace detail

namespace detail {
// amax/amin: the gradient is shared evenly between the elements equal to the result (as in
// PyTorch, none equals a NaN result: its gradient is NaN; `nan_selects`: the NaNs share it).
template <bool Max, class T, class D>
Tensor<T, D> extreme(const Tensor<T, D>& x, const Shape& dims, bool keepdim, bool nan_selects = false) {
  const char* fn = Max ? "amax" : "amin";
  auto out = reduce_runs<T, Max ? RunKind::Max : RunKind::Min>(x.detach(), dims, keepdim, fn,
                            [fn](const T* p, int64_t n) { return extreme_run<Max>(p, n, fn); });
  if constexpr (autograd_type_v<T, D>) {
    if (!x.impl().autograd) return out;
    auto in = x.sizes();
    Tensor<T, D> r = unreduce(out.detach(), in, dims);
    Tensor<T, D> mask = nan_selects ? Tensor<T, D>(cast<T>(logical_or(eq(x.detach(), r), logical_and(isnan(x.detach()), isnan(r)))))
                                    : Tensor<T, D>(cast<T>(eq(x.detach(), r)));
    Tensor<T, D> count = sum(mask, dims, true);
    Tensor<T, D> share = mask / unreduce(count, in, dims);
    return record_fn(
        out, Max ? "AmaxBackward" : "AminBackward", {x}, {},
        [share, in, dims](const Tensor<T, D>& g) { return std::vector{Tensor<T, D>(share * unreduce(g, in, dims))}; },
        [share, dims, keepdim](const std::vector<Tensor<T, D>>& t) { return sum(Tensor<T, D>(t[0] * share), dims, keepdim); });
  }
  return out;
}
}  // namespace detail

template <TensorLike X>
  requires is_tensor_v<X>
auto amax(const X& xe, Shape dims = {}, bool keepdim = false) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "amax");
  return detail::extreme<true>(detail::materialize(xe), dims, keepdim);
}
template <class X>
  requires is_expr_v<X>
auto amax(const X& xe, Shape dims = {}, bool keepdim = false) {
  return amax(detail::materialize(xe), dims, keepdim);
}
template <TensorLike X>
  requires is_tensor_v<X>
auto amin(const X& xe, Shape dims = {}, bool keepdim = false) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "amin");
  return detail::extreme<false>(detail::materialize(xe), dims, keepdim);
}
template <class X>
  requires is_expr_v<X>
auto amin(const X& xe, Shape dims = {}, bool keepdim = false) {
  return amin(detail::materialize(xe), dims, keepdim);
}
// max(x) / min(x): the largest / smallest element as a 0-d tensor (NaN if any is NaN).
template <TensorLike X> auto max(const X& x) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "max");
  return amax(x);
}
template <TensorLike X> auto min(const X& x) {
  REEL_REQUIRE_ORDERED(detail::value_t<X>, "min");
  return amin(x);
}

// ------------------------------------------------------------------ argmax / argmin / max(dim)
namespace detail {
template <bool Max, class T>
int64_t arg_extreme_run(const T* p, int64_t n, const char* fn) {
  REEL_CHECK(n > 0, index_error, fn, ": cannot reduce over a zero-size dimension");
  int64_t best = 0;
  auto bv = convert<compute_t<T>>(p[0]);
  if (is_nan(bv)) return 0;
  for (int64_t i = 1; i < n; ++i) {
    auto v = convert<compute_t<T>>(p[i]);
    if (is_nan(v)) return i;  // the first NaN wins, as in PyTorch
    if (Max ? v > bv : v < bv) {
      bv = v;
      best = i;
    }
  }
  return best;
}
}  // namespace detail

template <TensorLike X>
Tensor<int64_t, detail::device_t<X>> argmax(const X& xe, std::optional<int64_t> dim = {}, bool keepdim = false) {
  using T = detail::value_t<X>;
  REEL_REQUIRE_ORDERED(T, "argmax");
  auto x = detail::materialize(xe);
  if (!dim) x = x.reshape({-1});
  return detail::reduce_runs<int64_t, detail::RunKind::ArgMax>(x, dim ? Shape{*dim} : Shape{0}, dim ? keepdim : false, "argmax",
                                      [](const T* p, int64_t n) { return detail::arg_extreme_run<true>(p, n, "argmax"); });
}
template <TensorLike X>
Tensor<int64_t, detail::device_t<X>> argmin(const X& xe, std::optional<int64_t> dim = {}, bool keepdim = false) {
  using T = detail::value_t<X>;
  REEL_REQUIRE_ORDERED(T, "argmin");
  auto x = detail::materialize(xe);
  if (!dim) x = x.reshape({-1});
  return detail::reduce_runs<int64_t, detail::RunKind::ArgMin>(x, dim ? Shape{*dim} : Shape{0}, dim ? keepdim : false, "argmin",
                                      [](const T* p, int64_t n) { return detail::arg_extreme_run<false>(p, n, "argmin"); });
}

template <TensorLike X>
auto max(const X& xe, int64_t dim, bool keepdim = false) {
  using T = detail::value_t<X>;
  REEL_REQUIRE_ORDERED(T, "max");
  auto x = detail::materialize(xe);
  auto idx = argmax(x, dim, true);
  return detail::select_along<T>(x, idx, dim, keepdim);
}
template <TensorLike X>
auto min(const X& xe, int64_t dim, bool keepdim = false) {
  using T = detail::value_t<X>;
  REEL_REQUIRE_ORDERED(T, "min");
  auto x = detail::materialize(xe);
  auto idx = argmin(x, dim, true);
  return detail::select_along<T>(x, idx, dim, keepdim);
}

// ------------------------------------------------------------------ composites
// log(sum(exp(x))) computed stably around the max; rows that are all -inf give -inf.
template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::value_t<X>, detail::device_t<X>> logsumexp(const X& xe, Shape dims, bool keepdim = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T>, "reel::logsumexp: needs a floating point tensor");
  auto x = detail::materialize(xe);
  Tensor<T, detail::device_t<X>> m = amax(x.detach(), dims, true);
  Tensor<T, detail::device_t<X>> ms = where(isinf(m), T(0), m);
  auto s = sum(exp(x - ms), dims, true);
  Tensor<T, detail::device_t<X>> r = log(s) + ms;
  if (keepdim) return r;
  auto p = detail::plan_reduce(x.sizes(), dims, false, "logsumexp");
  return r.reshape(p.out);
}
template <class X>
  requires is_expr_v<X>
auto logsumexp(const X& xe, Shape dims, bool keepdim = false) {
  return logsumexp(detail::materialize(xe), dims, keepdim);
}
template <TensorLike X>
auto logsumexp(const X& xe, int64_t dim, bool keepdim = false) {
  return logsumexp(xe, Shape{dim}, keepdim);
}

namespace detail {
// The p-norm's root s^(1/p) of s = sum |x|^p, with derivative s^(1/p - 1) / p written as
// out^(1 - p) / p (0 at an infinite norm, so finite elements get 0 there) and taken as 0 where
// the norm is 0: the zero vector's norm has gradient 0 (PyTorch's subgradient).
struct NormRootOp : FloatRule {
  double p;
  template <class C> REEL_HD C apply(C s) const { return p == 2 ? std::sqrt(s) : std::pow(s, static_cast<C>(1.0 / p)); }
  template <class O, class S> auto d0(const O& out, const S&) const {
    return where(eq(out, 0), 0, pow(out, 1 - p) * (1 / p));
  }
};
}  // namespace detail

// p-norm over all elements (or `dims`); p = inf / -inf give max / min of |x|, p = 0 counts
// nonzeros.
template <TensorLike X>
  requires is_tensor_v<X>
Tensor<real_t<detail::value_t<X>>, detail::device_t<X>> norm(const X& xe, double p = 2, Shape dims = {},
                                                              bool keepdim = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::norm: needs a floating point or complex tensor");
  using R = real_t<T>;
  auto x = detail::materialize(xe);
  Tensor<R, detail::device_t<X>> a = abs(x);
  // (the gradient is shared by the elements equal to the norm, and by the NaNs of a NaN norm)
  if (std::isinf(p)) return p > 0 ? detail::extreme<true>(a, dims, keepdim, true) : detail::extreme<false>(a, dims, keepdim, true);
  if (p == 0) return sum(cast<R>(ne(a, R(0))), dims, keepdim);
  if (p == 1) return sum(a, dims, keepdim);
  auto s = p == 2 ? sum(square(a), dims, keepdim) : sum(pow(a, static_cast<R>(p)), dims, keepdim);
  return Tensor<R, detail::device_t<X>>(make_expr(detail::NormRootOp{{}, p}, s));
}
template <class X>
  requires is_expr_v<X>
auto norm(const X& xe, double p = 2, Shape dims = {}, bool keepdim = false) {
  return norm(detail::materialize(xe), p, dims, keepdim);
}

// ------------------------------------------------------------------ var / std
// var = sum |x - mean|^2 / max(0, N - correction) over dims (all when empty; N elements
// each), std_dev its square root (PyTorch's std: the name std would clash with namespace std
// under `using namespace reel`), whose gradient is 0 where it is 0 (PyTorch's std_backward).
// Complex x gives a real result. var_mean / std_dev_mean return (var or std, mean).
namespace detail {
// var of x about its mean m (kept dims), for var and var_mean.
template <class T, class D>
Tensor<real_t<T>, D> var_about(const Tensor<T, D>& x, const Tensor<T, D>& m, const Shape& dims, double correction, bool keepdim) {
  using R = real_t<T>;
  Tensor<T, D> d = x - m;
  Tensor<R, D> s = [&] {
    if constexpr (is_complex_v<T>)
      return sum(real(conj(d) * d), dims, keepdim);
    else
      return sum(square(d), dims, keepdim);
  }();
  const double n = s.numel() == 0 ? 0.0 : static_cast<double>(x.numel()) / static_cast<double>(s.numel());
  return Tensor<R, D>(s / std::max(0.0, n - correction));
}
}  // namespace detail
template <TensorLike X>
auto var(const X& xe, Shape dims = {}, double correction = 1, bool keepdim = false) {
  using T = detail::value_t<X>;
  static_assert(is_floating_v<T> || is_complex_v<T>, "reel::var: needs a floating point or complex tensor");
  auto x = detail::materialize(xe);
  return detail::var_about(x, mean(x, dims, true), dims, correction, keepdim);
}
template <TensorLike X>
auto std_dev(const X& xe, Shape dims = {}, double correction = 1, bool keepdim = false) {
  auto v = var(xe, std::move(dims), correction, keepdim);
  return decltype(v)(make_expr(detail::NormRootOp{{}, 2}, v));
}
template <TensorLike X>
auto var_mean(const X& xe, Shape dims = {}, double correction = 1, bool keepdim = false) {
  auto x = detail::materialize(xe);
  auto m = mean(x, dims, true);  // (once, for both)
  auto v = detail::var_about(x, m, dims, correction, keepdim);
  return std::pair{v, keepdim ? m : m.reshape(v.sizes())};
}
template <TensorLike X>
auto std_dev_mean(const X& xe, Shape dims = {}, double correction = 1, bool keepdim = false) {
  auto [v, m] = var_mean(xe, std::move(dims), correction, keepdim);
  return std::pair{decltype(v)(make_expr(detail::NormRootOp{{}, 2}, v)), m};
}

template <class T, class D>
auto Tensor<T, D>::sum() const {
  return reel::sum(*this);
}
template <class T, class D>
template <class U>
auto Tensor<T, D>::mean() const {
  return reel::mean(*this);
}
template <class Op, class... A>
auto Expr<Op, A...>::sum() const {
  return reel::sum(*this);
}
template <class Op, class... A>
auto Expr<Op, A...>::mean() const {
  return reel::mean(*this);
}

// ------------------------------------------------------------------ along one dim
namespace detail {
// The running sums (Prod: products) of x along dim, in R's compute type (no autograd).
template <bool Prod, class R, class T, class Dv>
Tensor<R, Dv> scan_primal(const Tensor<T, Dv>& x, int64_t dim, const char* fn) {
  int64_t d = wrap_dim(dim, x.dim(), fn);
  if constexpr (!Backend<Dv>::has_data) {
    return empty<R, Dv>(x.sizes());
  } else {
    auto xt = x.dim() ? x.transpose(d, -1).contiguous() : x.reshape({1});
    auto out = empty<R, Dv>(xt.sizes());
    int64_t len = xt.dim() ? xt.size(-1) : 1, lines = len ? xt.numel() / len : 0;
    if constexpr (device_memory_v<Dv>) {
      Backend<Dv>::template scan_lines<Prod>(xt.data_ptr(), out.data_ptr(), lines, len);
    } else {
      kernel_step({out.impl().storage.get()}, {xt.impl().storage.get()}, [xt, out, lines, len] {
        const T* s = xt.data_ptr();
        R* o = out.mutable_data_ptr();
        parallel_range(lines, [&](int64_t b, int64_t e) {
          for (int64_t l = b; l < e; ++l) {
            compute_t<R> acc(Prod ? 1 : 0);
            for (int64_t i = 0; i < len; ++i) {
              if constexpr (Prod)
                acc *= convert<compute_t<R>>(s[l * len + i]);
              else
                acc += convert<compute_t<R>>(s[l * len + i]);
              o[l * len + i] = convert<R>(acc);
            }
          }
        }, 64);
      });
    }
    if (x.dim() == 0) return out.reshape({});
    return out.transpose(d, -1).contiguous();
  }
}
// sum_{k >= j} v_k along dim, summed from the far end (total - cumsum + v would lose the small
// tail sums to cancellation).
template <class T, class D>
Tensor<T, D> reversed_cumsum(const Tensor<T, D>& v, int64_t dim) {
  return flip(cumsum(flip(v, {dim}), dim), {dim});
}
}  // namespace detail

template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::sum_t<detail::value_t<X>>, detail::device_t<X>> cumsum(const X& xe, int64_t dim) {
  auto x0 = detail::materialize(xe);
  using T0 = detail::value_t<X>;
  if constexpr (std::is_same_v<T0, detail::sum_t<T0>>) {
    if (x0.impl().autograd) {
      using D0 = detail::device_t<X>;
      return detail::record_fn(
          cumsum(x0.detach(), dim), "CumsumBackward", {x0}, {},
          [dim](const Tensor<T0, D0>& g) { return std::vector{detail::reversed_cumsum(g, dim)}; },
          [dim](const std::vector<Tensor<T0, D0>>& t) { return cumsum(t[0], dim); });
    }
  }
  return detail::scan_primal<false, detail::sum_t<T0>>(x0, dim, "cumsum");
}
template <class X>
  requires is_expr_v<X>
auto cumsum(const X& xe, int64_t dim) {
  return cumsum(detail::materialize(xe), dim);
}

namespace detail {
// cumprod's derivatives where x may hold zeros. Both are sums over M[j][k] = prod_{i <= k, i != j} x_i
// (k >= j): grad_j = sum_k g_k M[j][k], tangent_k = sum_j t_j M[j][k].
// - For a first derivative, O(n) per line, with z the line's first zero: before z,
//   M[j][k] = y_k / x_j; at z, y' = cumprod of x with x_z set to 1 gives M[z][k] = y'_k;
//   after z every product holds x_z = 0.
// - Where the rule is differentiated again (graph recording, or a forward level active), those
//   masks are wrong (M[j][k] past z vanishes but its derivative by x_z does not), so M is
//   built whole: cumprod over k of x with x_j set to 1, O(n^2) per line (PyTorch also switches
//   to an O(n^2) rule there).
template <class T, class D>
bool cumprod_rule_differentiated(const Tensor<T, D>& x) {
  return (grad_mode_flag() && x.requires_grad()) || any_level_active();
}
template <class T, class D>
Tensor<T, D> cumprod_omitted(const Tensor<T, D>& x, int64_t dim) {  // M, with dim moved last: [..., j, k]
  auto xl = x.transpose(dim, -1);
  const int64_t n = xl.size(-1);
  auto j = arange<int64_t, D>(n).unsqueeze(1), k = arange<int64_t, D>(n).unsqueeze(0);
  Tensor<T, D> skip_j = where(eq(j, k), T(1), xl.unsqueeze(-2));
  return Tensor<T, D>(where(le(j, k), cumprod(skip_j, -1), T(0)));
}
template <class T, class D>
struct CumprodParts {
  Tensor<bool, D> before, first;  // j < z; j == z
  Tensor<T, D> x_safe, y, y_skip;  // x with 1 from z on; cumprod(x); cumprod(x with x_z = 1)
};
template <class T, class D>
CumprodParts<T, D> cumprod_parts(const Tensor<T, D>& x, int64_t dim) {
  auto zeros_seen = cumsum(cast<int64_t>(eq(x, T(0))), dim);
  Tensor<bool, D> before = eq(zeros_seen, int64_t(0));
  Tensor<bool, D> first = logical_and(eq(x, T(0)), eq(zeros_seen, int64_t(1)));
  return {before, first, Tensor<T, D>(where(before, x, T(1))), cumprod(x, dim), cumprod(Tensor<T, D>(where(first, T(1), x)), dim)};
}
template <class T, class D>
Tensor<T, D> conj_if_complex(const Tensor<T, D>& v) {
  if constexpr (is_complex_v<T>)
    return Tensor<T, D>(conj(v));
  else
    return v;
}
template <class T, class D>
Tensor<T, D> cumprod_grad(const Tensor<T, D>& x, const Tensor<T, D>& g, int64_t dim) {
  if (cumprod_rule_differentiated(x)) {
    auto m = conj_if_complex(cumprod_omitted(x, dim));
    return Tensor<T, D>(sum(Tensor<T, D>(m * g.transpose(dim, -1).unsqueeze(-2)), {-1}).transpose(dim, -1));
  }
  auto p = cumprod_parts(x, dim);
  auto at_first = reversed_cumsum(Tensor<T, D>(g * conj_if_complex(p.y_skip)), dim);
  auto before = reversed_cumsum(Tensor<T, D>(g * conj_if_complex(p.y)), dim) / conj_if_complex(p.x_safe);
  return Tensor<T, D>(where(p.before, before, where(p.first, at_first, T(0))));
}
template <class T, class D>
Tensor<T, D> cumprod_tangent(const Tensor<T, D>& x, const Tensor<T, D>& t, int64_t dim) {
  if (cumprod_rule_differentiated(x) || t.requires_grad()) {
    auto m = cumprod_omitted(x, dim);
    return Tensor<T, D>(sum(Tensor<T, D>(m * t.transpose(dim, -1).unsqueeze(-1)), {-2}).transpose(dim, -1));
  }
  auto p = cumprod_parts(x, dim);
  return Tensor<T, D>(p.y * cumsum(Tensor<T, D>(where(p.before, t / p.x_safe, T(0))), dim) +
                      p.y_skip * cumsum(Tensor<T, D>(where(p.first, t, T(0))), dim));
}
}  // namespace detail

// The running products along dim (an integer or bool input gives int64, as cumsum).
// Differentiable to any order, zeros included.
template <TensorLike X>
  requires is_tensor_v<X>
Tensor<detail::sum_t<detail::value_t<X>>, detail::device_t<X>> cumprod(const X& xe, int64_t dim) {
  auto x = detail::materialize(xe);
  using T = detail::value_t<X>;
  using D = detail::device_t<X>;
  if constexpr (std::is_same_v<T, detail::sum_t<T>> && detail::autograd_type_v<T, D>) {
    if (x.impl().autograd) {
      return detail::record_fn(
          detail::scan_primal<true, T>(x.detach(), dim, "cumprod"), "CumprodBackward", {x}, {x},
          [x, dim](const Tensor<T, D>& g) { return std::vector{detail::cumprod_grad(x, g, dim)}; },
          [x, dim](const std::vector<Tensor<T, D>>& t) { return detail::cumprod_tangent(x, t[0], dim); });
    }
  }
  return detail::scan_primal<true, detail::sum_t<T>>(x, dim, "cumprod");
}
template <class X>
  requires is_expr_v<X>
auto cumprod(const X& xe, int64_t dim) {
  return cumprod(detail::materialize(xe), dim);
}

}  // namespace reel
