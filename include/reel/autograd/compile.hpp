#pragma once
// autograd::compile(f): capture and replay of a fixed-shape function of tensors.
//
// The first call with a given signature (each argument's dtype, device and sizes, and the
// grad mode) runs f once, eagerly, while recording every kernel it launches — its own ops,
// and the forward and backward passes of any autograd::grad / hessian / jacfwd it calls —
// with the buffers they read and write (reel/core/capture.hpp). Later calls with that
// signature copy the arguments into the captured input buffers and run the recorded kernels
// on the captured buffers: no graph is recorded or walked, no plan is looked up, nothing is
// allocated but the returned tensors. This is what jax.jit's trace-and-replay and CUDA
// graphs do, without fusing kernels (each op's kernel runs as in eager mode; the option
// CompileOptions::fuse generates fused code instead: fusion.hpp). Kernels that
// depend on no argument and no tensor from outside f (eye(n), masks, arange) are folded:
// computed once at the capture, their buffers kept, skipped by replays.
//
// What f may do: take tensors (CPU), return a Tensor, a std::vector of tensors, or a
// std::pair / std::tuple of those, and compute with any reel op; gradients are taken inside
// f with autograd::grad or the functional API (hessian, jacfwd, ...). Tensors f reads that
// are not its arguments (weights it closes over) are read at each call, in place: they must
// keep their storage and shape. Numbers and host-side control flow are frozen at the
// capture, as in jax.jit: f is not re-run. What compile refuses, falling back to running f
// eagerly for that signature (warning once, reason in eager_reason()): reading values on
// the host (item, to_vector), random draws, backward() into .grad, a result that requires
// grad (the replay would drop its graph), arguments that require grad under grad mode or
// carry forward-mode tangents (compile would cut the caller's derivatives), CUDA or meta
// tensors, and ops whose kernels compile does not capture (detected: a buffer written by an
// uncaptured kernel, an in-place write outside a captured kernel, or a trial replay that
// does not reproduce the first result bit for bit).
//
// Calls are serialized (one replay at a time per compiled function). Each signature keeps
// its intermediate buffers until clear(), in one block where buffers whose lifetimes do
// not overlap share bytes (an eager run's peak, not the sum of its temporaries).
#include "../core/config.hpp"
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "autograd.hpp"
#include "fusion.hpp"

