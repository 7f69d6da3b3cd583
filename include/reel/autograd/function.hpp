#pragma once
// Custom differentiable functions, PyTorch's torch.autograd.Function in C++: a forward that
// computes the result without recording, a backward rule (vector-Jacobian product) and,
// optionally, a forward rule (Jacobian-vector product). Both rules are written with reel ops,
// so they are recorded in turn: a custom function differentiates to any order, in reverse,
// forward and mixed modes, like reel's own ops (which use the same node, detail::FnNode).
//
//   struct Exp : reel::autograd::Function<Exp> {
//     static constexpr const char* name = "ExpBackward";        // optional: the node's name
//     template <class T, class D>
//     static Tensor<T, D> forward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& x) {
//       Tensor<T, D> y = exp(x);
//       ctx.save_for_backward({y});                              // inputs and the output too
//       return y;
//     }
//     template <class T, class D>                                // one gradient per tensor input
//     static std::vector<Tensor<T, D>> backward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& g) {
//       return {g * ctx.saved_tensors()[0]};
//     }
//     template <class T, class D>                                // one tangent per tensor input
//     static Tensor<T, D> jvp(FunctionCtx<T, D>& ctx, const std::vector<Tensor<T, D>>& t) {
//       return t[0] * ctx.saved_tensors()[0];
//     }
//   };
//   Tensor<double> y = Exp::apply(x);                            // tensors, expressions, other values
//
// As in PyTorch: forward runs without gradient recording on the inputs' values (detached);
// the arguments of apply that are tensors or expressions are the function's inputs, any other
// argument is passed to forward as it is (use ctx.saved_data for what backward needs of them);
// saved_tensors() gives back the inputs and the output as the graph knows them, so a backward
// written in terms of them differentiates again (saving other tensors works, but they are
// constants to higher derivatives); a saved tensor modified in place before backward raises;
// undefined gradients and tangents reach the rules as zeros. Without a jvp, forward mode raises
// not_implemented_error. One output per function.
#include "../core/config.hpp"
#include <algorithm>
#include <any>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd.hpp"

namespace reel::inline REEL_ABI {
namespace autograd {

template <class Derived> struct Function;

template <class T, class D = CPU>
class FunctionCtx {
 public:
  // Tensors the rules need: inputs of forward (as received), its output, or others.
  void save_for_backward(std::vector<Tensor<T, D>> tensors) { to_save_ = std::move(tensors); }
  void save_for_backward(std::initializer_list<Tensor<T, D>> tensors) { to_save_.assign(tensors); }
  // In backward and jvp: the saved tensors, inputs and output connected to the graph.
  std::vector<Tensor<T, D>> saved_tensors() {
    std::vector<Tensor<T, D>> r;
    r.reserve(saved_.size());
    for (const auto& s : saved_) {
      if (s.input >= 0) {
        r.push_back(inputs_[static_cast<size_t>(s.input)]);
      } else if (s.output) {
        r.push_back(output_in_graph());
      } else {
        r.push_back(s.other);
      }
    }
    return r;
  }
  // Whether input k (k-th tensor argument of apply) needs a gradient.
  bool needs_input_grad(size_t k) const { return k < needs_grad_.size() && needs_grad_[k]; }
  // Anything else backward needs (libtorch's ctx->saved_data).
  std::map<std::string, std::any> saved_data;

