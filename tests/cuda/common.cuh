#pragma once
// Shared by the CUDA tests: every CUDA result is compared with the CPU implementation on
// random data. Outputs that reel writes into are poisoned first (NaN / a sentinel), so a kernel
// that skips elements cannot pass by leaving zeros from the allocator.
#include <doctest/doctest.h>

#include <cmath>
#include <reel/cuda.hpp>
#include <reel/io/pt.hpp>
#include <sstream>

namespace rt {
using namespace reel;

// Defined in test_autograd_module2.cu (a translation unit of its own: the -rdc test).
template <class D>
Tensor<double, D> second_file_expr(const Tensor<double, D>& x);

inline Generator& gen() {
  static Generator g(20261130);
  return g;
}
template <class T = float>
Tensor<T, CPU> host_randn(Shape s) {
  return randn<float>(std::move(s), gen()).template to<T>();
}
template <class T>
Tensor<T, CUDA> dev(const Tensor<T, CPU>& t) {
  return t.template to_device<CUDA>();
}
template <class T>
Tensor<T, CPU> host(const Tensor<T, CUDA>& t) {
  return t.template to_device<CPU>();
}

// Largest |a - b| / (atol + rtol |b|) over all elements (NaN equal to NaN); <= 1 passes.
template <class T>
double rel_err(const Tensor<T, CPU>& a, const Tensor<T, CPU>& b, double atol, double rtol) {
  REQUIRE(a.sizes() == b.sizes());
  auto va = a.contiguous().to_vector();
  auto vb = b.contiguous().to_vector();
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double x = static_cast<double>(convert<double>(va[i])), y = static_cast<double>(convert<double>(vb[i]));
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (x == y) continue;
    worst = std::max(worst, std::abs(x - y) / (atol + rtol * std::abs(y)));
  }
  return worst;
}
#define CHECK_CLOSE_T(a, b, atol, rtol) CHECK(::rt::rel_err((a), (b), (atol), (rtol)) <= 1.0)

// A GPU is needed to run these tests; without one each case says so and passes nothing.
#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    if (!::reel::gpu::is_available()) {                               \
      MESSAGE("no CUDA device: skipped");                              \
      return;                                                          \
    }                                                                  \
  } while (0)
}  // namespace rt
