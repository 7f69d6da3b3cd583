#pragma once
// LU factorizations of a batch, solves with them, and triangular solves (solve_triangular's
// kernels and derivative projections).
#include "../core/config.hpp"
#include <Eigen/LU>

#include "common.hpp"

namespace reel::inline REEL_ABI::detail::la {

// ------------------------------------------------------------------ LU
template <class T>
struct LuBatch {
  std::vector<Eigen::PartialPivLU<CMat<T>>> lu;
  int64_t n = 0;
};
template <class T, class D>
std::shared_ptr<LuBatch<T>> lu_factor(const Tensor<T, D>& A3) {
  auto r = std::make_shared<LuBatch<T>>();
  int64_t nb = A3.size(0), n = A3.size(1);
  r->n = n;
  r->lu.resize(nb);
  auto a = plain3(A3);
  const T* p = a.data_ptr();
  // Row-major A read as a column-major matrix is A^T: factor that (no transposing copy);
  // det(A^T) = det(A), and solves with A go through the factors' transpose.
  for_batch(nb, n, [&](int64_t i) { r->lu[i].compute(Eigen::Map<const CMat<T>>(p + i * n * n, n, n)); });
  return r;
}
template <class T>
bool lu_singular(const Eigen::PartialPivLU<CMat<T>>& lu) {
  auto d = lu.matrixLU().diagonal();
  for (Eigen::Index k = 0; k < d.size(); ++k)
    if (d(k) == T(0)) return true;
  return false;
}
// op(A)^-1 B through the saved factors (op = identity or adjoint), B [nb, n, k].
template <class T, class D>
Tensor<T, D> lu_solve(const LuBatch<T>& f, const Tensor<T, D>& B, bool adjoint) {
  int64_t nb = B.size(0), n = B.size(1), k = B.size(2);
  auto b = plain3(B);
  auto out = empty<T, D>({nb, n, k});
  const T* pb = b.data_ptr();
  T* po = out.mutable_data_ptr();
  auto run = [&](const auto& lu, const auto& rhs, auto&& x) {  // lu: of A^T
    if (!adjoint)
      x = lu.transpose().solve(rhs);  // A x = b
    else if constexpr (is_complex_v<T>)
      x = lu.solve(rhs.conjugate()).conjugate();  // A^H = conj(A^T)
    else
      x = lu.solve(rhs);  // A^T x = b
  };
  using RM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  for_batch(nb, n, [&](int64_t i) {
    // one column: Eigen's vector kernels (its matrix kernels cost more for a single column)
    if (k == 1)
      run(f.lu[i], Eigen::Map<const Vec>(pb + i * n, n), Eigen::Map<Vec>(po + i * n, n));
    else
      run(f.lu[i], Eigen::Map<const RM>(pb + i * n * k, n, k), RowMap<T>(po + i * n * k, n, k));
  });
  return out;
}
// scale[b] * op(A[b])^-1 for every batch element.
template <class T, class D>
Tensor<T, D> lu_inverse(const LuBatch<T>& f, int64_t nb, bool adjoint) {
  int64_t n = f.n;
  auto I = eye<T, D>(n).unsqueeze(0).expand({nb, n, n});
  return lu_solve(f, I, adjoint);
}

enum class Kind { general, lower, upper };
inline Kind adjoint_kind(Kind k) { return k == Kind::lower ? Kind::upper : k == Kind::upper ? Kind::lower : k; }

// X = A^-1 B for A [nb, n, n], B [nb, n, k]; general A raises for an exactly singular matrix.
template <class T, class D>
Tensor<T, D> solve_value(const Tensor<T, D>& A3, const Tensor<T, D>& B3, Kind kind, const char* fn,
                         std::shared_ptr<LuBatch<T>>* keep) {
  int64_t nb = A3.size(0), n = A3.size(1), k = B3.size(2);
  if constexpr (!detail::Backend<D>::has_data) {
    return empty<T, D>({nb, n, k});
  } else {
    if (kind == Kind::general) {
      auto f = keep && *keep ? *keep : lu_factor(A3);  // factors passed in are reused
      std::vector<int64_t> bad(nb, -1);
      for (int64_t i = 0; i < nb; ++i)
        if (lu_singular(f->lu[i])) bad[i] = 0;
      raise_flagged(bad, fn, "The solver failed because the input matrix is singular.");
      if (keep) *keep = f;
      return lu_solve(*f, B3, false);
    }
    auto a = plain3(A3);
    auto b = plain3(B3);
    auto out = empty<T, D>({nb, n, k});
    const T *pa = a.data_ptr(), *pb = b.data_ptr();
    T* po = out.mutable_data_ptr();
    for_batch(nb, n, [&](int64_t i) {
      CMat<T> m = load(pa + i * n * n, n, n), x = load(pb + i * n * k, n, k);
      if (kind == Kind::lower)
        m.template triangularView<Eigen::Lower>().solveInPlace(x);
      else
        m.template triangularView<Eigen::Upper>().solveInPlace(x);
      store(po + i * n * k, x);
    });
    return out;
  }
}

// The projection of a gradient onto the matrices an op reads (a triangle for triangular A).
template <class T, class D>
Tensor<T, D> project(const Tensor<T, D>& g, Kind kind) {
  if (kind == Kind::general) return g;
  int64_t n = g.size(-1);
  return Tensor<T, D>(g * tri_weights<T, D>(n, kind == Kind::lower, 1, kind == Kind::upper));
}

// X = A^-1 B, recorded. A [nb, n, n], B [nb, n, k]; `lu`: A's factors if already computed;
// `value`: X itself if already computed (from `lu`, of a general A no matrix of which is singular).
template <class T, class D>
Tensor<T, D> solve3(const Tensor<T, D>& A, const Tensor<T, D>& B, Kind kind, const char* fn,
                    std::shared_ptr<LuBatch<T>> lu = nullptr, Tensor<T, D> value = {}) {
  std::shared_ptr<LuBatch<T>> f = std::move(lu);
  Tensor<T, D> X = value.defined() ? std::move(value) : solve_value(A, B, kind, fn, &f);
  if (!records<T, D>(A, B)) return X;
  Tensor<T, D> Xp = X.detach();  // the value, without the history that will point back here
  auto plain = [f, kind, fn](const Tensor<T, D>& M, const Tensor<T, D>& R, bool adjoint) {
    if (f) return lu_solve(*f, R, adjoint);
    return adjoint ? solve_value<T, D>(mH(M), R, adjoint_kind(kind), fn, nullptr) : solve_value<T, D>(M, R, kind, fn, nullptr);
  };
  return record_fn(
      X, "LinalgSolveBackward", {A, B}, {A, B, Xp},
      [A, B, Xp, kind, fn, plain, f](const Tensor<T, D>& G) {
        // gB = A^-H G, gA = -gB X^H
        Tensor<T, D> gB = records<T, D>(A, G) ? solve3(mH(A), G, adjoint_kind(kind), fn) : plain(A, G, true);
        Tensor<T, D> gA;
        if (A.requires_grad()) {
          Tensor<T, D> X = records<T, D>(A, B, gB) ? solve3(A, B, kind, fn, f) : Xp;
          gA = project(Tensor<T, D>(-matmul(gB, mH(X))), kind);
        }
        return std::vector<Tensor<T, D>>{gA, B.requires_grad() ? gB : Tensor<T, D>()};
      },
      [A, B, Xp, kind, fn, plain, f](const std::vector<Tensor<T, D>>& t) {
        // dX = A^-1 (dB - dA X)
        Tensor<T, D> rhs = t[1].defined() ? t[1] : zeros_like(B);
        if (t[0].defined()) {
          Tensor<T, D> X = records<T, D>(A, B) ? solve3(A, B, kind, fn, f) : Xp;
          rhs = Tensor<T, D>(rhs - matmul(project(t[0], kind), X));
        }
        return records<T, D>(A, rhs) ? solve3(A, rhs, kind, fn, f) : plain(A, rhs, false);
      });
}

}  // namespace reel::detail::la
