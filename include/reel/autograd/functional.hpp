#pragma once
// torch.autograd.functional: vjp, jvp, jacobian, hessian, hvp, vhp for functions
// f(const std::vector<Tensor>&) -> Tensor (single-tensor overloads too), and torch.func's
// jacfwd / jacrev. Forward-mode work runs in vector mode (forward_ad::dual_level(k)): jvp
// takes batched tangents, jacfwd pushes all directions through one pass, and hessian / hvp
// are forward-over-reverse with every direction in that one pass (chunked when the tangents
// would grow too large).
#include "../core/config.hpp"
#include <optional>

#include "autograd.hpp"

namespace reel::inline REEL_ABI::autograd::functional {

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

// Vector mode: the number of directions when every tangent has one leading dim more than
// its input (0: ordinary tangents).
template <class T, class D>
int64_t tangent_batch(const Tensors<T, D>& inputs, const Tensors<T, D>& v, const char* fn) {
  REEL_CHECK(v.size() == inputs.size(), value_error, fn, ": expected ", inputs.size(), " tangents, got ", v.size());
  if (v.empty() || v[0].dim() != inputs[0].dim() + 1) {
    for (size_t i = 0; i < v.size(); ++i)
      REEL_CHECK(v[i].sizes() == inputs[i].sizes(), value_error, fn, ": tangent ", i, " has shape ", v[i].sizes(),
                 " but input ", i, " has shape ", inputs[i].sizes());
    return 0;
  }
  const int64_t k = v[0].size(0);
  for (size_t i = 0; i < v.size(); ++i) {
    Shape want = inputs[i].sizes();
    want.insert(0, k);
    REEL_CHECK(v[i].sizes() == want, value_error, fn, ": batched tangent ", i, " must have shape ", want,
               " (directions first), got ", v[i].sizes());
  }
  return k;
}
// Directions [first, first + k) of the identity over all inputs' elements, split per input:
// tangent i has shape [k, *inputs[i].sizes()].
template <class T, class D>
Tensors<T, D> unit_directions(const Tensors<T, D>& inputs, int64_t first, int64_t k) {
  int64_t n = 0;
  for (const auto& x : inputs) n += x.numel();
  Tensor<bool, D> hot = eq(arange<int64_t, D>(first, first + k).unsqueeze(1), arange<int64_t, D>(n).unsqueeze(0));
  Tensor<T, D> rows = hot.template to<T>();
  Tensors<T, D> v;
  int64_t off = 0;
  for (const auto& x : inputs) {
    Shape s = x.sizes();
    s.insert(0, k);
    v.push_back(rows.narrow(1, off, x.numel()).contiguous().view(s));
    off += x.numel();
  }
  return v;
}
// Directions per pass: `requested`, or (0) as many as keep the largest tangent of the first
// one-direction pass, times the directions, under 2^24 elements.
inline constexpr int64_t kTangentBudget = int64_t(1) << 24;
inline int64_t chunk_for(int64_t requested, int64_t total, int64_t peak_one) {
  if (requested > 0) return std::min(requested, total);
  return std::clamp<int64_t>(kTangentBudget / std::max<int64_t>(peak_one, 1), 1, std::max<int64_t>(total, 1));
}
// Runs pass(first, k) over directions [0, total) in chunks, the first chunk one direction wide
// when the size is automatic (it measures the tangents' size). Returns the per-chunk results.
template <class R, class Pass>
std::vector<R> run_chunks(int64_t total, int64_t chunk_size, Pass&& pass) {
  std::vector<R> out;
  int64_t first = 0, k = chunk_size > 0 ? std::min(chunk_size, total) : std::min<int64_t>(1, total);
  while (first < total) {
    reel::detail::tangent_peak() = 0;
    out.push_back(pass(first, k));
    first += k;
    if (chunk_size <= 0 && out.size() == 1) k = chunk_for(0, total, reel::detail::tangent_peak());
    k = std::min(k, total - first);
  }
  return out;
}
// Moves the directions dim to the end: [n, *out] per input block -> out.sizes() + in.sizes().
template <class T, class D>
Tensors<T, D> directions_last(const Tensor<T, D>& all, const Tensors<T, D>& inputs, const Shape& out_sizes) {
  Tensors<T, D> res;
  int64_t off = 0, m = reel::detail::numel_of(out_sizes);
  for (const auto& x : inputs) {
    Shape s = out_sizes;
    for (auto d : x.sizes()) s.push_back(d);
    res.push_back(all.narrow(0, off, x.numel()).reshape({x.numel(), m}).t().contiguous().reshape(s));
    off += x.numel();
  }
  return res;
}

// Structured vector mode (graph.hpp: StructTangent): with one input, sizes automatic and no
// other level live, every direction goes in one pass whose tangents keep the identity
// seed's pattern.
inline bool structure_applies(size_t n_inputs, int64_t total, int64_t chunk_size) {
  return chunk_size <= 0 && n_inputs == 1 && total > 0 && reel::detail::level_state().live.empty();
}
// x with the identity over its elements as its structured tangent at `level`.
template <class T, class D>
Tensor<T, D> identity_dual(const Tensor<T, D>& x, uint64_t level) {
  namespace rd = reel::detail;
  Tensor<T, D> d = forward_ad::detail_fw::own_view(x);
  const Shape& s = x.sizes();
  rd::TanTerm term;
  for (int64_t i = 0; i < s.size(); ++i) term.dim_of.push_back(s[i] > 1 ? static_cast<int>(i) : -1);
  term.coef = ones<T, D>(Shape(static_cast<size_t>(rd::free_count(term)) + s.size(), 1)).impl_ptr();
  rd::install_struct_ops();
  rd::set_tangent(d.impl(), level, nullptr,
                  std::make_shared<const rd::StructTangent>(rd::StructTangent{s, s, rd::ir::grad_type_of<T, D>(), {term}}));
  return d;
}
// pass() under the dense chunks' budget: nothing (and a capture in progress forgets the
// pass's kernels) when a tangent would grow past it. A caller's smaller budget stays.
template <class R, class Pass>
std::optional<R> structured_pass(Pass&& pass) {
  namespace rd = reel::detail;
  rd::CaptureTrace* trace = rd::capturing();
  const size_t mark = trace ? trace->mark() : 0;
  struct Budget {
    int64_t saved = rd::struct_budget();
    Budget() { rd::struct_budget() = saved > 0 ? std::min(saved, kTangentBudget) : kTangentBudget; }
    ~Budget() { rd::struct_budget() = saved; }
  } budget;
  try {
    return pass();
  } catch (const rd::StructBudgetExceeded&) {
    if (trace) trace->rollback(mark);
  }
  return std::nullopt;
}
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

// {f(inputs), J v} by forward mode. Batched tangents (each [k, *input sizes]) give k
// directions in one pass and a [k, *output sizes] result (vector mode).
template <class T, class D, class F>
std::pair<Tensor<T, D>, Tensor<T, D>> jvp(F&& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v, bool create_graph = false,
                                          bool strict = false) {
  const int64_t batch = detail_fn::tangent_batch(inputs, v, "jvp");
  forward_ad::dual_level level(batch);
  reel::detail::TangentsAsValues plain(level.id(), !create_graph);
  Tensors<T, D> x;
  for (size_t i = 0; i < inputs.size(); ++i)
    x.push_back(forward_ad::make_dual(create_graph ? inputs[i] : inputs[i].detach(), create_graph ? v[i] : v[i].detach()));
  Tensor<T, D> out = detail_fn::call<T, D>(f, x);
  auto [p, t] = forward_ad::unpack_dual(out);
  if (!t.defined()) {
    if (strict) raise<error>("jvp: the output of the user-provided function is independent of its inputs; not allowed in strict mode");
    Shape s = out.sizes();
    if (batch) s.insert(0, batch);
    t = zeros<T, D>(s);
  }
  if (!create_graph) return {p.detach(), t.detach()};
  return {p, t};
}

// torch.func.jacfwd: d f / d inputs[i], shaped out.sizes() + inputs[i].sizes(), by forward
// mode with all directions (every input element) in one vector-mode pass; chunk_size > 0
// caps the directions per pass (0: automatic, from the size of a one-direction pass).
template <class T, class D, class F>
Tensors<T, D> jacfwd(F&& f, const Tensors<T, D>& inputs, int64_t chunk_size = 0) {
  int64_t total = 0;
  for (const auto& x : inputs) total += x.numel();
  Shape out_sizes;
  if (detail_fn::structure_applies(inputs.size(), total, chunk_size))
    if (auto t = detail_fn::structured_pass<Tensor<T, D>>([&] {
          forward_ad::dual_level level(total);
          reel::detail::TangentsAsValues plain(level.id(), true);
          Tensor<T, D> out = detail_fn::call<T, D>(f, Tensors<T, D>{detail_fn::identity_dual(inputs[0].detach(), level.id())});
          out_sizes = out.sizes();
          Tensor<T, D> tan = forward_ad::unpack_dual(out).tangent;
          if (!tan.defined()) {
            Shape z = out_sizes;
            z.insert(0, total);
            return zeros<T, D>(z);
          }
          return tan.detach();
        }))
      return detail_fn::directions_last(*t, inputs, out_sizes);
  auto parts = detail_fn::run_chunks<Tensor<T, D>>(total, chunk_size, [&](int64_t first, int64_t k) {
    auto [out, t] = jvp(f, inputs, detail_fn::unit_directions(inputs, first, k));
    out_sizes = out.sizes();
    return t;
  });
  if (parts.empty()) {  // no input elements
    no_grad ng;
    out_sizes = detail_fn::call<T, D>(f, inputs).sizes();
    Tensors<T, D> res;
    for (const auto& x : inputs) {
      Shape s = out_sizes;
      for (auto d : x.sizes()) s.push_back(d);
      res.push_back(zeros<T, D>(s));
    }
    return res;
  }
  return detail_fn::directions_last(parts.size() == 1 ? parts[0] : cat(parts, 0), inputs, out_sizes);
}
template <class T, class D, class F>
Tensor<T, D> jacfwd(F&& f, const Tensor<T, D>& input, int64_t chunk_size = 0) {
  return jacfwd(std::forward<F>(f), Tensors<T, D>{input}, chunk_size)[0];
}

enum class JacobianStrategy { ReverseMode, ForwardMode };

// d f / d inputs[i] for each input, shaped out.sizes() + inputs[i].sizes(). Reverse mode
// takes one backward per output element, forward mode one jvp per input element.
template <class T, class D, class F>
Tensors<T, D> jacobian(F&& f, const Tensors<T, D>& inputs, bool create_graph = false, bool strict = false,
                       JacobianStrategy strategy = JacobianStrategy::ReverseMode) {
  Tensors<T, D> jac;
  if (strategy == JacobianStrategy::ForwardMode && !create_graph && !strict) return jacfwd(f, inputs);
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

namespace detail_fn {
// Forward over reverse: the gradient of f at inputs, with tangents v (batched or not) pushed
// through f and its backward pass. Returns {f, tangent of each gradient} (zeros where the
// gradient does not depend on the input; an error then in strict mode).
// identity: v is the identity over the one input's elements, seeded as a structured tangent
// (graph.hpp: StructTangent), so the pass costs what the structure needs, not one pass per
// direction; v is then not read.
template <class T, class D, class F>
std::pair<Tensor<T, D>, Tensors<T, D>> grad_tangents(F& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v,
                                                     bool create_graph, bool strict, const char* fn,
                                                     bool identity = false) {
  const int64_t batch = identity ? inputs[0].numel() : tangent_batch(inputs, v, fn);
  enable_grad eg;
  forward_ad::dual_level level(batch);
  reel::detail::TangentsAsValues plain(level.id(), !create_graph);
  auto p = prepare(inputs, create_graph);
  Tensors<T, D> x;
  if (identity) {
    x.push_back(identity_dual(p[0], level.id()));
  } else {
    for (size_t i = 0; i < p.size(); ++i) x.push_back(forward_ad::make_dual(p[i], create_graph ? v[i] : v[i].detach()));
  }
  Tensor<T, D> out = call<T, D>(f, x);
  REEL_CHECK(out.numel() == 1, value_error, fn, ": the function must return a single element, got shape ", out.sizes());
  Tensors<T, D> g(x.size());
  if (out.requires_grad()) g = grad({out}, x, {}, {create_graph, create_graph, true});
  Tensors<T, D> t(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (g[i].defined()) t[i] = forward_ad::unpack_dual(g[i]).tangent;
    if (!t[i].defined()) {
      if (strict) independent(i, fn);
      Shape z = inputs[i].sizes();
      z.insert(0, batch);
      t[i] = zeros<T, D>(z);
    } else if (!create_graph) {
      t[i] = t[i].detach();
    }
  }
  return {create_graph ? forward_ad::unpack_dual(out).primal : out.detach(), t};
}
}  // namespace detail_fn

// Second derivatives of a scalar function: h[i][j] = d^2 f / d inputs[i] d inputs[j], shaped
// inputs[i].sizes() + inputs[j].sizes(). Forward over reverse (torch.func.hessian's jacfwd of
// jacrev): one reverse pass whose every op also carries all the directions (vector mode).
// chunk_size > 0 caps the directions per pass (0: automatic).
template <class T, class D, class F>
std::vector<Tensors<T, D>> hessian(F&& f, const Tensors<T, D>& inputs, bool create_graph = false, bool strict = false,
                                   int64_t chunk_size = 0) {
  int64_t total = 0;
  for (const auto& x : inputs) total += x.numel();
  std::vector<Tensors<T, D>> parts;
  // structured tangents where they apply; else (or past the budget) chunks of dense directions
  if (!create_graph && detail_fn::structure_applies(inputs.size(), total, chunk_size))
    if (auto t = detail_fn::structured_pass<Tensors<T, D>>(
            [&] { return detail_fn::grad_tangents(f, inputs, {}, false, strict, "hessian", true).second; }))
      parts.push_back(std::move(*t));
  if (parts.empty())
    parts = detail_fn::run_chunks<Tensors<T, D>>(total, chunk_size, [&](int64_t first, int64_t k) {
      return detail_fn::grad_tangents(f, inputs, detail_fn::unit_directions(inputs, first, k), create_graph, strict,
                                      "hessian").second;
    });
  std::vector<Tensors<T, D>> h(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor<T, D> rows;  // [total, *inputs[i].sizes()]: row b = d grad_i / d direction b
    if (parts.empty()) {
      Shape s = inputs[i].sizes();
      s.insert(0, 0);
      rows = zeros<T, D>(s);
    } else if (parts.size() == 1) {
      rows = parts[0][i];
    } else {
      Tensors<T, D> r;
      for (auto& p : parts) r.push_back(p[i]);
      rows = cat(r, 0);
    }
    h[i] = detail_fn::directions_last(rows, inputs, inputs[i].sizes());
  }
  return h;
}
template <class T, class D, class F>
Tensor<T, D> hessian(F&& f, const Tensor<T, D>& input, bool create_graph = false, bool strict = false,
                     int64_t chunk_size = 0) {
  return hessian(std::forward<F>(f), Tensors<T, D>{input}, create_graph, strict, chunk_size)[0][0];
}

// torch.func.jacrev: the Jacobian by reverse mode (one backward pass per output element).
template <class T, class D, class F>
Tensors<T, D> jacrev(F&& f, const Tensors<T, D>& inputs) {
  return jacobian(std::forward<F>(f), inputs, false, false, JacobianStrategy::ReverseMode);
}
template <class T, class D, class F>
Tensor<T, D> jacrev(F&& f, const Tensor<T, D>& input) {
  return jacobian(std::forward<F>(f), Tensors<T, D>{input}, false, false, JacobianStrategy::ReverseMode)[0];
}

// {f(inputs), H v}, by forward over reverse (the gradient's jvp; PyTorch's reverse over
// reverse gives the same values for the symmetric Hessians of smooth functions). Batched v
// (each [k, *input sizes]) gives k products in one pass, shaped [k, *input sizes].
template <class T, class D, class F>
OutputAndGrads<T, D> hvp(F&& f, const Tensors<T, D>& inputs, const Tensors<T, D>& v, bool create_graph = false,
                         bool strict = false) {
  auto [out, hv] = detail_fn::grad_tangents(f, inputs, v, create_graph, strict, "hvp");
  return {out, hv};
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