 private:
  template <class> friend struct Function;
  struct Saved {
    int input = -1;       // index into inputs_
    bool output = false;  // the function's output
    Tensor<T, D> other;   // anything else
  };
  Tensor<T, D> output_in_graph() {
    if (jvp_output_.defined()) return jvp_output_;  // forward mode: the recorded output itself
    // backward: the output with its history (this node) and tangents, while the graph keeps it
    // (a strong reference would make the node own itself); else its values with this history
    // and, under active forward levels (forward over reverse), its tangents again from jvp
    if (auto live = output_live_.lock()) return Tensor<T, D>(std::move(live));
    Tensor<T, D> y(reel::detail::plain_alias(output_.impl()));
    if (auto node = self_.lock()) reel::detail::set_history(y.impl(), node, 0);
    if (retangent_) retangent_(*this, y);
    return y;
  }
  std::vector<Tensor<T, D>> to_save_;
  std::vector<Saved> saved_;
  std::vector<Tensor<T, D>> inputs_;
  std::vector<bool> needs_grad_;
  Tensor<T, D> output_;      // detached values of the output
  std::weak_ptr<reel::detail::TensorImpl> output_live_;
  Tensor<T, D> jvp_output_;  // set while jvp runs
  std::weak_ptr<reel::detail::Node> self_;
  void (*retangent_)(FunctionCtx&, Tensor<T, D>&) = nullptr;
};

namespace detail_function {
// A tensor argument as the function holds it (expressions evaluated); other arguments by reference.
template <class A>
decltype(auto) hold(const A& a) {
  if constexpr (is_expr_v<A>)
    return reel::detail::materialize(a);
  else
    return (a);
}
template <class... H> struct first_tensor;
template <class H, class... R> struct first_tensor<H, R...> {
  using type = std::conditional_t<is_tensor_v<H>, std::decay_t<H>, typename first_tensor<R...>::type>;
};
template <> struct first_tensor<> { using type = void; };
template <class Derived> const char* node_name() {
  if constexpr (requires { Derived::name; })
    return Derived::name;
  else
    return "CustomFunctionBackward";
}
}  // namespace detail_function

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(const Args&... args) {
    using Held = std::tuple<decltype(detail_function::hold(args))...>;
    using TT = typename detail_function::first_tensor<std::decay_t<decltype(detail_function::hold(args))>...>::type;
    static_assert(!std::is_void_v<TT>, "autograd::Function::apply: at least one argument must be a tensor");
    using T = typename TT::value_type;
    using D = typename TT::device_type;
    using Ctx = FunctionCtx<T, D>;
    Held held(detail_function::hold(args)...);
    auto ctx = std::make_shared<Ctx>();
    std::vector<Tensor<T, D>> detached;
    std::apply([&](const auto&... h) { (collect(*ctx, detached, h), ...); }, held);

    // forward, on the inputs' values only
    Tensor<T, D> out;
    {
      no_grad guard;
      constexpr auto slot = tensor_slots<std::decay_t<decltype(detail_function::hold(args))>...>();
      out = as_tensor<T, D>([&]<size_t... I>(std::index_sequence<I...>) {
        return Derived::forward(*ctx, pass<slot[I]>(detached, std::get<I>(held))...);
      }(std::index_sequence_for<Args...>{}));
    }
    REEL_CHECK(out.defined(), value_error, detail_function::node_name<Derived>(),
               ": forward returned an undefined tensor");
    for (const auto& s : ctx->to_save_) {
      typename Ctx::Saved e;
      for (size_t k = 0; k < detached.size() && e.input < 0; ++k)
        if (s.defined() && detached[k].defined() && s.impl_ptr() == detached[k].impl_ptr()) e.input = static_cast<int>(k);
      if (e.input < 0 && s.defined() && s.impl_ptr() == out.impl_ptr()) e.output = true;
      if (e.input < 0 && !e.output) e.other = s;
      ctx->saved_.push_back(std::move(e));
    }
    ctx->to_save_.clear();
    out = Tensor<T, D>(reel::detail::plain_alias(out.impl()));  // its own handle, for the history
    ctx->output_ = out.detach();
    if constexpr (reel::detail::autograd_type_v<T, D>) record(ctx, out);
    ctx->output_live_ = out.impl_ptr();
    // keep only the inputs the rules read (all of them where the output is saved: its
    // tangents may have to be made again from theirs, in forward over reverse)
    if (std::none_of(ctx->saved_.begin(), ctx->saved_.end(), [](const auto& e) { return e.output; }))
      for (size_t k = 0; k < ctx->inputs_.size(); ++k)
        if (std::none_of(ctx->saved_.begin(), ctx->saved_.end(), [k](const auto& e) { return e.input == int(k); }))
          ctx->inputs_[k] = Tensor<T, D>();
    return out;
  }

 private:
  template <class T, class D, class H>
  static void collect(FunctionCtx<T, D>& ctx, std::vector<Tensor<T, D>>& detached, const H& h) {
    if constexpr (is_tensor_v<H>) {
      static_assert(std::is_same_v<H, Tensor<T, D>>,
                    "autograd::Function::apply: the tensor arguments must have one element type and device");
      ctx.inputs_.push_back(h);
      ctx.needs_grad_.push_back(h.defined() && is_grad_enabled() && h.requires_grad());
      detached.push_back(h.defined() ? h.detach() : h);
    }
  }
  // For each argument, its index among the tensor arguments (-1: not a tensor).
  template <class... H>
  static constexpr std::array<int, sizeof...(H)> tensor_slots() {
    std::array<int, sizeof...(H)> r{};
    int n = 0;
    size_t i = 0;
    ((r[i++] = is_tensor_v<H> ? n++ : -1), ...);
    return r;
  }
  // forward's argument: a tensor's detached values, anything else as given.
  template <int Slot, class T, class D, class H>
  static const H& pass(const std::vector<Tensor<T, D>>& detached, const H& h) {
    if constexpr (Slot >= 0)
      return detached[static_cast<size_t>(Slot)];
    else
      return h;
  }
  template <class T, class D, class R>
  static Tensor<T, D> as_tensor(R&& r) {
    if constexpr (is_expr_v<R>)
      return reel::detail::materialize(r);
    else
      return Tensor<T, D>(std::forward<R>(r));
  }

