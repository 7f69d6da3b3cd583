#pragma once
// linear_cross_entropy(hidden [..., D], weight [V, D], target): cross_entropy(hidden Wᵀ + b,
// target) without ever holding the [N, V] logits.
//
// Tokens are processed in chunks. Per chunk: one GEMM into a [chunk, V] buffer (float, or
// double for double inputs), one pass per row (max, logsumexp, target term, loss, and the
// gradient of the loss with respect to the logits written over them), then
// dX_chunk = G W and dW += Gᵀ X_chunk (and db += column sums of G). Extra memory is
// O(chunk V + V D).
//
// Every variant of the loss has the same row form, with q the row's target mass:
//   loss_n = a_n lse(z_n) - q_n · z_n,   a_n = sum(q_n),   dloss_n/dz_n = a_n softmax(z_n) - q_n,
// where q_n = (1 - e) onehot(y_n) + e / V for class indices (0 for an ignored row) and
// q_n = (1 - e) t_n + e / V for probabilities.
//
// mean / sum: when gradients are wanted the forward computes them (scaled by 1 / count or 1)
// and backward scales them by the incoming scalar. none: the forward keeps only each row's
// logsumexp; backward recomputes each chunk's logits and folds grad_output[n] into row n.
// Higher-order derivatives (create_graph, forward mode) use the dense formula with reel ops,
// which does hold [N, V]: the fused kernel is for first-order training.
#include "../core/config.hpp"
#include "loss.hpp"

namespace reel::inline REEL_ABI::nn::functional {

template <class T = AnyElement, class D = CPU>  // (AnyElement: see loss.hpp)
struct LinearCrossEntropyOptions {
  option_tensor_t<T, D> bias{};  // [V], optional
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0;
  int64_t chunk_size = 0;  // rows per chunk; 0: automatic (a buffer of about 32 MiB)
};

namespace detail_lce {
using reel::detail::gemm_ex;
using reel::detail::parallel_range;

// The problem in the accumulation type A (float for float / half / bfloat16, double for double).
template <class A>
struct Problem {
  int64_t N = 0, D = 0, V = 0, chunk = 1;
  const A* X = nullptr;       // [N, D]
  const A* W = nullptr;       // [V, D]
  const A* b = nullptr;       // [V] or null
  const int64_t* y = nullptr;  // [N] class indices, or null
  const A* t = nullptr;       // [N, V] probabilities, or null
  int64_t ignore_index = -100;
  double eps = 0;
  bool kept(int64_t n) const { return !y || y[n] != ignore_index; }
};
// What a pass produces (each optional).
template <class A>
struct Outputs {
  A* loss = nullptr;        // [N] per-row loss
  A* lse = nullptr;         // [N] per-row logsumexp (saved for reduction none)
  A* dX = nullptr;          // [N, D]
  A* dW = nullptr;          // [V, D], accumulated into (zeroed by the caller)
  A* db = nullptr;          // [V], accumulated into (zeroed by the caller)
  const A* scale = nullptr;  // [N] gradient factor per row (backward of none), or
  A uniform_scale = 0;       //   one factor for all rows (mean / sum)
  bool grads() const { return dX || dW || db; }
};

// One row: z (the logits) becomes the scaled gradient when grads are wanted.
template <class A>
void row_pass(const Problem<A>& P, int64_t n, A* z, Outputs<A>& o, const A* known_lse) {
  using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
  const int64_t V = P.V;
  Eigen::Map<Arr> zr(z, V);
  if (P.b) zr += Eigen::Map<const Arr>(P.b, V);
  const bool kept = P.kept(n);
  A lse;
  if (known_lse) {
    lse = known_lse[n];
  } else {
    A m = zr.maxCoeff();
    lse = std::isinf(m) ? m : m + std::log((zr - m).exp().sum());
  }
  if (o.lse) o.lse[n] = lse;
  const A e = static_cast<A>(P.eps), keep = A(1) - e, spread = e / static_cast<A>(V);
  A a = 0;
  if (o.loss) {
    double l = 0;
    if (P.y) {
      if (kept) {
        int64_t yi = P.y[n];
        l = static_cast<double>(lse) - keep * static_cast<double>(z[yi]);
        if (e != 0) l -= static_cast<double>(spread) * static_cast<double>(zr.template cast<double>().sum());
      }
    } else {
      Eigen::Map<const Arr> tr(P.t + n * V, V);
      a = keep * tr.sum() + e;
      l = static_cast<double>(a) * static_cast<double>(lse) -
          ((keep * tr + spread).template cast<double>() * zr.template cast<double>()).sum();
    }
    o.loss[n] = static_cast<A>(l);
  }
  if (!o.grads()) return;
  A s = o.scale ? o.scale[n] : o.uniform_scale;
  if (P.y) {
    if (!kept || s == A(0)) {
      zr.setZero();
      return;
    }
    zr = (zr - lse).exp() * s;
    if (e != 0) zr -= spread * s;
    z[P.y[n]] -= keep * s;
  } else {
    Eigen::Map<const Arr> tr(P.t + n * V, V);
    if (!o.loss) a = keep * tr.sum() + e;
    zr = ((zr - lse).exp() * a - (keep * tr + spread)) * s;
  }
}

// Forward (and, if o asks, gradients) over all chunks.
template <class A>
void run(const Problem<A>& P, Outputs<A>& o, const A* known_lse = nullptr) {
  if (P.N == 0) return;
  const int64_t V = P.V, D = P.D;
  auto buf = empty<A, CPU>({std::min(P.chunk, P.N) * V});  // (counted by memory_allocated)
  for (int64_t r0 = 0; r0 < P.N; r0 += P.chunk) {
    const int64_t c = std::min(P.chunk, P.N - r0);
    A* Z = buf.data_ptr();
    gemm_ex<A, false, true>(c, V, D, P.X + r0 * D, D, P.W, D, Z, V, false);  // Z = X_c Wᵀ
    auto rows = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) row_pass(P, r0 + i, Z + i * V, o, known_lse);
    };
    parallel_range(c, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(V, 1)));
    if (o.dX) gemm_ex<A, false, false>(c, D, V, Z, V, P.W, D, o.dX + r0 * D, D, false);  // dX_c = G W
    if (o.dW) gemm_ex<A, true, false>(V, D, c, Z, V, P.X + r0 * D, D, o.dW, D, true);    // dW += Gᵀ X_c
    if (o.db) {
      Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>> db(o.db, V);
      for (int64_t i = 0; i < c; ++i) db += Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>(Z + i * V, V);
    }
  }
}

