#pragma once
// Checking derivatives against central finite differences (in double precision):
//   gradcheck / gradgradcheck: torch.autograd.gradcheck semantics (full Jacobians);
//   check_ad(f, inputs): the one-call test of an op (DESIGN §4): first-order reverse,
//     reverse-over-reverse, forward, and forward-over-reverse, all against differences.
// Complex inputs follow PyTorch's convention: for a real loss L, the gradient with respect to
// z = a + ib is dL/da + i dL/db, and a gradient g of a complex output y stands for the loss
// L = Re(conj(g) y). Finite differences perturb a and b separately.
#include "../core/config.hpp"
#include <functional>
#include <sstream>

#include "autograd.hpp"

namespace reel::inline REEL_ABI::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_exception = true;
};

namespace detail_check {
template <class T, class D>
using Tensors = std::vector<Tensor<T, D>>;

template <class T> constexpr bool complex_v = is_complex_v<T>;

template <class T, class D>
Tensor<T, D> flat_copy(const Tensor<T, D>& x) {
  no_grad ng;
  return x.detach().clone().reshape({-1});
}
using detail_api::call;
// Directional derivative of f at xs along unit `dir` (1 or i) at element j of input i, by
// central differences; the result has f's shape.
template <class T, class D>
Tensor<T, D> numeric_direction(const auto& f, const Tensors<T, D>& xs, size_t i, int64_t j, T dir, double eps) {
  no_grad ng;
  auto shifted = [&](double s) {
    Tensors<T, D> y;
    for (auto& x : xs) y.push_back(x.detach().clone());
    y[i].reshape({-1}).mutable_data_ptr()[j] += dir * static_cast<real_t<T>>(s);
    return Tensor<T, D>(call<T, D>(f, y).detach());
  };
  auto p = shifted(eps), m = shifted(-eps);
  return Tensor<T, D>((p - m) / (2 * eps));
}
template <class T>
double abs_diff(T a, T b) {
  return std::abs(a - b);
}
inline void report(std::ostringstream& msg, bool& ok, bool raise_exc) {
  if (ok) return;
  if (raise_exc) raise<error>(msg.str());
}
// Re(sum(conj(g) * y))
template <class T, class D>
double real_inner(const Tensor<T, D>& g, const Tensor<T, D>& y) {
  auto a = flat_copy(g).to_vector(), b = flat_copy(y).to_vector();
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += std::real(std::conj(a[k]) * b[k]);
  return s;
}
template <class T, class D>
Tensor<T, D> random_like(const Tensor<T, D>& x, Generator& gen) {
  return randn<T, D>(x.sizes(), gen);
}
}  // namespace detail_check

// Compares the analytical Jacobian (one backward per output element and component) with
// central differences. Inputs that require grad are checked (all of them when none does).
namespace detail_check {
template <class T, class D>
using Fn = std::function<Tensor<T, D>(const std::vector<Tensor<T, D>>&)>;
template <class T, class D, class F>
Fn<T, D> erase(F& f) {
  return [&f](const std::vector<Tensor<T, D>>& x) { return call<T, D>(f, x); };
}
}  // namespace detail_check

