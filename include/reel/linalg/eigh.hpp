#pragma once
// The Hermitian eigendecomposition of a batch and its derivative rules.
#include "../core/config.hpp"
#include <Eigen/Eigenvalues>

#include "cholesky.hpp"

namespace reel::inline REEL_ABI::detail::la {

// ------------------------------------------------------------------ eigh
// Eigenvalues (ascending, as values of type T) and eigenvectors of the Hermitian matrices
// whose lower triangles A holds.
template <class T, class D>
std::pair<Tensor<T, D>, Tensor<T, D>> eigh3(const Tensor<T, D>& A) {
  using R = real_t<T>;
  int64_t nb = A.size(0), n = A.size(1);
  auto w = empty<T, D>({nb, n});
  auto V = empty<T, D>({nb, n, n});
  if constexpr (!detail::Backend<D>::has_data) {
    return {w, V};
  } else {
    auto a = plain3(A);
    std::vector<int64_t> bad(nb, -1);
    for_batch(nb, n, [&](int64_t b) {
      CMat<T> m = load(a.data_ptr() + b * n * n, n, n);
      bool finite = true;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = j; i < n; ++i) finite = finite && std::isfinite(std::abs(m(i, j)));
      if (!finite) {  // NaN in, NaN out
        std::fill_n(w.mutable_data_ptr() + b * n, n, T(std::numeric_limits<R>::quiet_NaN()));
        std::fill_n(V.mutable_data_ptr() + b * n * n, n * n, T(std::numeric_limits<R>::quiet_NaN()));
        return;
      }
      Eigen::SelfAdjointEigenSolver<CMat<T>> es(m);
      if (es.info() != Eigen::Success) bad[b] = 0;
      for (int64_t i = 0; i < n; ++i) w.mutable_data_ptr()[b * n + i] = T(es.eigenvalues()(i));
      store(V.mutable_data_ptr() + b * n * n, es.eigenvectors());
    });
    raise_flagged(bad, "linalg.eigh", "The algorithm failed to converge.");
    if (!records<T, D>(A)) return {w, V};
    Tensor<T, D> wp = w.detach(), Vp = V.detach();
    // Forward rules recompute (w, V) when their result needs a history (they run before the
    // outputs have all their tangents). Backward rules use the outputs themselves, rebuilt
    // with their history, so a higher-order backward sums V's cotangents at this node.
    auto factors = [A, wp, Vp](bool again) { return again ? eigh3(A) : std::pair{wp, Vp}; };
    auto hw = std::make_shared<SavedOutput>(wp.impl_ptr()), hV = std::make_shared<SavedOutput>(Vp.impl_ptr());
    auto outputs = [A, wp, Vp, hw, hV](bool again) {
      if (!again) return std::pair{wp, Vp};
      GradPtr w1 = hw->get(), V1 = hV->get();
      if (w1 && V1) return std::pair{Tensor<T, D>(w1), Tensor<T, D>(V1)};
      auto r = eigh3(A);
      return std::pair{w1 ? Tensor<T, D>(w1) : r.first, V1 ? Tensor<T, D>(V1) : r.second};
    };
    // F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it
    auto F = [n](const Tensor<T, D>& ev) {
      auto off = tri_weights<T, D>(n, 1, 0, 1);
      return Tensor<T, D>(off / (ev.unsqueeze(-2) - ev.unsqueeze(-1) + eye<T, D>(n)));
    };
    auto values = record_fn(
        w, "LinalgEighBackward", {A}, {A, wp, Vp},
        [A, outputs](const Tensor<T, D>& gw) {
          auto [ev, vec] = outputs(records<T, D>(A, gw));
          return std::vector<Tensor<T, D>>{matmul(matmul(vec, diag_embed(gw)), mH(vec))};
        },
        [A, factors](const std::vector<Tensor<T, D>>& t) {
          auto vec = factors(records<T, D>(A, t[0])).second;
          return diagonal(matmul(matmul(mH(vec), t[0]), vec));
        });
    auto vectors = record_fn(
        V, "LinalgEighBackward", {A}, {A, wp, Vp},
        [A, outputs, F](const Tensor<T, D>& gV) {
          auto [ev, vec] = outputs(records<T, D>(A, gV));
          auto X = matmul(mH(vec), gV);
          auto inner = Tensor<T, D>(F(ev) * (0.5 * (X - mH(X))));
          return std::vector<Tensor<T, D>>{matmul(matmul(vec, inner), mH(vec))};
        },
        [A, factors, F](const std::vector<Tensor<T, D>>& t) {
          auto [ev, vec] = factors(records<T, D>(A, t[0]));
          return matmul(vec, Tensor<T, D>(F(ev) * matmul(matmul(mH(vec), t[0]), vec)));
        });
    hw->bind(values.impl());
    hV->bind(vectors.impl());
    return {values, vectors};
  }
}

}  // namespace reel::detail::la
