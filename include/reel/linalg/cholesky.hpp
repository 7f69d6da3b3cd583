#pragma once
// The Cholesky factorization of a batch and its derivative rules.
#include "../core/config.hpp"
#include <Eigen/Cholesky>

#include "det.hpp"

namespace reel::inline REEL_ABI::detail::la {

// ------------------------------------------------------------------ cholesky
template <class T, class D>
Tensor<T, D> cholesky3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto L = empty<T, D>({nb, n, n});
  if constexpr (!detail::Backend<D>::has_data) {
    return L;
  } else {
    auto a = plain3(A);
    std::vector<int64_t> bad(nb, -1);
    for_batch(nb, n, [&](int64_t b) {
      CMat<T> m = load(a.data_ptr() + b * n * n, n, n);
      Eigen::Index k = Eigen::internal::llt_inplace<T, Eigen::Lower>::blocked(m);
      if (k >= 0) bad[b] = k + 1;
      CMat<T> l = m.template triangularView<Eigen::Lower>();
      store(L.mutable_data_ptr() + b * n * n, l);
    });
    raise_flagged(bad, "linalg.cholesky",
                  "The factorization could not be completed because the input is not positive-definite (the leading "
                  "minor of order ",
                  [&] {
                    for (auto k : bad)
                      if (k >= 0) return k;
                    return int64_t(0);
                  }(),
                  " is not positive-definite).");
    if (!records<T, D>(A)) return L;
    Tensor<T, D> Lp = L.detach();
    // Phi(X): the lower triangle with half the diagonal
    auto phi = [n](const Tensor<T, D>& X) { return Tensor<T, D>(X * tri_weights<T, D>(n, 1, 0.5, 0)); };
    return record_fn(
        L, "LinalgCholeskyBackward", {A}, {A, Lp},
        [A, Lp, phi](const Tensor<T, D>& gL) {
          // gA = sym(L^-H Phi(L^H gL) L^-1)
          Tensor<T, D> l = records<T, D>(A, gL) ? cholesky3(A) : Lp;
          auto P = phi(Tensor<T, D>(matmul(mH(l), gL)));
          auto Y = solve3(mH(l), P, Kind::upper, "linalg.cholesky");          // L^-H P
          auto M = mH(solve3(mH(l), mH(Y), Kind::upper, "linalg.cholesky"));  // Y L^-1
          return std::vector<Tensor<T, D>>{Tensor<T, D>(0.5 * (M + mH(M)))};
        },
        [A, Lp, phi](const std::vector<Tensor<T, D>>& t) {
          // dL = L Phi(L^-1 dA L^-H)
          Tensor<T, D> l = records<T, D>(A, t[0]) ? cholesky3(A) : Lp;
          auto Y = solve3(l, t[0], Kind::lower, "linalg.cholesky");
          auto Z = mH(solve3(l, mH(Y), Kind::lower, "linalg.cholesky"));
          return matmul(l, phi(Z));
        });
  }
}

}  // namespace reel::detail::la