// The checks take f through std::function, so each check is compiled once per dtype.
template <class T, class D>
bool gradcheck_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o);
template <class T, class D, class F>
bool gradcheck(F&& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o = {}) {
  return gradcheck_impl<T, D>(detail_check::erase<T, D>(f), std::move(inputs), o);
}
template <class T, class D, class F>
bool gradcheck(F&& f, std::initializer_list<Tensor<T, D>> inputs, GradcheckOptions o = {}) {
  return gradcheck_impl<T, D>(detail_check::erase<T, D>(f), std::vector<Tensor<T, D>>(inputs), o);
}
template <class T, class D>
bool gradcheck_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o) {
  using namespace detail_check;
  if constexpr (!std::is_same_v<real_t<T>, double>)
    reel::warn("gradcheck: inputs are not double precision; the check is likely to fail from rounding alone");
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) checked.push_back(i);
  if (checked.empty())
    for (size_t i = 0; i < inputs.size(); ++i) checked.push_back(i);
  Tensors<T, D> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor<T, D> x = inputs[i].detach();
    if (std::find(checked.begin(), checked.end(), i) != checked.end()) x.requires_grad_(true);
    xs.push_back(x);
  }
  Tensor<T, D> out = call<T, D>(f, xs);
  const int64_t n_out = out.numel();
  std::vector<T> dirs{T(1)};
  if constexpr (complex_v<T>) dirs.push_back(T(0, 1));
  std::ostringstream msg;
  // the analytical Jacobian's rows: one backward per output element k and output component
  // oc gives d L / d x_i for every checked input i at once, with L = Re(conj(dir_oc) out_k);
  // rows[c][k * dirs + oc] belongs to input checked[c]
  Tensors<T, D> wrt;
  for (size_t i : checked) wrt.push_back(xs[i]);
  std::vector<std::vector<std::vector<T>>> rows(checked.size());
  for (int64_t k = 0; k < n_out; ++k) {
    for (size_t oc = 0; oc < dirs.size(); ++oc) {
      Tensors<T, D> gs;
      if (out.requires_grad()) {
        auto g = reel::detail::make_tensor<T, D>(out.sizes());
        {
          no_grad ng;
          g.fill_(T(0));
          g.reshape({-1}).mutable_data_ptr()[k] = dirs[oc];
        }
        gs = grad({out}, wrt, {g}, {true, false, true});
      }
      for (size_t c = 0; c < checked.size(); ++c) {
        const bool has = c < gs.size() && gs[c].defined();
        rows[c].push_back(has ? flat_copy(gs[c]).to_vector() : std::vector<T>(size_t(wrt[c].numel()), T(0)));
      }
    }
  }
  bool ok = true;
  for (size_t ci = 0; ci < checked.size() && ok; ++ci) {
    const size_t i = checked[ci];
    for (int64_t j = 0; j < xs[i].numel() && ok; ++j) {
      for (size_t c = 0; c < dirs.size(); ++c) {
        auto num = flat_copy(numeric_direction(f, xs, i, j, dirs[c], o.eps)).to_vector();
        for (int64_t k = 0; k < n_out && ok; ++k) {
          for (size_t oc = 0; oc < dirs.size(); ++oc) {
            const T a = rows[ci][size_t(k) * dirs.size() + oc][size_t(j)];
            double analytic = c == 0 ? std::real(a) : std::imag(std::complex<double>(a));
            double numeric = std::real(std::conj(dirs[oc]) * num[k]);
            if (std::abs(analytic - numeric) > o.atol + o.rtol * std::abs(numeric)) {
              ok = false;
              msg << "gradcheck: Jacobian mismatch for output " << k << " with respect to input " << i << ", element "
                  << j << (c ? " (imaginary part)" : "") << ": numerical " << numeric << ", analytical " << analytic;
            }
          }
        }
      }
    }
  }
  report(msg, ok, o.raise_exception);
  return ok;
}

// Checks second derivatives: gradcheck of (inputs, v) -> the vjp of f with v, whose
// gradient is computed by differentiating the backward pass.
template <class T, class D>
bool gradgradcheck_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o);
template <class T, class D, class F>
bool gradgradcheck(F&& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o = {}) {
  return gradgradcheck_impl<T, D>(detail_check::erase<T, D>(f), std::move(inputs), o);
}
template <class T, class D, class F>
bool gradgradcheck(F&& f, std::initializer_list<Tensor<T, D>> inputs, GradcheckOptions o = {}) {
  return gradgradcheck_impl<T, D>(detail_check::erase<T, D>(f), std::vector<Tensor<T, D>>(inputs), o);
}
template <class T, class D>
bool gradgradcheck_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, GradcheckOptions o) {
  using namespace detail_check;
  Generator gen(20261130);
  Tensor<T, D> out;
  {
    no_grad ng;
    out = call<T, D>(f, inputs);
  }
  Tensor<T, D> v = random_like(out, gen);
  const size_t n = inputs.size();
  Fn<T, D> g = [&](const Tensors<T, D>& xv) {
    enable_grad eg;  // also when called for finite differences (under no_grad)
    Tensors<T, D> x;
    for (size_t i = 0; i < n; ++i) x.push_back(xv[i].requires_grad() ? xv[i] : Tensor<T, D>(xv[i].detach().requires_grad_(true)));
    Tensor<T, D> y = call<T, D>(f, x);
    auto gs = grad({y}, x, {xv[n]}, {true, true, true});
    Tensors<T, D> parts;
    for (size_t i = 0; i < n; ++i)
      parts.push_back(gs[i].defined() ? gs[i].reshape({-1}) : Tensor<T, D>(x[i].reshape({-1}) * 0));
    return cat(parts, 0);
  };
  Tensors<T, D> xv;
  for (auto& x : inputs) xv.push_back(x.detach().requires_grad_(true));
  xv.push_back(v.requires_grad_(true));
  return gradcheck_impl<T, D>(g, xv, o);
}

struct CheckAdOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
  uint64_t seed = 1234;
  bool second_order = true;
  // also forward-over-forward (jvp of jvp) and reverse-over-forward (the gradient of a jvp,
  // as jacobian-of-jacobian computes it)
  bool forward_second_order = false;
};

