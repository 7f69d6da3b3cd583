#pragma once
// reel::linalg: det, slogdet, solve, solve_triangular, inv, cholesky, eigh, matrix_exp on
// batches of matrices [..., n, n], real and complex, through Eigen's decompositions.
//
// Derivatives. Every op is recorded with a backward and a forward rule written with
// differentiable reel ops on the primal inputs, so that both rules can be differentiated
// again (reverse-over-reverse, forward-over-reverse, forward-over-forward, reverse-over-
// forward). A rule first asks whether its result needs a history (`records`); when it does
// not (plain first-order use), it reuses the factorization computed in the forward pass
// instead of recomputing anything. Forward rules never use the op's own output: with nested
// dual levels that output lacks the tangents of the levels not yet processed, which is how
// PyTorch came to drop the d(A^-1) = -A^-1 dA A^-1 term.
#include "core/config.hpp"
#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/SVD>

#include "ops/products.hpp"

namespace reel::inline REEL_ABI {
namespace linalg {
template <class T, class D = CPU>
struct SlogdetResult {
  Tensor<T, D> sign;
  Tensor<real_t<T>, D> logabsdet;
};
template <class T, class D = CPU>
struct EighResult {
  Tensor<real_t<T>, D> eigenvalues;
  Tensor<T, D> eigenvectors;
};
}  // namespace linalg

namespace detail::la {

template <class T> using CMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T> using RowMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <class T, class D>
constexpr void check_types(const char*) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::complex<float>> ||
                    std::is_same_v<T, std::complex<double>>,
                "reel::linalg: supports float, double, complex<float> and complex<double> tensors");
  static_assert(!std::is_same_v<D, CUDA>, "reel::linalg: not implemented for CUDA tensors yet");
}

inline void check_square(const Shape& s, const char* fn, const char* arg = "A") {
  auto d = s.size();
  REEL_CHECK(d >= 2, value_error, fn, ": ", arg, " must have at least 2 dimensions, got shape ", s);
  REEL_CHECK(s[d - 1] == s[d - 2], value_error, fn, ": ", arg, " must be batches of square matrices, but they are ",
             s[d - 2], " by ", s[d - 1], " matrices (shape ", s, ")");
}
inline Shape batch_of(const Shape& s, size_t tail = 2) { return Shape(s.begin(), s.end() - tail); }
inline Shape with_tail(Shape s, std::initializer_list<int64_t> tail) {
  for (auto t : tail) s.push_back(t);
  return s;
}

// Is anything recorded by an op over these tensors (a history for reverse mode, or a tangent
// of an active, unmasked level)?
template <class T, class D, class... Ts>
bool records(const Ts&... ts) {
  if constexpr (!autograd_type_v<T, D>) {
    return false;
  } else {
    const TensorImpl* ins[] = {(ts.defined() ? &ts.impl() : nullptr)...};
    return autograd_needed(ins, sizeof...(Ts));
  }
}

// An op's output as its backward rule sees it: the value alone for first order; for higher
// orders the value with its history (pointing back at the op's node) and tangents, rebuilt
// on demand so the node does not keep itself alive.
struct SavedOutput {
  GradPtr value;
  std::weak_ptr<Node> node;
  std::vector<Tangent> tangents;
  explicit SavedOutput(GradPtr v) : value(std::move(v)) {}
  void bind(const TensorImpl& recorded) {
    if (auto* m = meta_of(recorded)) {
      node = m->grad_fn;
      tangents = m->tangents;
    }
  }
  // null once the node is gone (nothing used this output): recompute instead
  GradPtr get() const {
    auto n = node.lock();
    if (!n) return nullptr;
    GradPtr p = plain_alias(*value);
    set_history(*p, n, 0);
    for (auto& t : tangents)
      if (level_live(t.level)) set_tangent(*p, t);
    return p;
  }
};