// The gradients a pass computes, allocated for the inputs that want them (dW and db are
// accumulated into, so they start at zero), with `o` pointing at them.
template <class A, class D>
struct Grads {
  Tensor<A, D> dX, dW, db;
};
template <class A, class D>
Grads<A, D> alloc_grads(Outputs<A>& o, bool gx, bool gw, bool gb, int64_t N, int64_t Dm, int64_t V) {
  Grads<A, D> r;
  if (gx) o.dX = (r.dX = empty<A, D>({N, Dm})).data_ptr();
  if (gw) o.dW = (r.dW = zeros<A, D>({V, Dm})).data_ptr();
  if (gb) o.db = (r.db = zeros<A, D>({V})).data_ptr();
  return r;
}

// dloss/dlogits with reel ops (differentiable again): the dense path for higher orders.
// Returns G [N, V] for the unreduced per-row losses.
template <class T, class D>
Tensor<T, D> dense_grad(const Tensor<T, D>& Z, const Tensor<T, D>& q, const Tensor<T, D>& a) {
  return Tensor<T, D>(a * softmax(Z, 1) - q);
}
}  // namespace detail_lce

template <class T, class D, class D2>
LinearCrossEntropyOptions<T, D> typed_options(const LinearCrossEntropyOptions<AnyElement, D2>& o) {
  return {detail_opt::typed<T, D>(o.bias, "LinearCrossEntropyOptions::bias"), o.ignore_index, o.reduction,
          o.label_smoothing, o.chunk_size};
}
template <class T, class D, class U>
Tensor<T, D> linear_cross_entropy(const Tensor<T, D>& hidden, const Tensor<T, D>& weight, const Tensor<U, D>& target,
                                  const LinearCrossEntropyOptions<T, D>& o = {}) {
  static_assert(is_floating_v<T> && !is_fp8_v<T>, "reel::linear_cross_entropy: needs floating point hidden states");
  static_assert(std::is_integral_v<U> || std::is_same_v<U, T>,
                "reel::linear_cross_entropy: the target holds class indices (an integer tensor) or probabilities "
                "(a tensor of the hidden states' dtype)");
  static_assert(!std::is_same_v<U, bool>, "reel::linear_cross_entropy: class-index targets must be integers, not bool");
  constexpr bool hard = std::is_integral_v<U>;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const char* fn = "linear_cross_entropy";
  REEL_CHECK(hidden.dim() >= 1, value_error, fn, ": hidden must have at least one dimension [..., D], got a scalar");
  REEL_CHECK(weight.dim() == 2, value_error, fn, ": weight must be [V, D], got shape ", weight.sizes());
  const int64_t Dm = hidden.size(-1), V = weight.size(0);
  REEL_CHECK(weight.size(1) == Dm, value_error, fn, ": hidden has ", Dm, " features but weight has shape ",
             weight.sizes(), " (expected [V, ", Dm, "])");
  REEL_CHECK(!o.bias.defined() || (o.bias.dim() == 1 && o.bias.size(0) == V), value_error, fn, ": bias must have shape [",
             V, "], got ", o.bias.defined() ? o.bias.sizes() : Shape{});
  REEL_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, value_error, fn,
             ": label_smoothing must be between 0.0 and 1.0, got ", o.label_smoothing);
  REEL_CHECK(o.chunk_size >= 0, value_error, fn, ": chunk_size must be >= 0 (0: automatic), got ", o.chunk_size);
  Shape lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
  const int64_t N = reel::detail::numel_of(lead);
  Shape want = lead;
  if constexpr (!hard) want.push_back(V);
  REEL_CHECK(target.sizes() == want, value_error, fn, ": expected target of shape ", want, " for hidden of shape ",
             hidden.sizes(), " and ", V, " classes, got ", target.sizes());
  REEL_CHECK(V >= 1, value_error, fn, ": weight has no rows (V = 0)");
  if constexpr (!hard)
    REEL_CHECK(!(reel::detail::grad_mode_flag() && target.requires_grad()), not_implemented_error, fn,
               ": no gradient with respect to probability targets; detach the target (or use cross_entropy(linear(...)))");

  Tensor<T, D> out = o.reduction == Reduction::None ? empty<T, D>(lead) : empty<T, D>({});
  if constexpr (!reel::detail::Backend<D>::has_data) {
    return out;
  } else if constexpr (reel::detail::device_memory_v<D>) {
    return reel::detail::Backend<D>::linear_cross_entropy(std::move(out), hidden, weight, target, o);
  } else {
    // Inputs in the accumulation type, contiguous (no copies for contiguous float / double).
    auto X = hidden.detach().reshape({N, Dm}).template to<A>().contiguous();
    auto W = weight.detach().template to<A>().contiguous();
    Tensor<A, D> b = o.bias.defined() ? o.bias.detach().template to<A>().contiguous() : Tensor<A, D>();
    Tensor<int64_t, D> y;
    Tensor<A, D> t;
    double count = static_cast<double>(N);  // mean's denominator
    if constexpr (hard) {
      y = target.reshape({N}).template to<int64_t>().contiguous();
      count = 0;
      const int64_t* yp = y.data_ptr();
      for (int64_t n = 0; n < N; ++n) {
        if (yp[n] == o.ignore_index) continue;
        REEL_CHECK(yp[n] >= 0 && yp[n] < V, index_error, fn, ": Target ", yp[n], " is out of bounds (", V, " classes)");
        ++count;
      }
    } else {
      t = target.detach().reshape({N, V}).template to<A>().contiguous();
    }
    detail_lce::Problem<A> P;
    P.N = N;
    P.D = Dm;
    P.V = V;
    P.chunk = o.chunk_size > 0 ? o.chunk_size : std::max<int64_t>(16, (int64_t(1) << 23) / V);
    P.chunk = std::max<int64_t>(1, std::min(P.chunk, N));
    P.X = X.data_ptr();
    P.W = W.data_ptr();
    P.b = b.defined() ? b.data_ptr() : nullptr;
    P.y = hard ? y.data_ptr() : nullptr;
    P.t = hard ? nullptr : t.data_ptr();
    P.ignore_index = o.ignore_index;
    P.eps = o.label_smoothing;

    const bool gx = hidden.requires_grad(), gw = weight.requires_grad(), gb = o.bias.defined() && o.bias.requires_grad();
    const bool reverse = reel::detail::autograd_type_v<T, D> && reel::detail::grad_mode_flag() && (gx || gw || gb);
    const bool none = o.reduction == Reduction::None;
    const double scale = o.reduction == Reduction::Mean ? 1.0 / count : 1.0;  // (count 0: inf, its gradients are 0)

    auto loss_rows = empty<A, D>({N});
    Tensor<A, D> lse;
    detail_lce::Grads<A, D> fg;  // mean / sum: the gradients, computed by the forward
    detail_lce::Outputs<A> fo;
    fo.loss = loss_rows.data_ptr();
    if (reverse && none) {
      lse = empty<A, D>({N});
      fo.lse = lse.data_ptr();
    }
    if (reverse && !none) {
      fg = detail_lce::alloc_grads<A, D>(fo, gx, gw, gb, N, Dm, V);
      fo.uniform_scale = static_cast<A>(std::isinf(scale) ? 0.0 : scale);
    }
    detail_lce::run(P, fo);

    if (none) {
      out.copy_(loss_rows.reshape(lead));
    } else {
      double s = 0;
      const A* lr = loss_rows.data_ptr();
      for (int64_t n = 0; n < N; ++n) s += static_cast<double>(lr[n]);
      out.fill_(static_cast<T>(o.reduction == Reduction::Mean ? s / count : s));
    }
    if constexpr (!reel::detail::autograd_type_v<T, D>) {
      return out;
    } else {
      // The dense formula (higher orders): q and a as constants, logits recomputed with reel ops.
      auto dense = [=](const Tensor<T, D>& x2, const Tensor<T, D>& w, const Tensor<T, D>& bias) {
        Tensor<T, D> Z = linear(x2, w, bias);
        Tensor<T, D> q, a;
        if constexpr (hard) {
          std::vector<T> qv(static_cast<size_t>(N * V), T(0)), av(N, T(0));
          const int64_t* yp = y.data_ptr();
          for (int64_t n = 0; n < N; ++n) {
            if (yp[n] == o.ignore_index) continue;
            for (int64_t c = 0; c < V; ++c) qv[n * V + c] = static_cast<T>(o.label_smoothing / V);
            qv[n * V + yp[n]] += static_cast<T>(1 - o.label_smoothing);
            av[n] = T(1);
          }
          q = from_vector<T, D>(qv, {N, V});
          a = from_vector<T, D>(av, {N, 1});
        } else {
          q = Tensor<T, D>(target.detach().reshape({N, V}) * (1 - o.label_smoothing) + o.label_smoothing / V);
          a = sum(q, {1}, true);
        }
        Tensor<T, D> G = detail_lce::dense_grad(Z, q, a);
        return o.reduction == Reduction::Mean ? Tensor<T, D>(G * (std::isinf(scale) ? 0.0 : scale)) : G;
      };
      auto from_acc = [](const Tensor<A, D>& v) { return v.defined() ? v.template to<T>() : Tensor<T, D>(); };
      // the forward's gradients (mean / sum), handed to the first backward
      struct Saved {
        detail_lce::Grads<A, D> grads;
        bool used = false;
      };
      auto saved = std::make_shared<Saved>(Saved{std::move(fg), false});
      auto result = [=](const detail_lce::Grads<A, D>& r) -> std::vector<Tensor<T, D>> {
        return {gx ? from_acc(r.dX).reshape(hidden.sizes()) : Tensor<T, D>(), from_acc(r.dW), from_acc(r.db)};
      };
      Tensor<T, D> bias = o.bias;
      auto bw = [=](const Tensor<T, D>& g) -> std::vector<Tensor<T, D>> {
        if (reel::detail::grad_mode_flag()) {  // create_graph: differentiable dense backward
          auto x2 = hidden.reshape({N, Dm});
          Tensor<T, D> G = dense(x2, weight, bias);
          G = none ? Tensor<T, D>(G * g.reshape({N, 1})) : Tensor<T, D>(G * g);
          return {gx ? matmul(G, weight).reshape(hidden.sizes()) : Tensor<T, D>(),
                  gw ? matmul(G.mT(), x2) : Tensor<T, D>(), gb ? sum(G, {0}) : Tensor<T, D>()};
        }
        if (!none) {
          const double gv = static_cast<double>(g.item());
          if (!saved->used) {
            // hand over the gradients computed by the forward, scaled in place: no copy of dW
            saved->used = true;
            detail_lce::Grads<A, D> r = std::move(saved->grads);
            for (auto* v : {&r.dX, &r.dW, &r.db})
              if (v->defined() && gv != 1) v->mul_(static_cast<A>(gv));
            return result(r);
          }
          // a second backward (retain_graph): compute them again
          detail_lce::Outputs<A> ro;
          auto r = detail_lce::alloc_grads<A, D>(ro, gx, gw, gb, N, Dm, V);
          ro.uniform_scale = static_cast<A>((std::isinf(scale) ? 0.0 : scale) * gv);
          detail_lce::run(P, ro);
          return result(r);
        }
        // none: recompute each chunk's logits; row n's gradient is scaled by g[n]
        auto ga = g.reshape({N}).template to<A>().contiguous();
        detail_lce::Outputs<A> bo;
        bo.scale = ga.data_ptr();
        auto r = detail_lce::alloc_grads<A, D>(bo, gx, gw, gb, N, Dm, V);
        detail_lce::run(P, bo, lse.data_ptr());
        return result(r);
      };
      // (P points into X, W, b, y, t, lse: the closures keep those tensors alive)
      auto keep = std::make_tuple(X, W, b, y, t, lse);
      const bool has_bias = bias.defined();
      auto bw_keep = [bw, keep, has_bias](const Tensor<T, D>& g) {
        auto r = bw(g);
        if (!has_bias) r.resize(2);
        return r;
      };
      auto fw = [=](const std::vector<Tensor<T, D>>& ts) -> Tensor<T, D> {
        auto x2 = hidden.reshape({N, Dm});
        Tensor<T, D> G = dense(x2, weight, bias);
        Tensor<T, D> dZ;
        auto acc = [&](const Tensor<T, D>& term) { dZ = dZ.defined() ? Tensor<T, D>(dZ + term) : term; };
        if (ts[0].defined()) acc(matmul(ts[0].reshape({N, Dm}), weight.mT()));
        if (ts[1].defined()) acc(matmul(x2, ts[1].mT()));
        if (ts.size() > 2 && ts[2].defined()) acc(Tensor<T, D>(ts[2].reshape({1, V}).expand({N, V})));
        Tensor<T, D> rows = sum(Tensor<T, D>(G * dZ), {1});
        return none ? rows.reshape(lead) : sum(rows);
      };
      if (bias.defined())
        return reel::detail::record_fn(out, "LinearCrossEntropyBackward", {hidden, weight, bias}, {hidden, weight, bias},
                                       bw_keep, fw);
      return reel::detail::record_fn(out, "LinearCrossEntropyBackward", {hidden, weight}, {hidden, weight}, bw_keep, fw);
    }
  }
}
// Hidden states or weight as expressions (evaluated first), of different types, or options
// without an element type.
template <TensorLike H, TensorLike W, class U, class D>
  requires(!same_tensors_v<H, W>)
auto linear_cross_entropy(const H& hidden, const W& weight, const Tensor<U, D>& target,
                          const LinearCrossEntropyOptions<detail::value_t<H>, detail::device_t<H>>& o = {}) {
  static_assert(std::is_same_v<detail::value_t<H>, detail::value_t<W>>,
                "reel::linear_cross_entropy: hidden and weight have different element types: convert one (.to<T>() on "
                "a tensor, cast<T>(e) on an expression)");
  return linear_cross_entropy(detail::materialize(hidden), detail::materialize(weight), target, o);
}
template <TensorLike H, TensorLike W, class U, class D, class D2>
auto linear_cross_entropy(const H& hidden, const W& weight, const Tensor<U, D>& target,
                          const LinearCrossEntropyOptions<AnyElement, D2>& o) {
  return linear_cross_entropy(hidden, weight, target, typed_options<detail::value_t<H>, detail::device_t<H>>(o));
}

}  // namespace reel::nn::functional
