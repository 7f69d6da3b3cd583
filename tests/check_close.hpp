#pragma once
// Element-wise comparisons of double tensors (shared by test files).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <reel/reel.hpp>

inline void check_close(const reel::Tensor<double>& a, const std::vector<double>& b, double tol = 1e-12) {
  auto v = a.contiguous().to_vector();
  REQUIRE(v.size() == b.size());
  for (size_t i = 0; i < b.size(); ++i) CHECK(v[i] == doctest::Approx(b[i]).epsilon(tol).scale(1));
}

// Tensors of the same shape within tol relative to the larger of 1 and max |b|, element by
// element.
inline void check_near(const reel::Tensor<double>& a, const reel::Tensor<double>& b, double tol = 1e-12) {
  REQUIRE(a.sizes() == b.sizes());
  auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  double scale = 1;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) <= tol * scale);
}