namespace reel::inline REEL_ABI::autograd {

namespace detail_compile {
using reel::detail::TensorImpl;
using ImplPtr = std::shared_ptr<TensorImpl>;

// A result's tensors in order, the lengths of its vectors, and how to compare two values
// of each tensor bit for bit.
struct Flat {
  std::vector<ImplPtr> impls;
  std::vector<size_t> lens;
  std::vector<bool (*)(const ImplPtr&, const ImplPtr&)> same, close;
};

// The results f may return: Tensor, std::vector of tensors, std::pair / std::tuple of those.
template <class R> struct Result {
  static_assert(sizeof(R) == 0, "reel::autograd::compile: the compiled function must return a Tensor, a std::vector "
                                "of tensors, or a std::pair / std::tuple of those");
};
template <class T, class D> struct Result<Tensor<T, D>> {
  static void flatten(const Tensor<T, D>& r, Flat& f) {
    REEL_CHECK(r.defined(), value_error, "autograd::compile: the function returned an undefined tensor");
    f.impls.push_back(r.impl_ptr());
    f.same.push_back([](const ImplPtr& a, const ImplPtr& b) {
      auto x = Tensor<T, D>(a).contiguous(), y = Tensor<T, D>(b).contiguous();
      return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * sizeof(T)) == 0;
    });
    // the same within rounding (floating point: sums taken in another order)
    f.close.push_back([](const ImplPtr& a, const ImplPtr& b) {
      auto x = Tensor<T, D>(a).contiguous(), y = Tensor<T, D>(b).contiguous();
      const T* p = x.data_ptr();
      const T* q = y.data_ptr();
      if constexpr (std::is_floating_point_v<T>) {
        double scale = 0, err = 0;
        for (int64_t i = 0; i < x.numel(); ++i) {
          if (std::isnan(p[i]) != std::isnan(q[i]) || (std::isinf(q[i]) && p[i] != q[i])) return false;
          if (std::isfinite(q[i])) {
            scale = std::max(scale, std::abs(static_cast<double>(q[i])));
            err = std::max(err, std::abs(static_cast<double>(p[i]) - static_cast<double>(q[i])));
          }
        }
        return err <= (std::is_same_v<T, float> ? 1e-4 : 1e-11) * std::max(scale, 1e-30);
      } else {
        return std::memcmp(p, q, static_cast<size_t>(x.numel()) * sizeof(T)) == 0;
      }
    });
  }
  // Fresh tensors holding the values of the flattened impls from `pos` on.
  static Tensor<T, D> rebuild(const Flat& f, size_t& pos, size_t&) { return Tensor<T, D>(f.impls[pos++]).clone(); }
  static constexpr bool device_ok = detail::Backend<D>::host_memory;
};
template <class T, class D> struct Result<std::vector<Tensor<T, D>>> {
  static void flatten(const std::vector<Tensor<T, D>>& r, Flat& f) {
    f.lens.push_back(r.size());
    for (const auto& t : r) Result<Tensor<T, D>>::flatten(t, f);
  }
  static std::vector<Tensor<T, D>> rebuild(const Flat& f, size_t& pos, size_t& li) {
    std::vector<Tensor<T, D>> r;
    for (size_t n = f.lens[li++], i = 0; i < n; ++i) r.push_back(Result<Tensor<T, D>>::rebuild(f, pos, li));
    return r;
  }
  static constexpr bool device_ok = detail::Backend<D>::host_memory;
};
template <class... X> struct Result<std::tuple<X...>> {
  static void flatten(const std::tuple<X...>& r, Flat& f) {
    std::apply([&](const auto&... x) { (Result<std::decay_t<decltype(x)>>::flatten(x, f), ...); }, r);
  }
  static std::tuple<X...> rebuild(const Flat& f, size_t& pos, size_t& li) {
    return std::tuple<X...>{Result<X>::rebuild(f, pos, li)...};  // braced: left to right
  }
  static constexpr bool device_ok = (Result<X>::device_ok && ...);
};
template <class X, class Y> struct Result<std::pair<X, Y>> {
  static void flatten(const std::pair<X, Y>& r, Flat& f) {
    Result<X>::flatten(r.first, f);
    Result<Y>::flatten(r.second, f);
  }
  static std::pair<X, Y> rebuild(const Flat& f, size_t& pos, size_t& li) {
    return std::pair<X, Y>{Result<X>::rebuild(f, pos, li), Result<Y>::rebuild(f, pos, li)};
  }
  static constexpr bool device_ok = Result<X>::device_ok && Result<Y>::device_ok;
};
template <class R> R rebuild(const Flat& f) {
  size_t pos = 0, li = 0;
  return Result<R>::rebuild(f, pos, li);
}

template <class A> inline constexpr bool cpu_tensor_v = false;
template <class T> inline constexpr bool cpu_tensor_v<Tensor<T, CPU>> = true;

// One signature's capture: the input buffers, the recorded kernels and the result's
// buffers (or, when compile refused, why).
struct Entry {
  std::vector<ScalarType> dtypes;
  std::vector<Shape> sizes;
  bool grad_mode = false;
  std::vector<ImplPtr> inputs;
  Flat outputs;
  std::vector<reel::detail::CaptureStep> steps;
  std::string eager_reason;  // non-empty: run f eagerly
  size_t shared_bytes = 0;   // the block the temporaries share
  int fused = 0;             // loop nests run by generated code (fuse)
  std::string fusion_reason;
  std::shared_ptr<reel::detail::fusion::JitLibrary> lib;
};
}  // namespace detail_compile

// compile's options. fuse: generate code for the captured program (fusion.hpp): elementwise
// kernels and sums / means of them are fused where a buffer between two of them has no other
// use, and compiled by the system's C++ compiler into one function per run of such kernels
// (once per program and signature: the library is cached on disk). Results then equal the
// eager run's within rounding (sums are taken in another order), not bit for bit. Where code
// cannot be generated (no compiler, REEL_JIT_CXX=none, no kernel it can describe), the
// capture replays its kernels as without the option (fusion_reason() says why).
struct CompileOptions {
  bool fuse = false;
};

// A compiled function (see the top of this file). Copies share the cache.
template <class F>
class Compiled {
 public:
  explicit Compiled(F f, CompileOptions o = {}) : state_(std::make_shared<State>(std::move(f), o)) {}

  template <class... A>
  auto operator()(const A&... args) {
    static_assert((TensorLike<A> && ...), "reel::autograd::compile: the compiled function's arguments must be tensors");
    if constexpr ((is_tensor_v<A> && ...))
      return call<std::decay_t<std::invoke_result_t<F&, const A&...>>>(args...);
    else
      return (*this)(reel::detail::materialize(args)...);  // expressions are evaluated first
  }

