#pragma once
// torch.autograd.functional: vjp, jvp, jacobian, hessian, hvp, vhp for functions
// f(const std::vector<Tensor>&) -> Tensor (single-tensor overloads too).
#include "autograd.hpp"

namespace reel::autograd::functional {

template <class T, class D>
using Tensors = std::vector<Tensor<T, D>>;

template <class T, class D>
struct OutputAndGrads {
  Tensor<T, D> output;
  Tensors<T, D> grads;
};

namespace detail_fn {
// Inputs as f should see them: differentiable, and attached to the caller's graph only when
// a graph is to be created.
template <class T, class D>
Tensors<T, D> prepare(const Tensors<T, D>& in, bool create_graph) {
  Tensors<T, D> out;
  for (const auto& x : in) {
    if (create_graph && x.requires_grad()) {
      out.push_back(x.view(x.sizes()));
    } else {
      Tensor<T, D> d = x.detach();
      d.requires_grad_(true);
      out.push_back(d);
    }
  }
  return out;
}
inline void independent(size_t i, const char* fn) {
  raise<error>(fn, ": the output of the user-provided function is independent of input ", i,
               ". This is not allowed in strict mode.");
}
template <class T, class D>
Tensors<T, D> finish(Tensors<T, D> grads, const Tensors<T, D>& inputs, bool create_graph, bool strict, const char* fn) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) {
      if (strict) independent(i, fn);
      grads[i] = zeros_like(inputs[i]);
    } else if (!create_graph) {
      grads[i] = grads[i].detach();
    }
  }
  return grads;
}
using detail_api::call;
}  // namespace detail_fn

// {f(inputs), v^T J}; v may be omitted when f returns one element.
template <class T, class D, class F>
OutputAndGrads<T, D> vjp(F&& f, const Tensors<T, D>& inputs, const Tensor<T, D>& v = {}, bool create_graph = false,
                         bool strict = false) {
  enable_grad eg;
  auto x = detail_fn::prepare(inputs, create_graph);
  Tensor<T, D> out = detail_fn::call<T, D>(f, x);
  if (v.defined())
    REEL_CHECK(v.sizes() == out.sizes(), value_error, "vjp: v has shape ", v.sizes(), " but the output has shape ", out.sizes());
  else
    REEL_CHECK(out.numel() == 1, value_error, "vjp: v can be omitted only when the function returns a single element, ",
               "but the output has shape ", out.sizes());
  Tensors<T, D> grads(x.size());
  if (out.requires_grad())
    grads = grad({out}, x, v.defined() ? Tensors<T, D>{v} : Tensors<T, D>{}, {create_graph, create_graph, true});
  return {create_graph ? out : out.detach(), detail_fn::finish(std::move(grads), inputs, create_graph, strict, "vjp")};
}

// {f(inputs), J v} by forward mode.
template <class T, class D, class F>
std::pair<Tensor<T, D>, Tensor<T, D>> jvp(F&& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v, bool create_graph = false,
                                          bool strict = false) {
  REEL_CHECK(v.size() == inputs.size(), value_error, "jvp: expected ", inputs.size(), " tangents, got ", v.size());
  forward_ad::dual_level level;
  Tensors<T, D> x;
  for (size_t i = 0; i < inputs.size(); ++i) {
    REEL_CHECK(v[i].sizes() == inputs[i].sizes(), value_error, "jvp: tangent ", i, " has shape ", v[i].sizes(),
               " but input ", i, " has shape ", inputs[i].sizes());
    x.push_back(forward_ad::make_dual(create_graph ? inputs[i] : inputs[i].detach(), create_graph ? v[i] : v[i].detach()));
  }
  Tensor<T, D> out = detail_fn::call<T, D>(f, x);
  auto [p, t] = forward_ad::unpack_dual(out);
  if (!t.defined()) {
    if (strict) raise<error>("jvp: the output of the user-provided function is independent of its inputs; not allowed in strict mode");
    t = zeros_like(out);
  }
  if (!create_graph) return {p.detach(), t.detach()};
  return {p, t};
}

