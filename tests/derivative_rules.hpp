#pragma once
// Checks of an op's derivative rule dK(out, args...) against central finite differences of the
// op's own primal, in double (test_derivatives*.cpp).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

namespace derivative_rules {
using namespace reel;
template <class R>
inline std::vector<double> values(const R& r, int64_t n) {
  if constexpr (is_cpp_scalar_v<R>) {
    return std::vector<double>(n, static_cast<double>(r));
  } else {
    Tensor<double> t = cast<double>(r);
    return Tensor<double>(t.expand({n})).contiguous().to_vector();
  }
}

// d/dx_k op(args...) by central differences, elementwise.
template <class Op, size_t K, class... Args>
std::vector<double> numeric(const Op& op, std::vector<Tensor<double>> args) {
  const double h = 1e-6;
  auto plus = args, minus = args;
  plus[K] = Tensor<double>(args[K] + h);
  minus[K] = Tensor<double>(args[K] - h);
  auto call = [&](const std::vector<Tensor<double>>& a) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Tensor<double>(cast<double>(make_expr(op, a[I]...))).to_vector();
    }(std::make_index_sequence<sizeof...(Args)>{});
  };
  auto fp = call(plus), fm = call(minus);
  std::vector<double> d(fp.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = (fp[i] - fm[i]) / (2 * h);
  return d;
}

template <size_t K, class Op, class... A>
void check_rule(const Op& op, const A&... a) {
  std::vector<Tensor<double>> args{a...};
  auto out = Tensor<double>(cast<double>(make_expr(op, a...)));
  int64_t n = out.numel();
  std::vector<double> analytic;
  if constexpr (K == 0) analytic = values(op.d0(out, a...), n);
  if constexpr (K == 1) analytic = values(op.d1(out, a...), n);
  if constexpr (K == 2) analytic = values(op.d2(out, a...), n);
  auto fd = numeric<Op, K, A...>(op, args);
  REQUIRE(analytic.size() == fd.size());
  for (size_t i = 0; i < fd.size(); ++i) CHECK(analytic[i] == doctest::Approx(fd[i]).epsilon(1e-6).scale(1));
}
}  // namespace derivative_rules