  // Steps a replay of the most recent signature runs (0 when it runs eagerly): its kernels,
  // or with fusion its generated functions and the kernels between them.
  size_t kernels() const {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    return state_->last ? state_->last->steps.size() : 0;
  }
  // Why the most recent signature runs eagerly ("" when it replays).
  std::string eager_reason() const {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    return state_->last ? state_->last->eager_reason : std::string();
  }
  // Bytes of the block the most recent signature's intermediate buffers share (0 if none).
  size_t buffer_bytes() const {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    return state_->last ? state_->last->shared_bytes : 0;
  }
  // Loop nests the most recent signature runs as generated code (0: none; see CompileOptions),
  // and why it runs none when fusion was asked for.
  int fused_kernels() const {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    return state_->last ? state_->last->fused : 0;
  }
  std::string fusion_reason() const {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    return state_->last ? state_->last->fusion_reason : std::string();
  }
  // Captures made, replays run.
  int64_t captures() const { return state_->captures; }
  int64_t replays() const { return state_->replays; }
  // Drops every capture (and the buffers they hold).
  void clear() {
    std::lock_guard<std::recursive_mutex> lock(state_->mu);
    state_->entries.clear();
    state_->last = nullptr;
  }

 private:
  struct State {
    State(F fn, CompileOptions o) : f(std::move(fn)), opts(o) {}
    F f;
    CompileOptions opts;
    std::recursive_mutex mu;
    std::vector<std::unique_ptr<detail_compile::Entry>> entries;
    detail_compile::Entry* last = nullptr;
    std::atomic<int64_t> captures{0}, replays{0};
  };

  template <class R, class... A>
  R call(const A&... args) {
    using namespace detail_compile;
    State& s = *state_;
    // What compile cannot keep: the caller differentiating through the arguments, a capture
    // already recording (an outer compiled function captures our kernels), other devices.
    const bool grad_on = reel::detail::grad_mode_flag();
    if (reel::detail::capture_slot() || !reel::detail::level_state().live.empty() ||
        (grad_on && (args.requires_grad() || ...)) || !(cpu_tensor_v<A> && ...) || !Result<R>::device_ok)
      return s.f(args...);
    std::lock_guard<std::recursive_mutex> lock(s.mu);
    Entry* e = find(grad_on, args...);
    if (!e) return capture<R>(grad_on, args...);
    s.last = e;
    if (!e->eager_reason.empty()) return s.f(args...);
    size_t i = 0;
    (copy_in(e->inputs[i++], args), ...);
    for (auto& step : e->steps) step();
    ++s.replays;
    return rebuild<R>(e->outputs);
  }

  template <class... A>
  detail_compile::Entry* find(bool grad_on, const A&... args) {
    for (auto& e : state_->entries) {
      if (e->grad_mode != grad_on || e->sizes.size() != sizeof...(A)) continue;
      size_t i = 0;
      bool ok = ((e->dtypes[i] == args.dtype() && e->sizes[i++] == args.sizes()) && ...);
      if (ok) return e.get();
    }
    return nullptr;
  }

  template <class T, class D>
  static void copy_in(const detail_compile::ImplPtr& slot, const Tensor<T, D>& x) {
    Tensor<T, D> dst(slot);
    if (x.is_contiguous())
      std::memcpy(dst.mutable_data_ptr(), x.data_ptr(), static_cast<size_t>(x.numel()) * sizeof(T));
    else
      reel::detail::eval_into(dst, x.detach());
  }