enum class JacobianStrategy { ReverseMode, ForwardMode };

// d f / d inputs[i] for each input, shaped out.sizes() + inputs[i].sizes(). Reverse mode
// takes one backward per output element, forward mode one jvp per input element.
template <class T, class D, class F>
Tensors<T, D> jacobian(F&& f, const Tensors<T, D>& inputs, bool create_graph = false, bool strict = false,
                       JacobianStrategy strategy = JacobianStrategy::ReverseMode) {
  Tensors<T, D> jac;
  if (strategy == JacobianStrategy::ForwardMode) {
    Tensor<T, D> out0;
    {
      no_grad ng;
      out0 = detail_fn::call<T, D>(f, inputs);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensors<T, D> cols;
      for (int64_t j = 0; j < inputs[i].numel(); ++j) {
        Tensors<T, D> v;
        for (size_t k = 0; k < inputs.size(); ++k) v.push_back(zeros_like(inputs[k]));
        v[i].reshape({-1}).mutable_data_ptr()[j] = T(1);
        cols.push_back(jvp(f, inputs, v, create_graph, strict).second.reshape({-1}));
      }
      Shape s = out0.sizes();
      for (auto d : inputs[i].sizes()) s.push_back(d);
      jac.push_back(cols.empty() ? zeros<T, D>(s)
                                 : stack(cols, 1).reshape(s));
    }
    return jac;
  }
  enable_grad eg;
  auto x = detail_fn::prepare(inputs, create_graph);
  Tensor<T, D> out = detail_fn::call<T, D>(f, x);
  auto flat = out.reshape({-1});
  std::vector<Tensors<T, D>> rows(inputs.size());
  for (int64_t k = 0; k < flat.numel(); ++k) {
    Tensors<T, D> g(x.size());
    if (out.requires_grad()) g = grad({flat[k]}, x, {}, {true, create_graph, true});
    for (size_t i = 0; i < x.size(); ++i) {
      if (!g[i].defined()) {
        if (strict) detail_fn::independent(i, "jacobian");
        g[i] = zeros_like(inputs[i]);
      }
      rows[i].push_back(create_graph ? g[i] : g[i].detach());
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape s = out.sizes();
    for (auto d : inputs[i].sizes()) s.push_back(d);
    jac.push_back(rows[i].empty() ? zeros<T, D>(s) : stack(rows[i], 0).reshape(s));
  }
  return jac;
}
template <class T, class D, class F>
Tensor<T, D> jacobian(F&& f, const Tensor<T, D>& input, bool create_graph = false, bool strict = false,
                      JacobianStrategy strategy = JacobianStrategy::ReverseMode) {
  return jacobian(std::forward<F>(f), Tensors<T, D>{input}, create_graph, strict, strategy)[0];
}

// Second derivatives of a scalar function: h[i][j] = d^2 f / d inputs[i] d inputs[j].
template <class T, class D, class F>
std::vector<Tensors<T, D>> hessian(F&& f, const Tensors<T, D>& inputs, bool create_graph = false, bool strict = false) {
  std::vector<Tensors<T, D>> h(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto gi = [&](const Tensors<T, D>& x) {
      Tensor<T, D> out = detail_fn::call<T, D>(f, x);
      REEL_CHECK(out.numel() == 1, value_error, "hessian: the function must return a single element, got shape ", out.sizes());
      auto g = grad({out}, x, {}, {true, true, true})[i];
      if (!g.defined()) {
        if (strict) detail_fn::independent(i, "hessian");
        return zeros_like(x[i]);
      }
      return g;
    };
    h[i] = jacobian(gi, inputs, create_graph, strict);
  }
  return h;
}
template <class T, class D, class F>
Tensor<T, D> hessian(F&& f, const Tensor<T, D>& input, bool create_graph = false, bool strict = false) {
  return hessian(std::forward<F>(f), Tensors<T, D>{input}, create_graph, strict)[0][0];
}

// {f(inputs), H v}: the gradient's vjp (reverse over reverse, as PyTorch computes it).
template <class T, class D, class F>
OutputAndGrads<T, D> hvp(F&& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v, bool create_graph = false,
                         bool strict = false) {
  REEL_CHECK(v.size() == inputs.size(), value_error, "hvp: expected ", inputs.size(), " vectors, got ", v.size());
  enable_grad eg;
  auto x = detail_fn::prepare(inputs, create_graph);
  Tensor<T, D> out = detail_fn::call<T, D>(f, x);
  REEL_CHECK(out.numel() == 1, value_error, "hvp: the function must return a single element, got shape ", out.sizes());
  Tensors<T, D> g(x.size());
  if (out.requires_grad()) g = grad({out}, x, {}, {true, true, true});
  Tensors<T, D> gs, xs, vs;
  for (size_t i = 0; i < x.size(); ++i) {
    REEL_CHECK(v[i].sizes() == inputs[i].sizes(), value_error, "hvp: v[", i, "] has shape ", v[i].sizes(), " but input ",
               i, " has shape ", inputs[i].sizes());
    if (g[i].defined() && g[i].requires_grad()) {
      gs.push_back(g[i]);
      vs.push_back(v[i]);
    }
  }
  Tensors<T, D> hv(x.size());
  if (!gs.empty()) {
    auto r = grad(gs, x, vs, {create_graph, create_graph, true});
    hv = r;
  }
  return {create_graph ? out : out.detach(), detail_fn::finish(std::move(hv), inputs, create_graph, strict, "hvp")};
}
// {f(inputs), v^T H} (equal to hvp for the symmetric Hessians of smooth functions).
template <class T, class D, class F>
OutputAndGrads<T, D> vhp(F&& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v, bool create_graph = false,
                         bool strict = false) {
  return hvp(std::forward<F>(f), inputs, v, create_graph, strict);
}

// Braced lists of inputs (so T and D deduce): {x, y}.
template <class T, class D> using List = std::initializer_list<Tensor<T, D>>;
template <class T, class D, class F>
OutputAndGrads<T, D> vjp(F&& f, List<T, D> inputs, const Tensor<T, D>& v = {}, bool create_graph = false, bool strict = false) {
  return vjp(std::forward<F>(f), Tensors<T, D>(inputs), v, create_graph, strict);
}
template <class T, class D, class F>
std::pair<Tensor<T, D>, Tensor<T, D>> jvp(F&& f, List<T, D> inputs, List<T, D> v, bool create_graph = false,
                                          bool strict = false) {
  return jvp(std::forward<F>(f), Tensors<T, D>(inputs), Tensors<T, D>(v), create_graph, strict);
}
template <class T, class D, class F>
Tensors<T, D> jacobian(F&& f, List<T, D> inputs, bool create_graph = false, bool strict = false,
                       JacobianStrategy strategy = JacobianStrategy::ReverseMode) {
  return jacobian(std::forward<F>(f), Tensors<T, D>(inputs), create_graph, strict, strategy);
}
template <class T, class D, class F>
std::vector<Tensors<T, D>> hessian(F&& f, List<T, D> inputs, bool create_graph = false, bool strict = false) {
  return hessian(std::forward<F>(f), Tensors<T, D>(inputs), create_graph, strict);
}
template <class T, class D, class F>
OutputAndGrads<T, D> hvp(F&& f, List<T, D> inputs, List<T, D> v, bool create_graph = false, bool strict = false) {
  return hvp(std::forward<F>(f), Tensors<T, D>(inputs), Tensors<T, D>(v), create_graph, strict);
}
template <class T, class D, class F>
OutputAndGrads<T, D> vhp(F&& f, List<T, D> inputs, List<T, D> v, bool create_graph = false, bool strict = false) {
  return hvp(std::forward<F>(f), Tensors<T, D>(inputs), Tensors<T, D>(v), create_graph, strict);
}

}  // namespace reel::autograd::functional