template <class T, class D>
Tensor<T, D> mH(const Tensor<T, D>& m) {
  if constexpr (is_complex_v<T>)
    return Tensor<T, D>(conj(m.mT()));
  else
    return m.mT();
}
// Differentiable helpers on [..., n, n] built from elementwise ops with constants.
template <class T, class D>
Tensor<T, D> eye_like(const Tensor<T, D>& m) {
  return eye<T, D>(m.size(-1));
}
template <class T, class D>
Tensor<T, D> trace(const Tensor<T, D>& m) {
  return sum(Tensor<T, D>(m * eye_like(m)), Shape{-2, -1});
}
template <class T, class D>
Tensor<T, D> diagonal(const Tensor<T, D>& m) {
  return sum(Tensor<T, D>(m * eye_like(m)), Shape{-1});
}
template <class T, class D>
Tensor<T, D> diag_embed(const Tensor<T, D>& v) {
  return Tensor<T, D>(v.unsqueeze(-1) * eye<T, D>(v.size(-1)));
}
// weights w(i, j) = below if i > j, on if i == j, above if i < j
template <class T, class D>
Tensor<T, D> tri_weights(int64_t n, double below, double on, double above) {
  auto w = empty<T, D>({n, n});
  T* p = w.mutable_data_ptr();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) p[i * n + j] = T(i > j ? below : i == j ? on : above);
  return w;
}
template <class T, class D>
Tensor<T, D> scale_rows(const Tensor<T, D>& m, const Tensor<T, D>& s) {  // s[b] * m[b]
  return Tensor<T, D>(m * s.unsqueeze(-1).unsqueeze(-1));
}

// A contiguous plain copy, [nb, r, c].
template <class T, class D>
Tensor<T, D> plain3(const Tensor<T, D>& m) {
  return m.detach().contiguous();
}

template <class T>
CMat<T> load(const T* p, int64_t r, int64_t c) {
  return RowMap<T>(const_cast<T*>(p), r, c);
}
template <class T, class M>
void store(T* p, const M& m) {
  RowMap<T>(p, m.rows(), m.cols()) = m;
}

template <class F>
void for_batch(int64_t nb, int64_t n, F&& f) {
  if (nb > 1 && n <= 128)
    parallel_range(nb, [&](int64_t s, int64_t e) { for (int64_t i = s; i < e; ++i) f(i); }, 1);
  else
    for (int64_t i = 0; i < nb; ++i) f(i);
}

