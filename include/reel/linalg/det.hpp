#pragma once
// det, log|det| and inv kernels, with the adjugate (through the SVD) for singular matrices.
#include "../core/config.hpp"
#include <mutex>
#include <Eigen/SVD>

#include "lu.hpp"

namespace reel::inline REEL_ABI::detail::la {

// ------------------------------------------------------------------ adjugate (SVD)
// adj(A) = c V diag(p) U^H with A = U S V^H, p_i = prod_{j != i} s_j, c = det(U) conj(det(V)).
// Its derivative comes from adj(A + E) = c V adj(S + U^H E V) U^H and the derivative of adj
// at a diagonal matrix: d adj(S)[F]_ii = sum_{k != i} F_kk q_ik, d adj(S)[F]_ij = -F_ij q_ij
// (i != j), q_ik = prod_{j != i, k} s_j. Valid for singular A; the derivative of the
// adjugate's derivative (third order of det) is not implemented and raises.
template <class T, class D>
struct SvdFactors {
  Tensor<T, D> U, V, c, Q;  // Q[b] holds q (diagonal: 0); c[b] the phase
};
template <class T, class D>
Tensor<T, D> adj_diag_derivative(const Tensor<T, D>& F, const Tensor<T, D>& Q) {
  // -(Q o F) off the diagonal, diag(Q diag(F)) on it (Q has a zero diagonal)
  auto d = matmul(Q, diagonal(F).unsqueeze(-1)).squeeze(-1);
  return Tensor<T, D>(diag_embed(d) - Q * F);
}
template <class T, class D>
Tensor<T, D> guard_higher_order(const Tensor<T, D>& A, const Tensor<T, D>& like, const char* fn) {
  auto fail = [fn](auto&&...) -> std::vector<Tensor<T, D>> {
    raise<not_implemented_error>(fn, ": derivatives of order three and higher at a singular matrix are not implemented");
    return {};
  };
  return record_fn(zeros_like(like), "SingularHigherOrderGuard", {A}, {}, fail, [fail](const std::vector<Tensor<T, D>>& t) {
    fail(t);
    return Tensor<T, D>();
  });
}
template <class T, class D>
Tensor<T, D> adjugate3(const Tensor<T, D>& A, const char* fn) {
  using R = real_t<T>;
  int64_t nb = A.size(0), n = A.size(1);
  auto f = std::make_shared<SvdFactors<T, D>>();
  f->U = empty<T, D>({nb, n, n});
  f->V = empty<T, D>({nb, n, n});
  f->Q = empty<T, D>({nb, n, n});
  f->c = empty<T, D>({nb});
  auto out = empty<T, D>({nb, n, n});
  auto a = plain3(A);
  for_batch(nb, n, [&](int64_t b) {
    Eigen::JacobiSVD<CMat<T>> svd(load(a.data_ptr() + b * n * n, n, n), Eigen::ComputeFullU | Eigen::ComputeFullV);
    const auto& s = svd.singularValues();
    CMat<T> q = CMat<T>::Zero(n, n);
    Eigen::Matrix<R, Eigen::Dynamic, 1> p(n);
    for (int64_t i = 0; i < n; ++i) {
      R pi = 1;
      for (int64_t j = 0; j < n; ++j)
        if (j != i) pi *= s(j);
      p(i) = pi;
      for (int64_t k = 0; k < n; ++k) {
        if (k == i) continue;
        R v = 1;
        for (int64_t j = 0; j < n; ++j)
          if (j != i && j != k) v *= s(j);
        q(i, k) = T(v);
      }
    }
    T c;
    if constexpr (is_complex_v<T>)
      c = svd.matrixU().determinant() * std::conj(svd.matrixV().determinant());
    else
      c = svd.matrixU().determinant() * svd.matrixV().determinant();
    CMat<T> adj = c * svd.matrixV() * p.template cast<T>().asDiagonal() * svd.matrixU().adjoint();
    store(out.mutable_data_ptr() + b * n * n, adj);
    store(f->U.mutable_data_ptr() + b * n * n, svd.matrixU());
    store(f->V.mutable_data_ptr() + b * n * n, svd.matrixV());
    store(f->Q.mutable_data_ptr() + b * n * n, q);
    f->c.mutable_data_ptr()[b] = c;
  });
  if (!records<T, D>(A)) return out;
  auto with_guard = [A, fn](Tensor<T, D> r) {
    return records<T, D>(A) ? Tensor<T, D>(r + guard_higher_order(A, r, fn)) : r;
  };
  return record_fn(
      out, "AdjugateBackward", {A}, {A},
      [f, with_guard](const Tensor<T, D>& G) {
        // the adjoint of E -> c V D(U^H E V) U^H
        Tensor<T, D> cc = f->c;
        if constexpr (is_complex_v<T>) cc = Tensor<T, D>(conj(f->c));
        auto inner = scale_rows(matmul(matmul(mH(f->V), G), f->U), cc);
        return std::vector<Tensor<T, D>>{with_guard(matmul(matmul(f->U, adj_diag_derivative(inner, f->Q)), mH(f->V)))};
      },
      [f, with_guard](const std::vector<Tensor<T, D>>& t) {
        auto F = matmul(matmul(mH(f->U), t[0]), f->V);
        return with_guard(scale_rows(Tensor<T, D>(matmul(matmul(f->V, adj_diag_derivative(F, f->Q)), mH(f->U))), f->c));
      });
}

// ------------------------------------------------------------------ det, log det
template <class T>
bool well_conditioned(const Eigen::PartialPivLU<CMat<T>>& lu) {
  using R = real_t<T>;
  if (lu_singular(lu)) return false;
  R rc = lu.rcond();
  return !(rc < std::sqrt(std::numeric_limits<R>::epsilon()));  // NaN (from NaN input) takes the LU path
}
template <class T, class D> Tensor<T, D> det3(const Tensor<T, D>& A);
template <class T, class D>
Tensor<T, D> inv3(const Tensor<T, D>& A, const char* fn, std::shared_ptr<LuBatch<T>> lu = nullptr, Tensor<T, D> value = {});

// A^-H from saved factors, computed once and shared by an op's backward and its tangent rule:
// a Hessian by forward over reverse needs it in both (det, slogdet: one solve with n columns
// instead of two). The adjoint solve is the faster one with an identity right side (0.55
// against 0.87 ms at n = 256 on a Xeon: Eigen's kernels for the transposed factors).
template <class T, class D>
struct SharedInverse {
  struct Cache {
    std::once_flag once;  // (backward passes of one graph may run on several threads)
    Tensor<T, D> value;
  };
  std::shared_ptr<LuBatch<T>> f;
  int64_t nb;
  std::shared_ptr<Cache> cache = std::make_shared<Cache>();
  const Tensor<T, D>& adjoint() const {
    std::call_once(cache->once, [this] { cache->value = lu_inverse<T, D>(*f, nb, true); });
    return cache->value;
  }
  // for inv3: A^-1 (a tensor of its own, which inv3's recording gives a history) unless a
  // matrix is exactly singular (the recorded solve raises then)
  Tensor<T, D> known() const {
    for (const auto& l : f->lu)
      if (lu_singular(l)) return {};
    return mH(adjoint()).contiguous();
  }
  // tr(A^-1 B) for B [nb, n, n]: the sum of conj(A^-H) * B
  Tensor<T, D> trace_with(const Tensor<T, D>& B) const { return sum(Tensor<T, D>(conj(adjoint()) * B), {-2, -1}); }
};

template <class T, class D>
Tensor<T, D> det3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto out = empty<T, D>({nb});
  if constexpr (!detail::Backend<D>::has_data) {
    return out;
  } else {
    auto f = lu_factor(A);
    for (int64_t i = 0; i < nb; ++i) out.mutable_data_ptr()[i] = n == 0 ? T(1) : f->lu[i].determinant();
    if (!records<T, D>(A)) return out;
    Tensor<T, D> dp = out.detach();
    auto conditioned = [f] {
      for (auto& l : f->lu)
        if (!well_conditioned(l)) return false;
      return true;
    };
    const SharedInverse<T, D> inv{f, nb};
    return record_fn(
        out, "LinalgDetBackward", {A}, {A, dp},
        [A, dp, f, conditioned, inv](const Tensor<T, D>& g) {
          // g conj(det) A^-H when A is well conditioned, else g adj(A)^H
          if (!conditioned()) return std::vector<Tensor<T, D>>{scale_rows(mH(adjugate3(A, "linalg.det")), g)};
          if (records<T, D>(A, g))
            return std::vector<Tensor<T, D>>{
                scale_rows(mH(inv3(A, "linalg.det", f, inv.known())), Tensor<T, D>(g * conj(det3(A))))};
          return std::vector<Tensor<T, D>>{scale_rows(inv.adjoint(), Tensor<T, D>(g * conj(dp)))};
        },
        [A, dp, f, conditioned, inv](const std::vector<Tensor<T, D>>& t) {
          // d det = tr(adj(A) dA) = det tr(A^-1 dA)
          if (!conditioned()) return trace(matmul(adjugate3(A, "linalg.det"), t[0]));
          if (records<T, D>(A, t[0]))
            return Tensor<T, D>(det3(A) * trace(solve3(A, t[0], Kind::general, "linalg.det", f)));
          return Tensor<T, D>(dp * inv.trace_with(t[0]));
        });
  }
}