  template <class T, class D>
  static void record(const std::shared_ptr<FunctionCtx<T, D>>& ctx, Tensor<T, D>& out) {
    namespace rd = reel::detail;
    const auto& inputs = ctx->inputs_;
    rd::FnPlan p;
    p.ins.reserve(inputs.size());
    for (const auto& t : inputs) p.ins.push_back(t.defined() ? &t.impl() : nullptr);
    rd::plan_fn(p);
    if (!p.any()) return;
    const char* name = detail_function::node_name<Derived>();
    if (p.reverse) {
      rd::GradList in, sv;
      for (const auto& t : inputs) in.push_back(t.defined() ? t.impl_ptr() : nullptr);
      for (const auto& s : ctx->saved_) {
        if (s.input >= 0) {
          if (inputs[static_cast<size_t>(s.input)].defined()) sv.push_back(inputs[static_cast<size_t>(s.input)].impl_ptr());
        } else if (s.output) {
          sv.push_back(ctx->output_.impl_ptr());  // the values (same version counter), not the history
        } else if (s.other.defined()) {
          sv.push_back(s.other.impl_ptr());
        }
      }
      auto bw = [ctx](const Tensor<T, D>& g) {
        Tensor<T, D> go = g.defined() ? g : zeros<T, D>(ctx->output_.sizes());
        std::vector<Tensor<T, D>> r = Derived::backward(*ctx, go);
        REEL_CHECK(r.size() == ctx->inputs_.size(), error, "function ", detail_function::node_name<Derived>(),
                   " returned an incorrect number of gradients (expected ", ctx->inputs_.size(), ", got ", r.size(),
                   ")");
        return r;
      };
      auto node = std::make_shared<rd::FnNode<T, D, decltype(bw)>>(std::move(bw));
      ctx->self_ = node;
      rd::attach_fn(node, name, p, std::move(in), std::move(sv), rd::ir::grad_type_of<T, D>(), out.impl());
    }
    forward_rule(*ctx, out, p.levels);
    ctx->retangent_ = [](FunctionCtx<T, D>& c, Tensor<T, D>& y) {
      if (!reel::detail::any_level_active()) return;
      std::vector<const reel::detail::TensorImpl*> ins;
      for (const auto& t : c.inputs_) ins.push_back(t.defined() ? &t.impl() : nullptr);
      std::vector<uint64_t> levels;
      reel::detail::collect_levels(ins.data(), ins.size(), levels);
      forward_rule(c, y, levels);
    };
  }

  // The output's tangent at each level from the inputs' (jvp), as record_fn does for reel's ops.
  template <class T, class D>
  static void forward_rule(FunctionCtx<T, D>& ctx, Tensor<T, D>& out, const std::vector<uint64_t>& levels) {
    namespace rd = reel::detail;
    auto fw = [&ctx, &out](const std::vector<Tensor<T, D>>& ts) {
      if constexpr (requires(FunctionCtx<T, D>& c, const std::vector<Tensor<T, D>>& v) { Derived::jvp(c, v); }) {
        std::vector<Tensor<T, D>> tz(ts.size());
        for (size_t k = 0; k < ts.size(); ++k)
          if (ctx.inputs_[k].defined()) tz[k] = ts[k].defined() ? ts[k] : zeros<T, D>(ctx.inputs_[k].sizes());
        ctx.jvp_output_ = out;
        struct Reset {
          FunctionCtx<T, D>& c;
          ~Reset() { c.jvp_output_ = Tensor<T, D>(); }
        } reset{ctx};
        return as_tensor<T, D>(Derived::jvp(ctx, tz));
      } else {
        (void)ts;
        raise<not_implemented_error>("autograd::Function ", detail_function::node_name<Derived>(),
                                     ": implement jvp(ctx, tangents) to use it with forward-mode AD");
        return Tensor<T, D>();
      }
    };
    std::vector<const rd::TensorImpl*> ins;
    for (const auto& t : ctx.inputs_) ins.push_back(t.defined() ? &t.impl() : nullptr);
    rd::forward_levels(rd::FwRule<T, D>(fw), ins, out, levels);
  }
};

}  // namespace autograd
}  // namespace reel::inline REEL_ABI
