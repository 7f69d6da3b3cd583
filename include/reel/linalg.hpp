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

// The op families' kernels and rules, each file after those it uses: common, lu, det,
// cholesky, eigh, matrix_exp.
#include "linalg/matrix_exp.hpp"

namespace reel::inline REEL_ABI {

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
// Expressions (`solve(A + I, b)`, evaluated first) and operands of different types.
template <TensorLike A, TensorLike B>
  requires(!same_tensors_v<A, B>)
auto solve(const A& a, const B& b, bool left = true) {
  static_assert(std::is_same_v<detail::value_t<A>, detail::value_t<B>>,
                "reel::linalg::solve: A and B have different element types: convert one (.to<T>() on a tensor, "
                "cast<T>(e) on an expression)");
  static_assert(std::is_same_v<detail::device_t<A>, detail::device_t<B>>, "reel::linalg::solve: A and B are on different devices");
  return solve(detail::materialize(a), detail::materialize(b), left);
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

// The linalg ops for float, double and complex<double>, compiled once for reel::runtime
// (src/instantiate.cpp.in, part linalg; see reel/runtime/instantiate.hpp; not with
// -DREEL_RUNTIME_LINALG=OFF, which defines REEL_RUNTIME_NO_LINALG). complex<double> costs the
// library's build 40-49 s at -O2 and saves each program that uses it about 23 s (a unit calling
// the eight ops with autograd: 32 -> 9 s at -O1); complex<float> linalg stays with the program.
#define REEL_INSTANTIATE_LINALG(X, T)                                                                      \
  X(Tensor<T, CPU> linalg::det<T, CPU>(const Tensor<T, CPU>&))                                             \
  X(linalg::SlogdetResult<T, CPU> linalg::slogdet<T, CPU>(const Tensor<T, CPU>&))                          \
  X(Tensor<T, CPU> linalg::inv<T, CPU>(const Tensor<T, CPU>&))                                             \
  X(Tensor<T, CPU> linalg::solve<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&, bool))              \
  X(Tensor<T, CPU> linalg::solve_triangular<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&, bool, bool)) \
  X(Tensor<T, CPU> linalg::cholesky<T, CPU>(const Tensor<T, CPU>&, bool))                                  \
  X(linalg::EighResult<T, CPU> linalg::eigh<T, CPU>(const Tensor<T, CPU>&))                                \
  X(Tensor<T, CPU> linalg::matrix_exp<T, CPU>(const Tensor<T, CPU>&))
#if defined(REEL_COMPILED_LIB) && !defined(REEL_INSTANTIATING) && !defined(REEL_RUNTIME_NO_LINALG) && \
    !defined(REEL_RUNTIME_NO_INSTANTIATIONS)
namespace reel::inline REEL_ABI {
REEL_INSTANTIATE_LINALG(REEL_EXTERN_TEMPLATE, float)
REEL_INSTANTIATE_LINALG(REEL_EXTERN_TEMPLATE, double)
REEL_INSTANTIATE_LINALG(REEL_EXTERN_TEMPLATE, std::complex<double>)
}  // namespace reel::inline REEL_ABI
#endif