// The standard test of an op: reverse, reverse-over-reverse, forward and forward-over-
// reverse derivatives of f at `inputs`, each compared with central differences (with
// forward_second_order, also forward-over-forward and reverse-over-forward). Reverse
// mode is projected on random output directions; forward mode is checked along every input
// element (and i times it for complex inputs), one direction at a time and then all of them
// in one vector-mode pass (dual_level(k)). Throws reel::error naming the failing mode.
template <class T, class D>
void check_ad_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, CheckAdOptions o);
template <class T, class D, class F>
void check_ad(F&& f, std::vector<Tensor<T, D>> inputs, CheckAdOptions o = {}) {
  check_ad_impl<T, D>(detail_check::erase<T, D>(f), std::move(inputs), o);
}
template <class T, class D, class F>
void check_ad(F&& f, std::initializer_list<Tensor<T, D>> inputs, CheckAdOptions o = {}) {
  check_ad_impl<T, D>(detail_check::erase<T, D>(f), std::vector<Tensor<T, D>>(inputs), o);
}
template <class T, class D>
void check_ad_impl(const detail_check::Fn<T, D>& f, std::vector<Tensor<T, D>> inputs, CheckAdOptions o) {
  using namespace detail_check;
  static_assert(std::is_same_v<real_t<T>, double>, "reel::autograd::check_ad: use double or complex<double> inputs");
  Generator gen(o.seed);
  std::vector<T> dirs{T(1)};
  if constexpr (complex_v<T>) dirs.push_back(T(0, 1));
  auto close = [&](double a, double b) { return std::abs(a - b) <= o.atol + o.rtol * std::abs(b); };
  auto fail = [&](const std::string& mode, size_t i, int64_t j, size_t c, double num, double an) {
    std::ostringstream m;
    m << "check_ad: " << mode << " mismatch with respect to input " << i << ", element " << j
      << (c ? " (imaginary direction)" : "") << ": finite differences " << num << ", autograd " << an;
    raise<error>(m.str());
  };
  // every element (real and imaginary parts) of an autograd tangent against differences
  auto compare_all = [&](const Tensor<T, D>& tan, const Tensor<T, D>& num, const std::string& mode, size_t i, int64_t j,
                         size_t c) {
    auto nv = flat_copy(num).to_vector();
    std::vector<T> tv = tan.defined() ? flat_copy(tan).to_vector() : std::vector<T>(nv.size(), T(0));
    for (size_t q = 0; q < nv.size(); ++q)
      for (int part = 0; part < (complex_v<T> ? 2 : 1); ++part) {
        double a = part ? std::imag(std::complex<double>(tv[q])) : std::real(tv[q]);
        double b = part ? std::imag(std::complex<double>(nv[q])) : std::real(nv[q]);
        if (!close(a, b)) fail(mode + std::to_string(q) + ")", i, j, c, b, a);
      }
  };

  // h(x) = the gradient of Re<g, f(x)> with respect to every input, as one flat tensor.
  Tensor<T, D> out0;
  {
    no_grad ng;
    out0 = call<T, D>(f, inputs);
  }
  Tensor<T, D> g = random_like(out0, gen);
  auto h = [&](const Tensors<T, D>& x, bool create) {
    Tensors<T, D> xs;
    for (auto& t : x) xs.push_back(t.requires_grad() ? t : Tensor<T, D>(t.detach().requires_grad_(true)));
    enable_grad eg;
    Tensor<T, D> y = call<T, D>(f, xs);
    Tensors<T, D> gs(xs.size());
    if (y.requires_grad()) gs = grad({y}, xs, {g}, {create, create, true});
    Tensors<T, D> parts;
    for (size_t i = 0; i < xs.size(); ++i)
      parts.push_back(gs[i].defined() ? gs[i].reshape({-1}) : Tensor<T, D>(zeros<T, D>({xs[i].numel()})));
    return cat(parts, 0);
  };
  Fn<T, D> h_plain = [&](const Tensors<T, D>& x) { return h(x, false).detach(); };

  // Duals of the inputs at the current level with tangent dir at element j of input i.
  auto basis_duals = [&](size_t i, int64_t j, T dir, bool requires_grad) {
    Tensors<T, D> xs;
    for (size_t q = 0; q < inputs.size(); ++q) {
      auto t = zeros<T, D>(inputs[q].sizes());
      if (q == i) t.reshape({-1}).mutable_data_ptr()[j] = dir;
      Tensor<T, D> p = inputs[q].detach();
      if (requires_grad) p.requires_grad_(true);
      xs.push_back(forward_ad::make_dual(p, t));
    }
    return xs;
  };
  // The derivatives of a first-order derivative r (recorded(x) computes it with a history;
  // plain(x) without): reverse mode projected on a random direction, and forward mode
  // along every input element, against central differences of plain.
  auto sweep = [&](const Fn<T, D>& plain, auto&& recorded, const std::string& rev_mode, const std::string& fwd_mode,
                   bool duals_require_grad) {
    enable_grad eg;
    Tensor<T, D> u = random_like(plain(inputs), gen);
    Tensors<T, D> xr;
    for (auto& x : inputs) xr.push_back(x.detach().requires_grad_(true));
    Tensor<T, D> r = recorded(xr);
    Tensors<T, D> rr(xr.size());
    if (r.requires_grad()) rr = grad({r}, xr, {u}, {false, false, true});
    struct Direction {
      size_t i;
      int64_t j;
      size_t c;
      Tensor<T, D> num;
    };
    std::vector<Direction> all;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto rv = rr[i].defined() ? flat_copy(rr[i]).to_vector() : std::vector<T>(inputs[i].numel(), T(0));
      for (int64_t j = 0; j < inputs[i].numel(); ++j)
        for (size_t c = 0; c < dirs.size(); ++c) {
          Tensor<T, D> num = numeric_direction(plain, inputs, i, j, dirs[c], o.eps);
          double rev = c == 0 ? std::real(rv[j]) : std::imag(std::complex<double>(rv[j]));
          double expect = real_inner(u, num);
          if (!close(rev, expect)) fail(rev_mode, i, j, c, expect, rev);
          forward_ad::dual_level level;
          Tensor<T, D> tan = forward_ad::unpack_dual(recorded(basis_duals(i, j, dirs[c], duals_require_grad))).tangent;
          compare_all(tan, num, fwd_mode, i, j, c);
          all.push_back({i, j, c, num});
        }
    }
    // vector mode: every direction above in one pass (dual_level(k), tangents [k, *sizes])
    const int64_t k = static_cast<int64_t>(all.size());
    if (k == 0) return;
    forward_ad::dual_level level(k);
    Tensors<T, D> xs;
    for (size_t q = 0; q < inputs.size(); ++q) {
      Shape s = inputs[q].sizes();
      s.insert(0, k);
      auto t = zeros<T, D>(s);
      T* tp = t.mutable_data_ptr();
      for (int64_t b = 0; b < k; ++b)
        if (all[b].i == q) tp[b * inputs[q].numel() + all[b].j] = dirs[all[b].c];
      Tensor<T, D> p = inputs[q].detach();
      if (duals_require_grad) p.requires_grad_(true);
      xs.push_back(forward_ad::make_dual(p, t));
    }
    Tensor<T, D> tan = forward_ad::unpack_dual(recorded(xs)).tangent;
    for (int64_t b = 0; b < k; ++b)
      compare_all(tan.defined() ? tan.select(0, b) : Tensor<T, D>(), all[b].num, "vector-mode " + fwd_mode, all[b].i,
                  all[b].j, all[b].c);
  };

  // first order: reverse mode (the gradient of Re<u, f>) and forward mode
  sweep(f, [&](const Tensors<T, D>& x) { return call<T, D>(f, x); }, "reverse mode", "forward mode (output element ",
        false);
  if (!o.second_order) return;

  // second order: derivatives of h (reverse over reverse; forward over reverse: the tangent
  // of the gradient)
  sweep(h_plain, [&](const Tensors<T, D>& x) { return h(x, true); }, "reverse-over-reverse",
        "forward-over-reverse (gradient element ", true);
  if (!o.forward_second_order) return;

  // derivatives of k(x) = the jvp of f at x along fixed random directions w (reverse over
  // forward: the gradient of Re<u, k(x)>; forward over forward: the tangent of k)
  Tensors<T, D> w;
  for (auto& x : inputs) w.push_back(random_like(x, gen));
  auto k = [&](const Tensors<T, D>& x) {
    forward_ad::dual_level level;
    Tensors<T, D> xs;
    for (size_t q = 0; q < x.size(); ++q) xs.push_back(forward_ad::make_dual(x[q], w[q]));
    Tensor<T, D> t = forward_ad::unpack_dual(call<T, D>(f, xs)).tangent;
    return t.defined() ? t : Tensor<T, D>(zeros<T, D>(out0.sizes()));
  };
  Fn<T, D> k_plain = [&](const Tensors<T, D>& x) { return k(x).detach(); };
  sweep(k_plain, k, "reverse-over-forward", "forward-over-forward (jvp element ", false);
}

}  // namespace reel::autograd
