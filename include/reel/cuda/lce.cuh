#pragma once
// linear_cross_entropy for CUDA tensors: Backend<CUDA>::linear_cross_entropy, which
// nn/linear_cross_entropy.hpp dispatches to. Same algorithm, row formula and semantics as
// the CPU version (read its header comment first); what differs is where things live:
//   - X and W stay in their dtype (float, half, bfloat16 or double); the logits buffer is in
//     the accumulation type A (fp32, or fp64 for double).
//   - Per chunk of rows: Z = X_c Wᵀ (cuBLASLt, fp32 accumulation, written as A); one block
//     per row computes max and sum of exponentials in one pass (online logsumexp), the
//     target and smoothing terms and the loss, then writes the row's scaled gradient
//     (softmax minus target mass): over Z for float / double, into a second buffer in the
//     input dtype for half / bfloat16 (cuBLASLt multiplies two matrices of one dtype).
//     Then dX_c = G W (written in the input dtype), dW += Gᵀ X_c (beta = 1, in A), and
//     db += column sums of G (in A, from the A values).
//   - Gradients of dW and db are accumulated in A and cast to the input dtype at the end.
// Higher-order derivatives (create_graph, forward mode) are not implemented on CUDA: they
// raise not_implemented_error (the CPU uses a dense formula whose reductions CUDA lacks).
#include "../core/config.hpp"

#include "lce_kernels.cuh"

