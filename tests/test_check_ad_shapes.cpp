// check_ad (all four modes against central differences) of the reductions, views and
// indexing, the matmul family, softmax and the joins, and of complex inputs in the Wirtinger
// convention (test_check_ad.cpp: the elementwise ops).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

#include "check_ad_points.hpp"

using namespace reel;
using autograd::check_ad;
using Td = Tensor<double>;
using V = std::vector<Td>;
using Tc = Tensor<std::complex<double>>;
using Vc = std::vector<Tc>;
using namespace check_ad_points;

#define AD1(EXPR, X) check_ad([](const V& v) -> Td { const Td& x = v[0]; return EXPR; }, V{X})
#define AD2(EXPR, X, Y) check_ad([](const V& v) -> Td { const Td& x = v[0]; const Td& y = v[1]; return EXPR; }, V{X, Y})

TEST_CASE("check_ad: reductions") {
  AD1(sum(x), a23());
  AD1(sum(x, {1}), a23());
  AD1(sum(x, {0}, true), a23());
  AD1(mean(x), a23());
  AD1(mean(x, {1}, true), a23());
  AD1(prod(x, {1}), a23());
  AD1(prod(x), pos23());
  AD1(amax(x, {1}), a23());
  AD1(amin(x, {0}), a23());
  AD1(max(x), a23());
  AD1(min(x), a23());
  AD1(max(x, 1).values, a23());
  AD1(min(x, 0, true).values, a23());
  AD1(logsumexp(x, 1), a23());
  AD1(norm(x), a23());
  AD1(norm(x, 1.0), a23());
  AD1(norm(x, 3.0, {1}), a23());
  AD1(cumsum(x, 1), a23());
  AD1(cumsum(x, 0), a23());
  AD1(sort(x, 1).values, a23());
  AD1(sort(x, 0, true).values, a23());
  AD1(topk(x, 2, 1).values, a23());
}

TEST_CASE("check_ad: views and indexing") {
  AD1(x.select(1, 2), a23());
  AD1(x[1], a23());
  AD1(x.slice(1, 0, 3, 2), a23());
  AD1(x.narrow(1, 1, 2), a23());
  AD1(x.view({3, 2}), a23());
  AD1(x.reshape({6}), a23());
  AD1(x.flatten(), a23());
  AD1(x.unsqueeze(1), a23());
  AD1(x.unsqueeze(0).squeeze(0), a23());
  AD1(x.transpose(0, 1), a23());
  AD1(x.t(), a23());
  AD1(x.mT(), a23());
  AD1(x.permute({1, 0}), a23());
  AD1(x.unsqueeze(0).expand({4, 2, 3}), a23());
  AD1(x.transpose(0, 1).contiguous(), a23());
  AD1(x.clone(), a23());
  AD1(sin(x.select(0, 1)) * x.select(0, 0), a23());
}

TEST_CASE("check_ad: matmul family") {
  auto a = a23(), b = b23();
  AD2(mm(x, y.t()), a, b);
  AD2(matmul(x, y.t()), a, b);
  AD2(bmm(x.unsqueeze(0), y.t().unsqueeze(0)), a, b);
  AD2(matmul(x.unsqueeze(0).expand({2, 2, 3}), y.t()), a, b);  // batched, broadcasting
  AD2(dot(x[0], y[1]), a, b);
  AD2(mv(x, y[0]), a, b);
  AD2(outer(x[0], y[1]), a, b);
  AD2(nn::functional::linear(x, y), a, b);
  AD2(nn::functional::linear(x, y, y[0].slice(0, 0, 2)), a, b);
  AD2(tanh(matmul(x, x.t())) * y[0][0], a, b);
}

TEST_CASE("check_ad: softmax, log_softmax, cat, stack") {
  AD1(nn::functional::softmax(x, 1), a23());
  AD1(nn::functional::softmax(x, 0), a23());
  AD1(nn::functional::log_softmax(x, 1), a23());
  AD2(cat({x, y}, 0), a23(), b23());
  AD2(cat({x, y}, 1), a23(), b23());
  AD2(stack({x, y}, 1), a23(), b23());
  AD2(stack({Td(sin(x)), Td(y * x)}, 0), a23(), b23());
}

TEST_CASE("check_ad: complex inputs (Wirtinger convention)") {
  using C = std::complex<double>;
  auto z = tensor<C>({C(0.3, -0.8), C(1.1, 0.4), C(-0.6, 0.9)});
  auto w = tensor<C>({C(-0.2, 0.5), C(0.7, -1.2), C(0.25, 0.35)});
#define ADC1(EXPR) check_ad([](const Vc& v) -> Tc { const Tc& x = v[0]; return EXPR; }, Vc{z})
#define ADC2(EXPR) check_ad([](const Vc& v) -> Tc { const Tc& x = v[0]; const Tc& y = v[1]; return EXPR; }, Vc{z, w})
  ADC1(exp(x));
  ADC1(sin(x) * x);
  ADC1(x * x);
  ADC1(reciprocal(x));
  ADC1(conj(x) * x);
  ADC1(cast<C>(abs(x)));
  ADC1(cast<C>(real(x)) * x);
  ADC1(cast<C>(imag(x)));
  ADC1(cast<C>(angle(x)));
  ADC1(sum(x * conj(x)));
  ADC1(cast<C>(square(abs(x))));
  ADC2(x * y + x / y);
  ADC2(matmul(x.unsqueeze(0), y.unsqueeze(1)));
  ADC2(cat({x, y}, 0).reshape({2, 3}).t());
  ADC1(cumsum(x, 0));
#undef ADC1
#undef ADC2
}

// Bundled with other suites (tests/CMakeLists.txt): the macros end with the file.
#undef AD1
#undef AD2
