// Linear algebra costs (issue 4), 256 x 256 double, measured in one process (medians):
//   1. linalg::solve(A, B) (B 256 x 256 and a vector) and linalg::det(A) against calling
//      Eigen directly (PartialPivLU, as reel does): Eigen time / reel time (>= 0.95 wanted);
//   2. det: value + gradient / value (<= 3 wanted);
//   3. logabsdet: Hessian-vector product (autograd::functional::hvp, reverse over reverse)
//      / value (<= 6 wanted).
#include <reel/linalg.hpp>  // (before Eigen: reel includes Eigen with its fast math off)
#include <reel/reel.hpp>

#include <Eigen/LU>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "median_timer.hpp"

using namespace reel;
using Td = Tensor<double>;
using M = Eigen::MatrixXd;

namespace {
using reel_bench::median_seconds;
volatile double sink = 0;
}  // namespace

int main() {
  const int64_t n = 256;
  const int reps = 41, inner = 5;
  Generator gen(3);
  // well conditioned: random plus a multiple of the identity
  Td A = Td(randn<double>({n, n}, gen) + eye<double>(n) * 20.0);
  Td B = randn<double>({n, n}, gen);
  Td b = randn<double>({n}, gen);
  // Eigen operands, column-major as Eigen users hold them
  M Ae = Eigen::Map<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>(A.data_ptr(), n, n);
  M Be = Eigen::Map<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>(B.data_ptr(), n, n);
  Eigen::VectorXd be = Eigen::Map<const Eigen::VectorXd>(b.data_ptr(), n);

  std::printf("%-44s %12s %12s %8s\n", "case (256 x 256 double)", "Eigen (us)", "reel (us)", "ratio");
  auto row = [](const char* name, double base, double ours) {
    std::printf("%-44s %12.1f %12.1f %7.2fx\n", name, base * 1e6, ours * 1e6, base / ours);
  };
  // warm up
  for (int i = 0; i < 3; ++i) {
    sink = sink + linalg::solve(A, B).data_ptr()[0];
    M x = Ae.partialPivLu().solve(Be);
    sink = sink + x(0, 0);
  }
  double e_solve = median_seconds([&] { M x = Ae.partialPivLu().solve(Be); sink = sink + x(0, 0); }, reps, inner);
  double r_solve = median_seconds([&] { sink = sink + linalg::solve(A, B).data_ptr()[0]; }, reps, inner);
  row("solve(A, B), B 256 x 256", e_solve, r_solve);
  double e_solvev = median_seconds([&] { Eigen::VectorXd x = Ae.partialPivLu().solve(be); sink = sink + x(0); }, reps, inner);
  double r_solvev = median_seconds([&] { sink = sink + linalg::solve(A, b).data_ptr()[0]; }, reps, inner);
  row("solve(A, b), b a vector", e_solvev, r_solvev);
  double e_det = median_seconds([&] { sink = sink + Ae.partialPivLu().determinant(); }, reps, inner);
  double r_det = median_seconds([&] { sink = sink + linalg::det(A).item(); }, reps, inner);
  row("det(A)", e_det, r_det);

  // value + gradient / value
  double det_grad = median_seconds(
      [&] {
        Td x = A.detach().requires_grad_();
        Td d = linalg::det(x);
        d.backward();
        sink = sink + x.grad().data_ptr()[0];
      },
      reps, inner);
  std::printf("\n%-44s %12.1f us  (%.2f x value)\n", "det: value + gradient", det_grad * 1e6, det_grad / r_det);

  // hvp of logabsdet / value
  double r_logdet = median_seconds([&] { sink = sink + linalg::slogdet(A).logabsdet.item(); }, reps, inner);
  Td v = randn<double>({n, n}, gen);
  double hvp = median_seconds(
      [&] {
        auto r = autograd::functional::hvp([](const std::vector<Td>& x) { return linalg::slogdet(x[0]).logabsdet; },
                                           std::vector<Td>{A}, std::vector<Td>{v});
        sink = sink + r.grads[0].data_ptr()[0];
      },
      reps, inner);
  std::printf("%-44s %12.1f us\n", "logabsdet: value", r_logdet * 1e6);
  std::printf("%-44s %12.1f us  (%.2f x value)\n", "logabsdet: Hessian-vector product", hvp * 1e6, hvp / r_logdet);
  return 0;
}