namespace reel::inline REEL_ABI {
namespace detail::cuda::lce {

// ------------------------------------------------------------------ host side
// Rows per chunk when the caller does not say: a logits buffer of about 1 GiB (plus half as
// much for the fp16 / bf16 gradient copy), in multiples of 128 rows. Far larger than the
// CPU's 32 MiB: every chunk reads and writes all of dW (V x D in A), so few large chunks keep
// that traffic small next to the GEMMs, and tall GEMMs use the tensor cores well.
template <class A>
int64_t auto_chunk(int64_t V) {
  int64_t c = std::max<int64_t>(1, (int64_t(1) << 30) / (static_cast<int64_t>(sizeof(A)) * V));
  return c >= 128 ? c / 128 * 128 : c;
}

// Forward (and, if o asks, gradients) over all chunks, queued on the current stream.
template <class A, class T>
void run(const Problem<A, T>& P, Outputs<A, T>& o, const A* known_lse = nullptr) {
  if (P.N == 0) return;
  const int64_t V = P.V, Dm = P.D, cmax = std::min(P.chunk, P.N);
  constexpr bool same = std::is_same_v<A, T>;
  const bool grads = o.grads();
  cudaStream_t stream = current_stream();
  auto zbuf = empty<A, CUDA>({cmax * V});  // (counted by reel::gpu::memory_allocated)
  Tensor<T, CUDA> gbuf;
  if (grads && !same) gbuf = empty<T, CUDA>({cmax * V});
  const bool tf32 = ::reel::gpu::allow_tf32();
  const GemmDtype tt = gemm_dtype_v<T>(), ta = gemm_dtype_v<A>();

  RowArgs<A, T> ra{};
  ra.V = V;
  ra.b = P.b;
  ra.y = P.y;
  ra.t = P.t;
  ra.ignore_index = P.ignore_index;
  ra.eps = static_cast<A>(P.eps);
  ra.keep = A(1) - ra.eps;
  ra.spread = ra.eps / static_cast<A>(V);
  ra.smoothing = P.eps != 0;
  ra.known_lse = known_lse;
  ra.loss = o.loss;
  ra.lse_out = o.lse;
  ra.grads = grads;
  ra.scale = o.scale;
  ra.uniform_scale = o.uniform_scale;
  // half / bfloat16: the gradient goes to gbuf for the GEMMs, and over Z too when db wants
  // the unrounded values; float / double: over Z only.
  ra.write_z = same || o.db;

  for (int64_t r0 = 0; r0 < P.N; r0 += P.chunk) {
    const int64_t c = std::min(P.chunk, P.N - r0);
    A* Z = zbuf.data_ptr();
    const T* Xc = P.X + r0 * Dm;
    {  // Z[c, V] = X_c[c, D] Wᵀ (W stored [V, D]: read transposed in place)
      GemmArgs g;
      g.m = c, g.n = V, g.k = Dm;
      g.a = Xc, g.lda = Dm;
      g.b = P.W, g.ldb = Dm, g.trans_b = true;
      g.c = Z, g.ldc = V;
      g.ab_type = tt, g.c_type = ta, g.allow_tf32 = tf32, g.stream = stream;
      gemm(g);
    }
    ra.z = Z;
    ra.g = same ? nullptr : (grads ? gbuf.data_ptr() : nullptr);
    ra.rows = c;
    ra.row0 = r0;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(c, kMaxRowBlocks));
    if (P.y)
      row_kernel<A, T, true><<<blocks, kRowThreads, 0, stream>>>(ra);
    else
      row_kernel<A, T, false><<<blocks, kRowThreads, 0, stream>>>(ra);
    REEL_CUDA_CHECK_LAUNCH("linear_cross_entropy row_kernel");
    if (!grads) continue;
    const T* G = same ? reinterpret_cast<const T*>(Z) : gbuf.data_ptr();
    if (o.dX) {  // dX_c[c, D] = G[c, V] W[V, D]
      GemmArgs g;
      g.m = c, g.n = Dm, g.k = V;
      g.a = G, g.lda = V;
      g.b = P.W, g.ldb = Dm;
      g.c = o.dX + r0 * Dm, g.ldc = Dm;
      g.ab_type = tt, g.c_type = tt, g.allow_tf32 = tf32, g.stream = stream;
      gemm(g);
    }
    if (o.dW) {  // dW[V, D] += Gᵀ[V, c] X_c[c, D] (G stored [c, V]: read transposed in place)
      GemmArgs g;
      g.m = V, g.n = Dm, g.k = c;
      g.a = G, g.lda = V, g.trans_a = true;
      g.b = Xc, g.ldb = Dm;
      g.c = o.dW, g.ldc = Dm;
      g.beta = 1;
      g.ab_type = tt, g.c_type = ta, g.allow_tf32 = tf32, g.stream = stream;
      gemm(g);
    }
    if (o.db) {
      const unsigned cb = static_cast<unsigned>(std::min<int64_t>((V + 255) / 256, 65535));
      column_sums_kernel<A><<<cb, 256, 0, stream>>>(Z, c, V, o.db);
      REEL_CUDA_CHECK_LAUNCH("linear_cross_entropy column_sums_kernel");
    }
  }
}

// Gradients of one pass: dX in the input dtype, dW and db in A (accumulated into, so they
// start at zero), with `o` pointing at them.
template <class A, class T>
struct Grads {
  Tensor<T, CUDA> dX;
  Tensor<A, CUDA> dW, db;
};
template <class A, class T>
Grads<A, T> alloc_grads(Outputs<A, T>& o, bool gx, bool gw, bool gb, int64_t N, int64_t Dm, int64_t V) {
  Grads<A, T> r;
  cudaStream_t s = current_stream();
  if (gx) o.dX = (r.dX = empty<T, CUDA>({N, Dm})).data_ptr();  // (every row is written)
  if (gw) {
    o.dW = (r.dW = empty<A, CUDA>({V, Dm})).data_ptr();
    REEL_CUDA_CHECK(cudaMemsetAsync(o.dW, 0, static_cast<size_t>(V * Dm) * sizeof(A), s));
  }
  if (gb) {
    o.db = (r.db = empty<A, CUDA>({V})).data_ptr();
    REEL_CUDA_CHECK(cudaMemsetAsync(o.db, 0, static_cast<size_t>(V) * sizeof(A), s));
  }
  return r;
}

// The inputs as the passes read them, and the problem pointing into them (copies of this
// struct share the tensors, so the pointers stay valid while any copy lives).
template <class A, class T>
struct Prepared {
  Tensor<T, CUDA> X, W, b, t;
  Tensor<int64_t, CUDA> y;
  Tensor<double, CUDA> count;  // [1]: the mean's denominator, rows not ignored (on the device)
  Problem<A, T> P;
};
template <class A, class T, class U>
Prepared<A, T> prepare(const Tensor<T, CUDA>& hidden, const Tensor<T, CUDA>& weight, const Tensor<U, CUDA>& target,
                       const nn::functional::LinearCrossEntropyOptions<T, CUDA>& o, int64_t N, int64_t Dm, int64_t V) {
  Prepared<A, T> r;
  r.X = hidden.detach().reshape({N, Dm}).contiguous();
  r.W = weight.detach().contiguous();
  if (o.bias.defined()) r.b = o.bias.detach().contiguous();
  if constexpr (std::is_integral_v<U>) {
    r.y = target.detach().reshape({N}).template to<int64_t>().contiguous();
    r.count = empty<double, CUDA>({1});
    count_targets_kernel<<<1, 256, 0, current_stream()>>>(r.y.data_ptr(), N, V, o.ignore_index,
                                                          r.count.mutable_data_ptr(), device_error_record());
    REEL_CUDA_CHECK_LAUNCH("linear_cross_entropy count_targets_kernel");
  } else {
    r.t = target.detach().reshape({N, V}).contiguous();
    r.count = full<double, CUDA>({1}, static_cast<double>(N));
  }
  Problem<A, T>& P = r.P;
  P.N = N;
  P.D = Dm;
  P.V = V;
  P.chunk = o.chunk_size > 0 ? o.chunk_size : auto_chunk<A>(V);
  P.chunk = std::max<int64_t>(1, std::min(P.chunk, std::max<int64_t>(N, 1)));
  P.X = r.X.data_ptr();
  P.W = r.W.data_ptr();
  P.b = r.b.defined() ? r.b.data_ptr() : nullptr;
  P.y = r.y.defined() ? r.y.data_ptr() : nullptr;
  P.t = r.t.defined() ? r.t.data_ptr() : nullptr;
  P.ignore_index = o.ignore_index;
  P.eps = o.label_smoothing;
  return r;
}

// out = the loss: per row (none) or reduced (mean / sum) on the device.
template <class A, class T>
void write_loss(Tensor<T, CUDA> out, const Tensor<A, CUDA>& loss_rows, nn::functional::Reduction red,
                const Tensor<double, CUDA>& count) {
  if (red == nn::functional::Reduction::None) {
    out.copy_(loss_rows.reshape(out.sizes()));
    return;
  }
  const double* divisor = red == nn::functional::Reduction::Mean ? count.data_ptr() : nullptr;
  reduce_loss_kernel<A, T><<<1, 256, 0, current_stream()>>>(loss_rows.data_ptr(), loss_rows.numel(), divisor,
                                                            out.mutable_data_ptr());
  REEL_CUDA_CHECK_LAUNCH("linear_cross_entropy reduce_loss_kernel");
}

// The gradient factor of every row for mean / sum, times the incoming gradient g (a 0-d
// tensor, or undefined for 1), computed on the device: [1] in A.
template <class A, class T>
Tensor<A, CUDA> uniform_scale(const Tensor<double, CUDA>& count, nn::functional::Reduction red, const Tensor<T, CUDA>& g) {
  auto s = empty<A, CUDA>({1});
  uniform_scale_kernel<A, T><<<1, 1, 0, current_stream()>>>(count.data_ptr(), red == nn::functional::Reduction::Mean,
                                                           g.defined() ? g.data_ptr() : nullptr, s.mutable_data_ptr());
  REEL_CUDA_CHECK_LAUNCH("linear_cross_entropy uniform_scale_kernel");
  return s;
}

// The gradients for an incoming gradient g: recomputed chunk by chunk, row n scaled by g[n]
// (none, with the forward's logsumexps) or every row by scale * g (mean / sum).
template <class A, class T>
Grads<A, T> backward(const Prepared<A, T>& pr, nn::functional::Reduction red, const Tensor<T, CUDA>& g,
                     const Tensor<A, CUDA>& lse, bool gx, bool gw, bool gb) {
  const Problem<A, T>& P = pr.P;
  Outputs<A, T> bo;
  auto r = alloc_grads<A, T>(bo, gx, gw, gb, P.N, P.D, P.V);
  if (red == nn::functional::Reduction::None) {
    auto ga = g.reshape({P.N}).template to<A>().contiguous();
    bo.scale = ga.data_ptr();
    run(P, bo, lse.defined() ? lse.data_ptr() : nullptr);  // (ga lives until run returns: queued work is
                                                           //  ordered before its block is reused)
  } else {
    auto s = uniform_scale<A>(pr.count, red, g);
    bo.uniform_scale = s.data_ptr();
    run(P, bo);
  }
  return r;
}

// Loss and first-order gradients in one call, without autograd, for an incoming gradient g
// (a scalar, or the loss's shape for none). one_pass: g is known up front, so one pass over
// the logits yields the loss and the gradients together (a training step's cost); otherwise
// the op's own backward sequence: forward (keeping the logsumexps for none), then backward
// recomputing the logits. Tests use both to check the gradients whether or not CUDA tensors
// record autograd; the benchmark uses the first.
template <class T>
struct ValueAndGrads {
  Tensor<T, CUDA> loss, dX, dW, db;
};
template <class T, class U>
ValueAndGrads<T> value_and_grads(const Tensor<T, CUDA>& hidden, const Tensor<T, CUDA>& weight,
                                 const Tensor<U, CUDA>& target, const nn::functional::LinearCrossEntropyOptions<T, CUDA>& o,
                                 const Tensor<T, CUDA>& g, bool one_pass = true) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using nn::functional::Reduction;
  const int64_t Dm = hidden.size(-1), V = weight.size(0);
  Shape lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
  const int64_t N = numel_of(lead);
  auto pr = prepare<A>(hidden, weight, target, o, N, Dm, V);
  const bool none = o.reduction == Reduction::None, gb = o.bias.defined();
  ValueAndGrads<T> r;
  r.loss = none ? empty<T, CUDA>(lead) : empty<T, CUDA>({});
  auto loss_rows = empty<A, CUDA>({N});
  Grads<A, T> gr;
  if (one_pass) {
    Outputs<A, T> fo;
    fo.loss = loss_rows.data_ptr();
    gr = alloc_grads<A, T>(fo, true, true, gb, N, Dm, V);
    Tensor<A, CUDA> ga;
    if (none) {
      ga = g.reshape({N}).template to<A>().contiguous();
      fo.scale = ga.data_ptr();
    } else {
      ga = uniform_scale<A>(pr.count, o.reduction, g);
      fo.uniform_scale = ga.data_ptr();
    }
    run(pr.P, fo);
  } else {
    Tensor<A, CUDA> lse;
    Outputs<A, T> fo;
    fo.loss = loss_rows.data_ptr();
    if (none) fo.lse = (lse = empty<A, CUDA>({N})).data_ptr();
    run(pr.P, fo);
    gr = backward(pr, o.reduction, g, lse, true, true, gb);
  }
  write_loss(r.loss, loss_rows, o.reduction, pr.count);
  r.dX = gr.dX.reshape(hidden.sizes());
  r.dW = gr.dW.template to<T>();
  if (gr.db.defined()) r.db = gr.db.template to<T>();
  return r;
}

}  // namespace detail::cuda::lce