// log det: log|det| for real A; log|det| + i arg(det) for complex A (holomorphic).
// Also returns the sign (0 for a singular matrix).
template <class T, class D>
std::pair<Tensor<T, D>, Tensor<T, D>> logdet3(const Tensor<T, D>& A) {
  using R = real_t<T>;
  int64_t nb = A.size(0), n = A.size(1);
  auto out = empty<T, D>({nb});
  auto sign = empty<T, D>({nb});
  if constexpr (!detail::Backend<D>::has_data) {
    return {out, sign};
  } else {
    auto f = lu_factor(A);
    for (int64_t b = 0; b < nb; ++b) {
      const auto& lu = f->lu[b];
      T s = T(lu.permutationP().determinant());
      R la = 0;
      for (int64_t i = 0; i < n; ++i) {
        T u = lu.matrixLU()(i, i);
        R au = std::abs(u);
        la += std::log(au);
        s = au == 0 ? T(0) : std::isnan(au) ? T(au) : s * (u / au);
      }
      sign.mutable_data_ptr()[b] = s;
      if constexpr (is_complex_v<T>)
        out.mutable_data_ptr()[b] = T(la, s == T(0) ? R(0) : std::arg(s));
      else
        out.mutable_data_ptr()[b] = la;
    }
    if (!records<T, D>(A)) return {out, sign};
    const SharedInverse<T, D> inv{f, nb};
    return {record_fn(
                out, "LinalgSlogdetBackward", {A}, {A},
                [A, f, inv](const Tensor<T, D>& g) {
                  // g A^-H
                  if (records<T, D>(A, g))
                    return std::vector<Tensor<T, D>>{scale_rows(mH(inv3(A, "linalg.slogdet", f, inv.known())), g)};
                  return std::vector<Tensor<T, D>>{scale_rows(inv.adjoint(), g)};
                },
                [A, f, inv](const std::vector<Tensor<T, D>>& t) {
                  // tr(A^-1 dA)
                  if (records<T, D>(A, t[0])) return trace(solve3(A, t[0], Kind::general, "linalg.slogdet", f));
                  return inv.trace_with(t[0]);
                }),
            sign};
  }
}

template <class T, class D>
Tensor<T, D> inv3(const Tensor<T, D>& A, const char* fn, std::shared_ptr<LuBatch<T>> lu, Tensor<T, D> value) {
  int64_t nb = A.size(0), n = A.size(1);
  return solve3(A, Tensor<T, D>(eye<T, D>(n).unsqueeze(0).expand({nb, n, n})), Kind::general, fn, std::move(lu),
                std::move(value));
}

}  // namespace reel::detail::la