  template <class R, class... A>
  R capture(bool grad_on, const A&... args) {
    using namespace detail_compile;
    State& s = *state_;
    auto e = std::make_unique<Entry>();
    e->grad_mode = grad_on;
    (e->dtypes.push_back(args.dtype()), ...);
    (e->sizes.push_back(args.sizes()), ...);
    // the arguments f sees: contiguous buffers owned by the capture, refilled at each call
    std::tuple<A...> slots{args.detach().clone()...};
    std::apply([&](const auto&... x) { (e->inputs.push_back(x.impl_ptr()), ...); }, slots);
    reel::detail::install_capture_ir();
    reel::detail::CaptureTrace trace;
    trace.want_descs(s.opts.fuse);
    std::optional<R> r;
    {
      struct Recording {
        reel::detail::CaptureTrace* prev;
        explicit Recording(reel::detail::CaptureTrace* t) : prev(reel::detail::capture_slot()) {
          reel::detail::capture_slot() = t;
        }
        ~Recording() { reel::detail::capture_slot() = prev; }
      } recording(&trace);
      r.emplace(std::apply([&](const auto&... x) { return s.f(x...); }, slots));
    }
    ++s.captures;
    Flat outs;
    Result<R>::flatten(*r, outs);
    for (const auto& o : outs.impls)
      if (reel::detail::impl_requires_grad(*o)) {
        refuse(std::move(e), "the result requires grad (a replay would drop its graph)");
        return std::move(*r);
      }
    for (auto& o : outs.impls) o = reel::detail::plain_alias(*o);  // the buffers, without autograd state
    r.reset();  // frees what only the result's graph held
    R result = rebuild<R>(outs);  // this (eager) run's values
    if (std::string why = trace.check(); !why.empty()) {
      refuse(std::move(e), why);
      return result;
    }
    std::vector<const reel::detail::Storage*> keep = trace.fold_constants();
    for (const auto& o : outs.impls) keep.push_back(o->storage.get());
    reel::detail::fusion::Fused fz;
    if (s.opts.fuse) {
      reel::detail::fusion::Program prog{trace.descs(), trace.step_reads(), trace.step_writes(), trace.folded(), {},
                                         trace.fresh_storages()};
      for (const auto& o : outs.impls) prog.pinned.push_back(o->storage.get());
      for (const auto& in : e->inputs) prog.pinned.push_back(in->storage.get());
      fz = reel::detail::fusion::fuse(prog);
      for (auto [step, st] : fz.moved_reads) trace.extend_use(step, st);  // (before buffers share bytes)
    }
    e->shared_bytes = trace.share_buffers(keep);
    Flat first;
    Result<R>::flatten(result, first);
    // A trial replay on the same inputs must give the same bits: a kernel compile did not
    // capture (a write through a raw pointer) would show here. It runs the folded kernels
    // too, so a raw write into a folded buffer shows as well.
    std::vector<reel::detail::CaptureStep> steps = trace.take_steps();
    for (auto& step : steps) step();
    for (size_t i = 0; i < outs.impls.size(); ++i)
      if (!outs.same[i](outs.impls[i], first.impls[i])) {
        refuse(std::move(e), "a replay did not reproduce the first result (an op wrote memory outside the kernels "
                             "compile captures)");
        return result;
      }
    if (s.opts.fuse) generate(*e, fz, steps, outs, first);
    const std::vector<char>& folded = trace.folded();
    if (!e->fused)
      for (size_t i = 0; i < steps.size(); ++i)
        if (!folded[i]) e->steps.push_back(std::move(steps[i]));
    e->outputs = std::move(outs);
    s.last = e.get();
    s.entries.push_back(std::move(e));
    return result;
  }

  // The fused replay (fusion.hpp): generated functions in place of the kernels they fuse,
  // kept only when it reproduces the first result within rounding.
  static void generate(detail_compile::Entry& e, reel::detail::fusion::Fused& fz,
                       std::vector<reel::detail::CaptureStep>& steps, const detail_compile::Flat& outs,
                       const detail_compile::Flat& first) {
    using reel::detail::CaptureStep;
    if (fz.functions == 0) {
      e.fusion_reason = "no kernel of this function is one compile generates code for";
      return;
    }
    std::string err;
    auto lib = reel::detail::fusion::jit_compile(fz.source, fz.functions, err);
    if (!lib) {
      e.fusion_reason = err;
      warn("autograd::compile: no generated code for this signature: " + err);
      return;
    }
    std::vector<CaptureStep> run;
    for (auto& part : fz.parts) {
      if (part.step >= 0) {
        run.push_back(std::move(steps[part.step]));
        continue;
      }
      std::vector<void*> ptr(part.buffers.size());
      run.emplace_back([lib, fn = lib->fns[part.function], bufs = std::move(part.buffers),
                        ptr = std::move(ptr)]() mutable {
        for (size_t i = 0; i < bufs.size(); ++i) ptr[i] = bufs[i]->storage->data;
        fn(ptr.data());
      });
    }
    for (auto& step : run) step();
    bool ok = true;
    for (size_t i = 0; i < outs.impls.size(); ++i) ok = ok && outs.close[i](outs.impls[i], first.impls[i]);
    if (!ok) {  // the kept kernels go back where they were
      for (size_t k = 0; k < fz.parts.size(); ++k)
        if (fz.parts[k].step >= 0) steps[fz.parts[k].step] = std::move(run[k]);
      e.fusion_reason = "the generated code's results differ from the eager run's beyond rounding";
      warn("autograd::compile: no generated code for this signature: " + e.fusion_reason);
      return;
    }
    e.steps = std::move(run);
    e.fused = fz.kept;
    e.lib = std::move(lib);
  }

  void refuse(std::unique_ptr<detail_compile::Entry> e, const std::string& why) {
    e->steps.clear();
    e->inputs.clear();
    e->eager_reason = why;
    state_->last = e.get();
    state_->entries.push_back(std::move(e));
    warn("autograd::compile: running the function eagerly for this signature: " + why);
  }

  std::shared_ptr<State> state_;
};

// Captures f at its first call per signature and replays its kernels afterwards (see the
// top of this file).
template <class F>
Compiled<std::decay_t<F>> compile(F&& f, CompileOptions opts = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(f), opts);
}

}  // namespace reel::autograd