// Throws for the first batch element flagged (flags filled in parallel).
template <class... M>
void raise_flagged(const std::vector<int64_t>& flags, const char* fn, const M&... msg) {
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i] >= 0) {
      std::ostringstream s;
      s << fn << ": ";
      if (flags.size() > 1) s << "(Batch element " << i << "): ";
      ((s << msg), ...);
      raise<error>(s.str());
    }
}

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
  if constexpr (std::is_same_v<D, Meta>) {
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

// X = A^-1 B, recorded. A [nb, n, n], B [nb, n, k]; `lu`: A's factors if already computed.
template <class T, class D>
Tensor<T, D> solve3(const Tensor<T, D>& A, const Tensor<T, D>& B, Kind kind, const char* fn,
                    std::shared_ptr<LuBatch<T>> lu = nullptr) {
  std::shared_ptr<LuBatch<T>> f = std::move(lu);
  Tensor<T, D> X = solve_value(A, B, kind, fn, &f);
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
Tensor<T, D> inv3(const Tensor<T, D>& A, const char* fn, std::shared_ptr<LuBatch<T>> lu = nullptr);

template <class T, class D>
Tensor<T, D> det3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto out = empty<T, D>({nb});
  if constexpr (std::is_same_v<D, Meta>) {
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
    return record_fn(
        out, "LinalgDetBackward", {A}, {A, dp},
        [A, dp, f, conditioned, nb](const Tensor<T, D>& g) {
          // g conj(det) A^-H when A is well conditioned, else g adj(A)^H
          if (!conditioned()) return std::vector<Tensor<T, D>>{scale_rows(mH(adjugate3(A, "linalg.det")), g)};
          if (records<T, D>(A, g))
            return std::vector<Tensor<T, D>>{scale_rows(mH(inv3(A, "linalg.det", f)), Tensor<T, D>(g * conj(det3(A))))};
          return std::vector<Tensor<T, D>>{scale_rows(lu_inverse<T, D>(*f, nb, true), Tensor<T, D>(g * conj(dp)))};
        },
        [A, dp, f, conditioned](const std::vector<Tensor<T, D>>& t) {
          // d det = tr(adj(A) dA) = det tr(A^-1 dA)
          if (!conditioned()) return trace(matmul(adjugate3(A, "linalg.det"), t[0]));
          if (records<T, D>(A, t[0]))
            return Tensor<T, D>(det3(A) * trace(solve3(A, t[0], Kind::general, "linalg.det", f)));
          return Tensor<T, D>(dp * trace(lu_solve(*f, t[0], false)));
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
  if constexpr (std::is_same_v<D, Meta>) {
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
    return {record_fn(
                out, "LinalgSlogdetBackward", {A}, {A},
                [A, f, nb](const Tensor<T, D>& g) {
                  // g A^-H
                  if (records<T, D>(A, g)) return std::vector<Tensor<T, D>>{scale_rows(mH(inv3(A, "linalg.slogdet", f)), g)};
                  return std::vector<Tensor<T, D>>{scale_rows(lu_inverse<T, D>(*f, nb, true), g)};
                },
                [A, f](const std::vector<Tensor<T, D>>& t) {
                  // tr(A^-1 dA)
                  if (records<T, D>(A, t[0])) return trace(solve3(A, t[0], Kind::general, "linalg.slogdet", f));
                  return trace(lu_solve(*f, t[0], false));
                }),
            sign};
  }
}

template <class T, class D>
Tensor<T, D> inv3(const Tensor<T, D>& A, const char* fn, std::shared_ptr<LuBatch<T>> lu) {
  int64_t nb = A.size(0), n = A.size(1);
  return solve3(A, Tensor<T, D>(eye<T, D>(n).unsqueeze(0).expand({nb, n, n})), Kind::general, fn, std::move(lu));
}

// ------------------------------------------------------------------ cholesky
template <class T, class D>
Tensor<T, D> cholesky3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto L = empty<T, D>({nb, n, n});
  if constexpr (std::is_same_v<D, Meta>) {
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

// ------------------------------------------------------------------ eigh
// Eigenvalues (ascending, as values of type T) and eigenvectors of the Hermitian matrices
// whose lower triangles A holds.
template <class T, class D>
std::pair<Tensor<T, D>, Tensor<T, D>> eigh3(const Tensor<T, D>& A) {
  using R = real_t<T>;
  int64_t nb = A.size(0), n = A.size(1);
  auto w = empty<T, D>({nb, n});
  auto V = empty<T, D>({nb, n, n});
  if constexpr (std::is_same_v<D, Meta>) {
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

// ------------------------------------------------------------------ matrix_exp
// Taylor polynomials of degree 1, 2, 4, 8, 12, 18 evaluated with 0, 1, 2, 3, 4, 5 products
// (Bader, Blanes, Casas: "Computing the matrix exponential with an optimized Taylor
// polynomial approximation", Mathematics 7 (2019) 1174), the degree chosen by the 1-norm,
// scaling and squaring above the degree-18 threshold. Coefficients: the paper's; the test
// suite checks that each polynomial reproduces the Taylor series of its degree.
template <class R>
struct ExpThetas;
template <>
struct ExpThetas<float> {
  static constexpr double v[6] = {1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                                  5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00};
};
template <>
struct ExpThetas<double> {
  static constexpr double v[6] = {2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                                  4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00};
};
inline constexpr int kExpDegrees[6] = {1, 2, 4, 8, 12, 18};

// Dense n x n row-major matrices for the polynomial evaluation.
template <class T>
struct Sq {
  int64_t n;
  std::vector<T> v;
  explicit Sq(int64_t n_, T diag = T(0)) : n(n_), v(n_ * n_, T(0)) {
    for (int64_t i = 0; i < n; ++i) v[i * n + i] = diag;
  }
  friend Sq operator*(const Sq& a, const Sq& b) {
    Sq c(a.n);
    gemm<T>(a.n, a.n, a.n, a.v.data(), a.n, b.v.data(), a.n, c.v.data(), a.n);
    return c;
  }
};
// c0 I + sum_k c_k M_k
template <class T>
Sq<T> lin(int64_t n, double c0, std::initializer_list<std::pair<double, const Sq<T>*>> terms) {
  Sq<T> r(n, T(c0));
  for (auto& [c, m] : terms)
    if (c != 0)
      for (size_t i = 0; i < r.v.size(); ++i) r.v[i] += T(c) * m->v[i];
  return r;
}

// The degree-m Taylor polynomial of exp at A (m one of kExpDegrees).
template <class T>
Sq<T> taylor_exp(const Sq<T>& A, int m) {
  int64_t n = A.n;
  if (m == 1) return lin<T>(n, 1, {{1, &A}});
  Sq<T> A2 = A * A;
  if (m == 2) return lin<T>(n, 1, {{1, &A}, {0.5, &A2}});
  if (m == 4) {
    Sq<T> t = lin<T>(n, 1, {{1.0 / 3, &A}, {1.0 / 12, &A2}});
    Sq<T> u = A2 * t;
    return lin<T>(n, 1, {{1, &A}, {0.5, &u}});
  }
  if (m == 8) {
    const double s = std::sqrt(177.0), x3 = 2.0 / 3;
    const double x1 = x3 * (1 + s) / 88, x2 = x3 * (1 + s) / 352;
    const double x4 = (-271 + 29 * s) / (315 * x3), x5 = 11 * (-1 + s) / (1260 * x3), x6 = 11 * (-9 + s) / (5040 * x3),
                 x7 = (89 - s) / (5040 * x3 * x3);
    const double y2 = (857 - 58 * s) / 630;
    Sq<T> A4 = A2 * lin<T>(n, 0, {{x1, &A}, {x2, &A2}});
    Sq<T> A8 = lin<T>(n, 0, {{x3, &A2}, {1, &A4}}) * lin<T>(n, x4, {{x5, &A}, {x6, &A2}, {x7, &A4}});
    return lin<T>(n, 1, {{1, &A}, {y2, &A2}, {1, &A8}});
  }
  Sq<T> A3 = A2 * A;
  if (m == 12) {
    static constexpr double a[4][4] = {
        {-1.86023205146205532243437300433e-02, 4.6, 2.11693118299809442949323323336e-01, 0},
        {-5.00702322573317730979741843919e-03, 9.92875103538486836140479571505e-01, 1.58224384715726725371768893252e-01,
         -1.31810610138301840156819349464e-01},
        {-5.73420122960522263905952420789e-01, -1.32445561052799638845074997454e-01, 1.65635169436727415011171668419e-01,
         -2.02785554058925907933568229945e-02},
        {-1.33399693943892059700768926983e-01, 1.7299e-03, 1.07862779315792425026320640108e-02,
         -6.75951846863086359778560766482e-03}};
    auto q = [&](int j) { return lin<T>(n, a[0][j], {{a[1][j], &A}, {a[2][j], &A2}, {a[3][j], &A3}}); };
    Sq<T> q1 = q(0), q2 = q(1), q3 = q(2), q4 = q(3);
    Sq<T> q44 = q4 * q4;
    Sq<T> q61 = lin<T>(n, 0, {{1, &q3}, {1, &q44}});
    Sq<T> p = lin<T>(n, 0, {{1, &q2}, {1, &q61}}) * q61;
    return lin<T>(n, 0, {{1, &q1}, {1, &p}});
  }
  // m == 18
  static constexpr double a[4] = {0, -1.00365581030144620014614939405e-01, -8.02924648241156960116919515244e-03,
                                  -8.92138498045729955685466128049e-04};
  // rows: coefficients of I, A, A2, A3, A6 in q61, q62, q63, q64
  static constexpr double b[4][5] = {
      {0, 3.97849749499645076145196127710e-01, 1.36783778460411719922523706878e+00, 4.98289622525382677556858817262e-01,
       -6.37898194594723309241550056492e-04},
      {-1.09676396052962062593517462675e+01, 1.68015813878906197182785401725e+00, 5.71779846478865512702871713225e-02,
       -6.98210122488052084290466483802e-03, 3.34975017086070538313367340668e-05},
      {-9.04316832390810561971468877018e-02, -6.76404519071381907560079900380e-02, 6.75961301770459646082799195079e-02,
       2.95552570429315527426069182242e-02, -1.39180257516060701124739979344e-05},
      {0, 0, -9.23364619367118592764570775143e-02, -1.69364939002081717191385115723e-02,
       -1.40086798182036159794363205726e-05}};
  Sq<T> A6 = A3 * A3;
  auto q = [&](int r) { return lin<T>(n, b[r][0], {{b[r][1], &A}, {b[r][2], &A2}, {b[r][3], &A3}, {b[r][4], &A6}}); };
  Sq<T> q31 = lin<T>(n, a[0], {{a[1], &A}, {a[2], &A2}, {a[3], &A3}});
  Sq<T> q61 = q(0), q62 = q(1), q63 = q(2), q64 = q(3);
  Sq<T> t = q31 * q64;
  Sq<T> q91 = lin<T>(n, 0, {{1, &t}, {1, &q63}});
  Sq<T> p = lin<T>(n, 0, {{1, &q62}, {1, &q91}}) * q91;
  return lin<T>(n, 0, {{1, &q61}, {1, &p}});
}

template <class T>
double norm1(const Sq<T>& A) {
  double best = 0;
  for (int64_t j = 0; j < A.n; ++j) {
    double c = 0;
    for (int64_t i = 0; i < A.n; ++i) c += std::abs(A.v[i * A.n + j]);
    if (!(c <= best)) best = c;  // NaN wins
  }
  return best;
}
// exp(A) for one matrix; returns the degree used and the number of squarings.
template <class T>
std::pair<int, int> expm_one(Sq<T>& A) {
  const double* th = ExpThetas<real_t<T>>::v;
  double nrm = norm1(A);
  if (!std::isfinite(nrm)) {
    std::fill(A.v.begin(), A.v.end(), T(std::numeric_limits<real_t<T>>::quiet_NaN()));
    return {0, 0};
  }
  for (int k = 0; k < 6; ++k)
    if (nrm <= th[k]) {
      A = taylor_exp(A, kExpDegrees[k]);
      return {kExpDegrees[k], 0};
    }
  int s = static_cast<int>(std::ceil(std::log2(nrm / th[5])));
  double scale = std::ldexp(1.0, -s);
  for (auto& x : A.v) x *= T(scale);
  A = taylor_exp(A, 18);
  for (int i = 0; i < s; ++i) A = A * A;
  return {18, s};
}

template <class T, class D>
Tensor<T, D> matrix_exp3(const Tensor<T, D>& A);

// The derivative of exp at X along E (or its adjoint, with X = A^H): the upper right block
// of exp([[X, E], [0, X]]). E is scaled to X's norm first (the result is linear in E), so the
// block's degree and scaling follow X.
template <class T, class D>
Tensor<T, D> exp_frechet(const Tensor<T, D>& X, const Tensor<T, D>& E) {
  int64_t n = X.size(-1);
  double nx = 0, ne = 0;
  {
    auto x = plain3(X), e = plain3(E);
    for (auto v : x.to_vector()) nx = std::max<double>(nx, std::abs(v));
    for (auto v : e.to_vector()) ne = std::max<double>(ne, std::abs(v));
  }
  double c = (nx > 0 && ne > 0 && std::isfinite(nx) && std::isfinite(ne)) ? nx / ne : 1.0;
  Tensor<T, D> Es = c == 1.0 ? E : Tensor<T, D>(E * c);
  auto top = cat({X, Es}, -1);
  auto bottom = cat({zeros_like(X), X}, -1);
  auto M = cat({top, bottom}, -2);
  Tensor<T, D> r = matrix_exp3(M).narrow(-2, 0, n).narrow(-1, n, n);
  return c == 1.0 ? r : Tensor<T, D>(r * (1.0 / c));
}

template <class T, class D>
Tensor<T, D> matrix_exp3(const Tensor<T, D>& A) {
  int64_t nb = A.size(0), n = A.size(1);
  auto out = empty<T, D>({nb, n, n});
  if constexpr (std::is_same_v<D, Meta>) {
    return out;
  } else {
    auto a = plain3(A);
    for_batch(nb, n, [&](int64_t b) {
      Sq<T> m(n);
      std::copy_n(a.data_ptr() + b * n * n, n * n, m.v.data());
      expm_one(m);
      std::copy_n(m.v.data(), n * n, out.mutable_data_ptr() + b * n * n);
    });
    if (!records<T, D>(A)) return out;
    return record_fn(
        out, "LinalgMatrixExpBackward", {A}, {A},
        [A](const Tensor<T, D>& G) { return std::vector<Tensor<T, D>>{exp_frechet(mH(A), G)}; },
        [A](const std::vector<Tensor<T, D>>& t) { return exp_frechet(A, t[0]); });
  }
}

// Runs op3 on A [..., n, n] as [nb, n, n] and gives the result the batch shape back.
template <class T, class D, class F>
auto batched(const Tensor<T, D>& A, const char* fn, F&& op3) {
  check_types<T, D>(fn);
  check_square(A.sizes(), fn);
  int64_t n = A.size(-1);
  Shape batch = batch_of(A.sizes());
  int64_t nb = numel_of(batch);
  return std::pair{op3(A.reshape({nb, n, n})), batch};
}
template <class T, class D>
Tensor<T, D> unbatch(const Tensor<T, D>& r, const Shape& batch) {
  Shape s = batch;
  for (int64_t d = 1; d < r.dim(); ++d) s.push_back(r.size(d));
  return r.reshape(s);
}
template <class T, class D>
Tensor<real_t<T>, D> real_part(const Tensor<T, D>& t) {
  if constexpr (is_complex_v<T>)
    return Tensor<real_t<T>, D>(real(t));
  else
    return t;
}

}  // namespace detail::la

namespace linalg {

// det(A) for A [..., n, n]. Its gradient at a singular matrix is the cofactor matrix
// (through the SVD); elsewhere it is g conj(det) A^-H.
template <class T, class D>
Tensor<T, D> det(const Tensor<T, D>& A) {
  auto [r, batch] = detail::la::batched(A, "linalg.det", [](const Tensor<T, D>& a) { return detail::la::det3(a); });
  return detail::la::unbatch(r, batch);
}

// {sign, log|det|}; sign is complex for complex A, 0 (with logabsdet = -inf) if A is singular.
template <class T, class D>
SlogdetResult<T, D> slogdet(const Tensor<T, D>& A) {
  using namespace detail::la;
  auto [r, batch] = batched(A, "linalg.slogdet", [](const Tensor<T, D>& a) { return logdet3(a); });
  auto [L, sign] = r;
  if constexpr (is_complex_v<T>) {
    // sign = exp(i arg det): differentiable through the imaginary part of log det
    Tensor<T, D> s(where(eq(abs(sign), 0), 0, exp(imag(L) * T(0, 1))));
    return {unbatch(s, batch), unbatch(real_part(L), batch)};
  } else {
    return {unbatch(sign, batch), unbatch(L, batch)};
  }
}

// A^-1; raises for an exactly singular matrix.
template <class T, class D>
Tensor<T, D> inv(const Tensor<T, D>& A) {
  auto [r, batch] = detail::la::batched(A, "linalg.inv", [](const Tensor<T, D>& a) { return detail::la::inv3(a, "linalg.inv"); });
  return detail::la::unbatch(r, batch);
}

namespace detail_solve {
// Solves op(A) X = B (left) or X op(A) = B (right) with B a batch of vectors or matrices,
// batch dims broadcast. `kind` says which part of A is read.
template <class T, class D>
Tensor<T, D> solve_any(const Tensor<T, D>& A, const Tensor<T, D>& B, bool left, detail::la::Kind kind, const char* fn) {
  using namespace detail::la;
  check_types<T, D>(fn);
  check_square(A.sizes(), fn);
  int64_t n = A.size(-1);
  // B is a (batch of) vector(s) if it is 1-d or has A's shape without its last dim
  bool vec = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.sizes() == batch_of(A.sizes(), 1));
  REEL_CHECK(B.dim() >= 1, value_error, fn, ": B must have at least 1 dimension, got shape ", B.sizes());
  Tensor<T, D> Bm = vec ? (left ? B.unsqueeze(-1) : B.unsqueeze(-2)) : B;
  REEL_CHECK(Bm.dim() >= 2, value_error, fn, ": B must have at least 2 dimensions or be a vector, got shape ", B.sizes());
  int64_t bn = left ? Bm.size(-2) : Bm.size(-1);
  REEL_CHECK(bn == n, value_error, fn, ": incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B",
             " (", A.sizes(), " and ", B.sizes(), ")");
  Shape ba = batch_of(A.sizes()), bb = batch_of(Bm.sizes());
  Shape batch;
  try {
    batch = detail::broadcast_shapes(ba, bb);
  } catch (const error&) {
    raise<value_error>(fn, ": the batch dimensions of A ", A.sizes(), " and B ", B.sizes(), " do not broadcast");
  }
  int64_t nb = detail::numel_of(batch);
  int64_t k = left ? Bm.size(-1) : Bm.size(-2);
  Tensor<T, D> A3 = A.expand(with_tail(batch, {n, n})).reshape({nb, n, n});
  Tensor<T, D> B3 = Bm.expand(with_tail(batch, {left ? n : k, left ? k : n})).reshape({nb, left ? n : k, left ? k : n});
  Tensor<T, D> X;
  if (left) {
    X = solve3(A3, B3, kind, fn);
  } else {  // X A = B  <=>  A^T X^T = B^T (transposing swaps the triangles, as the adjoint does)
    X = solve3(A3.mT(), B3.mT(), adjoint_kind(kind), fn).mT();
  }
  Shape out = batch;
  if (vec) {
    out.push_back(n);
  } else {
    out.push_back(left ? n : k);
    out.push_back(left ? k : n);
  }
  return X.reshape(out);
}
}  // namespace detail_solve

// X with A X = B (left) or X A = B (right). B may be a vector or a batch of vectors
// ([..., n]) or of matrices; batch dims broadcast. Raises for an exactly singular A.
template <class T, class D>
Tensor<T, D> solve(const Tensor<T, D>& A, const Tensor<T, D>& B, bool left = true) {
  return detail_solve::solve_any(A, B, left, detail::la::Kind::general, "linalg.solve");
}
// X with A X = B (left) or X A = B, reading only the upper or lower triangle of A.
template <class T, class D>
Tensor<T, D> solve_triangular(const Tensor<T, D>& A, const Tensor<T, D>& B, bool upper, bool left = true) {
  REEL_CHECK(B.dim() >= 2, value_error, "linalg.solve_triangular: B must have at least 2 dimensions, got shape ", B.sizes());
  return detail_solve::solve_any(A, B, left, upper ? detail::la::Kind::upper : detail::la::Kind::lower,
                                 "linalg.solve_triangular");
}

// L (lower) with A = L L^H, reading A's lower triangle; U = L^H if upper. The derivatives
// treat A as Hermitian (perturbations dA are Hermitian), as PyTorch does.
template <class T, class D>
Tensor<T, D> cholesky(const Tensor<T, D>& A, bool upper = false) {
  auto [r, batch] = detail::la::batched(A, "linalg.cholesky", [](const Tensor<T, D>& a) { return detail::la::cholesky3(a); });
  auto L = detail::la::unbatch(r, batch);
  return upper ? detail::la::mH(L) : L;
}

// Eigenvalues (ascending) and orthonormal eigenvectors of Hermitian matrices, reading the
// lower triangle. Gradients assume distinct eigenvalues (they divide by their differences)
// and, for complex input, a loss that does not depend on each eigenvector's phase (the
// eigenvectors are defined up to e^{i phi} each). Unlike PyTorch, that last condition is not
// checked: with higher-order derivatives, V's cotangent reaches several nodes, and only
// their sum could be checked.
template <class T, class D>
EighResult<T, D> eigh(const Tensor<T, D>& A) {
  using namespace detail::la;
  auto [r, batch] = batched(A, "linalg.eigh", [](const Tensor<T, D>& a) { return eigh3(a); });
  return {unbatch(real_part(r.first), batch), unbatch(r.second, batch)};
}

// exp(A) through Taylor polynomials with scaling and squaring (see detail::la::taylor_exp).
template <class T, class D>
Tensor<T, D> matrix_exp(const Tensor<T, D>& A) {
  auto [r, batch] = detail::la::batched(A, "linalg.matrix_exp", [](const Tensor<T, D>& a) { return detail::la::matrix_exp3(a); });
  return detail::la::unbatch(r, batch);
}

}  // namespace linalg
}  // namespace reel

// The linalg ops for float and double, compiled once for reel::runtime (src/instantiate.cpp.in,
// part linalg; see reel/runtime/instantiate.hpp; not with -DREEL_RUNTIME_LINALG=OFF, which defines
// REEL_RUNTIME_NO_LINALG). Complex linalg stays with the program (its derivative rules make a
// large object: the four types took 226 s to compile at -O0).
#define REEL_INSTANTIATE_LINALG(X, T)                                                                      \
  X(Tensor<T, CPU> linalg::det<T, CPU>(const Tensor<T, CPU>&))                                             \
  X(linalg::SlogdetResult<T, CPU> linalg::slogdet<T, CPU>(const Tensor<T, CPU>&))                          \
  X(Tensor<T, CPU> linalg::inv<T, CPU>(const Tensor<T, CPU>&))                                             \
  X(Tensor<T, CPU> linalg::solve<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&, bool))              \
  X(Tensor<T, CPU> linalg::solve_triangular<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&, bool, bool)) \
  X(Tensor<T, CPU> linalg::cholesky<T, CPU>(const Tensor<T, CPU>&, bool))                                  \
  X(linalg::EighResult<T, CPU> linalg::eigh<T, CPU>(const Tensor<T, CPU>&))                                \
  X(Tensor<T, CPU> linalg::matrix_exp<T, CPU>(const Tensor<T, CPU>&))
#if defined(REEL_COMPILED_LIB) && !defined(REEL_INSTANTIATING) && !defined(REEL_RUNTIME_NO_LINALG)
namespace reel::inline REEL_ABI {
REEL_INSTANTIATE_LINALG(REEL_EXTERN_TEMPLATE, float)
REEL_INSTANTIATE_LINALG(REEL_EXTERN_TEMPLATE, double)
}  // namespace reel::inline REEL_ABI
#endif
