#pragma once
// Element-wise comparison of a double tensor with expected values (shared by test files).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

inline void check_close(const reel::Tensor<double>& a, const std::vector<double>& b, double tol = 1e-12) {
  auto v = a.contiguous().to_vector();
  REQUIRE(v.size() == b.size());
  for (size_t i = 0; i < b.size(); ++i) CHECK(v[i] == doctest::Approx(b[i]).epsilon(tol).scale(1));
}