namespace detail {
// Part of Backend<CUDA> (core/backend.hpp, assembled in <cuda.hpp>).
struct CudaLceKernels {
  // The op for CUDA tensors, after linear_cross_entropy has checked the arguments; `out` is
  // the freshly allocated result (the leading shape for none, a scalar otherwise).
  template <class T, class U>
  static Tensor<T, CUDA> linear_cross_entropy(Tensor<T, CUDA> out, const Tensor<T, CUDA>& hidden, const Tensor<T, CUDA>& weight,
                             const Tensor<U, CUDA>& target, const nn::functional::LinearCrossEntropyOptions<T, CUDA>& o) {
    namespace lce = cuda::lce;
    using nn::functional::Reduction;
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using D = CUDA;
    const int64_t Dm = hidden.size(-1), V = weight.size(0);
    Shape lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
    const int64_t N = numel_of(lead);
    auto pr = lce::prepare<A>(hidden, weight, target, o, N, Dm, V);

    const bool gx = hidden.requires_grad(), gw = weight.requires_grad(), gb = o.bias.defined() && o.bias.requires_grad();
    const bool reverse = autograd_type_v<T, D> && grad_mode_flag() && (gx || gw || gb);
    const Reduction red = o.reduction;
    const bool none = red == Reduction::None;

    auto loss_rows = empty<A, D>({N});
    Tensor<A, D> lse;
    lce::Grads<A, T> fg;  // mean / sum: the gradients, computed by the forward
    lce::Outputs<A, T> fo;
    fo.loss = loss_rows.data_ptr();
    Tensor<A, D> scale;
    if (reverse && none) fo.lse = (lse = empty<A, D>({N})).data_ptr();
    if (reverse && !none) {
      fg = lce::alloc_grads<A, T>(fo, gx, gw, gb, N, Dm, V);
      scale = lce::uniform_scale<A>(pr.count, red, Tensor<T, D>());
      fo.uniform_scale = scale.data_ptr();
    }
    lce::run(pr.P, fo);
    lce::write_loss(out, loss_rows, red, pr.count);

    if constexpr (!autograd_type_v<T, D>) {
      return out;
    } else {
      if (!reverse) return out;
      auto to_t = [](const Tensor<A, D>& v) { return v.defined() ? Tensor<T, D>(v.template to<T>()) : Tensor<T, D>(); };
      auto result = [=](const lce::Grads<A, T>& r) -> std::vector<Tensor<T, D>> {
        return {gx ? r.dX.reshape(hidden.sizes()) : Tensor<T, D>(), to_t(r.dW), to_t(r.db)};
      };
      // the forward's gradients (mean / sum), handed to the first backward
      struct Saved {
        lce::Grads<A, T> grads;
        bool used = false;
      };
      auto saved = std::make_shared<Saved>(Saved{std::move(fg), false});
      const StreamId forward_stream = cuda::current_stream_id();
      auto bw = [=](const Tensor<T, D>& g) -> std::vector<Tensor<T, D>> {
        REEL_CHECK(!grad_mode_flag(), not_implemented_error,
                   "linear_cross_entropy: higher-order derivatives (create_graph) are not implemented for CUDA tensors; "
                   "use cross_entropy(linear(...)) or the CPU");
        // What the forward kept was allocated on its stream: if backward runs on another, the
        // allocator must wait for this stream's use of it before reusing its memory
        // (record_stream). (The order of the two streams' work is the caller's, as for any tensor.)
        const cudaStream_t here = cuda::current_stream();
        auto used_here = [&](const auto& t) {
          if (t.defined()) ::reel::gpu::record_stream(t, here);
        };
        const bool other_stream = cuda::stream_id(here) != forward_stream;
        if (other_stream) {
          used_here(pr.X), used_here(pr.W), used_here(pr.b), used_here(pr.t), used_here(pr.y), used_here(pr.count);
          used_here(lse);
        }
        if (!none && !saved->used) {
          // hand over the gradients computed by the forward, scaled in place by g on the device:
          // no copy of dW, and no wait for the GPU to read g
          saved->used = true;
          lce::Grads<A, T> r = std::move(saved->grads);
          if (other_stream) used_here(r.dX), used_here(r.dW), used_here(r.db);
          const Tensor<A, D> ga = g.template to<A>();
          if (r.dX.defined()) r.dX.copy_(r.dX * g);
          if (r.dW.defined()) r.dW.copy_(r.dW * ga);
          if (r.db.defined()) r.db.copy_(r.db * ga);
          return result(r);
        }
        // none, or a second backward (retain_graph): compute them again
        return result(lce::backward(pr, red, g, lse, gx, gw, gb));
      };
      auto fw = [](const std::vector<Tensor<T, D>>&) -> Tensor<T, D> {
        raise<not_implemented_error>(
            "linear_cross_entropy: forward-mode derivatives are not implemented for CUDA tensors; use "
            "cross_entropy(linear(...)) or the CPU");
      };
      const bool has_bias = o.bias.defined();
      auto bw_keep = [bw, has_bias](const Tensor<T, D>& g) {
        auto r = bw(g);
        if (!has_bias) r.resize(2);
        return r;
      };
      if (has_bias)
        return record_fn(out, "LinearCrossEntropyBackward", {hidden, weight, o.bias}, {hidden, weight, o.bias}, bw_keep,
                         fw);
      return record_fn(out, "LinearCrossEntropyBackward", {hidden, weight}, {hidden, weight}, bw_keep, fw);
    }
  }
};
}  // namespace detail

}  // namespace reel
