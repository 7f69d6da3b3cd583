// AnyTensor and Eigen interop.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("AnyTensor: dtype, checked as<T>()") {
  AnyTensor a = tensor<int16_t>({1, 2, 3});
  CHECK(a.dtype() == ScalarType::Int16);
  CHECK(a.sizes() == Shape{3});
  CHECK(a.is<int16_t>());
  auto t = a.as<int16_t>();
  CHECK(t.to_vector() == std::vector<int16_t>{1, 2, 3});
  CHECK_THROWS_WITH_AS(a.as<float>(), doctest::Contains("torch.int16"), type_error);
  static_assert(scalar_type_v<uint32_t> == ScalarType::UInt32);
  static_assert(std::is_same_v<type_of<ScalarType::BFloat16>, bfloat16>);
  static_assert(std::is_same_v<type_of<ScalarType::Float8_e5m2>, float8_e5m2>);
  CHECK(dtype_name(ScalarType::ComplexDouble) == "torch.complex128");
  CHECK(element_size(ScalarType::Float8_e4m3fn) == 1);
}

TEST_CASE("AnyTensor: ordering ops throw type_error for complex") {
  AnyTensor z = from_vector<std::complex<float>>({{1, 2}, {3, 4}});
  CHECK_THROWS_WITH_AS(sort(z), doctest::Contains("no order"), type_error);
  CHECK_THROWS_AS(topk(z, 1), type_error);
  CHECK_THROWS_AS(max(z), type_error);
  CHECK_THROWS_AS(min(z), type_error);
  CHECK_THROWS_AS(argmax(z), type_error);
  CHECK_THROWS_AS(argmin(z), type_error);
  CHECK_THROWS_AS(amax(z), type_error);
  CHECK_THROWS_AS(amin(z), type_error);
  CHECK_THROWS_AS(maximum(z, z), type_error);
  CHECK_THROWS_AS(minimum(z, z), type_error);
  CHECK_THROWS_AS(fmax(z, z), type_error);
  CHECK_THROWS_AS(fmin(z, z), type_error);
  CHECK_THROWS_AS(clamp(z, 0, 1), type_error);
  AnyTensor f = tensor<float>({3, 1, 2});
  CHECK(sort(f).as<float>().to_vector() == std::vector<float>{1, 2, 3});
  CHECK(maximum(f, f).as<float>().to_vector() == std::vector<float>{3, 1, 2});
  CHECK(argmax(f).as<int64_t>().item() == 0);
}

TEST_CASE("histc with an AnyTensor out checks the dtype") {
  AnyTensor out = empty<double>({2});
  CHECK_THROWS_WITH_AS(histc(tensor<float>({1, 2}), 2, 0, 2, out), doctest::Contains("torch.float64"), type_error);
  AnyTensor ok = empty<float>({2});
  histc(tensor<float>({0.5, 1.5}), 2, 0, 2, ok);
  CHECK(ok.as<float>().to_vector() == std::vector<float>{1, 1});
}

TEST_CASE("Eigen interop: zero-copy maps and tensors from Eigen") {
  auto t = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto m = as_eigen_matrix(t);
  CHECK(m.rows() == 2);
  CHECK(m(1, 0) == 4);
  m(0, 0) = 10;  // writes through to the tensor
  CHECK(t.to_vector()[0] == 10);
  as_eigen_array(t) *= 2;
  CHECK(t.to_vector()[5] == 12);
  Eigen::MatrixXf e(2, 2);
  e << 1, 2, 3, 4;
  auto fe = from_eigen(e);
  CHECK(fe.sizes() == Shape{2, 2});
  CHECK(fe.to_vector() == std::vector<float>{1, 2, 3, 4});
  Eigen::VectorXd v(3);
  v << 1, 2, 3;
  CHECK(from_eigen(v).sizes() == Shape{3});
  CHECK_THROWS_AS(as_eigen_matrix(t.mT()), value_error);
}
