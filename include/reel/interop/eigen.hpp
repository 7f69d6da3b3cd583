#pragma once
// Zero-copy views of tensors as Eigen objects, and tensors from Eigen objects.
#include "../core/config.hpp"
#include "../ops/factories.hpp"

namespace reel::inline REEL_ABI {

// A row-major Eigen::Map over a contiguous 2-d (or 1-d: one row) CPU tensor's storage.
template <class T>
auto as_eigen_matrix(const Tensor<T, CPU>& t) {
  REEL_CHECK(t.is_contiguous(), value_error, "as_eigen_matrix: the tensor must be contiguous (call .contiguous())");
  REEL_CHECK(t.dim() == 1 || t.dim() == 2, value_error, "as_eigen_matrix: expected a 1-D or 2-D tensor, got ", t.sizes());
  int64_t r = t.dim() == 2 ? t.size(0) : 1, c = t.dim() == 2 ? t.size(1) : t.size(0);
  return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(t.mutable_data_ptr(), r, c);
}
// A flat Eigen::Map<Array> over all elements of a contiguous CPU tensor.
template <class T>
auto as_eigen_array(const Tensor<T, CPU>& t) {
  REEL_CHECK(t.is_contiguous(), value_error, "as_eigen_array: the tensor must be contiguous (call .contiguous())");
  return Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(t.mutable_data_ptr(), t.numel());
}

// Copies an Eigen matrix or array into a new tensor: compile-time vectors give 1-d tensors,
// everything else 2-d in row-major order.
template <class Derived>
auto from_eigen(const Eigen::DenseBase<Derived>& m) {
  using T = typename Derived::Scalar;
  constexpr bool vec = Derived::ColsAtCompileTime == 1 || Derived::RowsAtCompileTime == 1;
  Shape s = vec ? Shape{static_cast<int64_t>(m.size())} : Shape{static_cast<int64_t>(m.rows()), static_cast<int64_t>(m.cols())};
  auto t = empty<T>(s);
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(t.data_ptr(), m.rows(), m.cols()) = m.derived().matrix();
  return t;
}

}  // namespace reel
