// Every differentiable core op, checked in all four modes (reverse, reverse-over-reverse,
// forward, forward-over-reverse) against central finite differences by one check_ad line.
// Points are chosen away from kinks (relu at 0, ties of max/min, |x| at 0).
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;
using autograd::check_ad;
using Td = Tensor<double>;
using V = std::vector<Td>;
using Tc = Tensor<std::complex<double>>;
using Vc = std::vector<Tc>;

namespace {
Td a23() { return tensor<double>({{0.3, -0.7, 1.1}, {0.9, -1.4, 0.45}}); }
Td b23() { return tensor<double>({{1.2, 0.5, -0.8}, {-0.35, 0.75, 1.6}}); }
Td pos23() { return tensor<double>({{0.3, 0.7, 1.1}, {1.9, 2.4, 0.55}}); }
Td row3() { return tensor<double>({0.4, -1.3, 0.8}); }
}  // namespace

#define AD1(EXPR, X) check_ad([](const V& v) -> Td { const Td& x = v[0]; return EXPR; }, V{X})
#define AD2(EXPR, X, Y) check_ad([](const V& v) -> Td { const Td& x = v[0]; const Td& y = v[1]; return EXPR; }, V{X, Y})

TEST_CASE("check_ad: unary elementwise ops") {
  AD1(neg(x), a23());
  AD1(exp(x), a23());
  AD1(log(x), pos23());
  AD1(log1p(x), pos23());
  AD1(expm1(x), a23());
  AD1(sqrt(x), pos23());
  AD1(rsqrt(x), pos23());
  AD1(sin(x), a23());
  AD1(cos(x), a23());
  AD1(tan(x), a23());
  AD1(tanh(x), a23());
  AD1(sigmoid(x), a23());
  AD1(reciprocal(x), a23());
  AD1(square(x), a23());
  AD1(relu(x), a23());
  AD1(abs(x), a23());
  AD1(erf(x), a23());
  AD1(nn::functional::gelu(x), a23());
  AD1(nn::functional::gelu(x, true), a23());
  AD1(nn::functional::hardtanh(x), a23());
  AD1(nn::functional::softplus(x), a23());
  AD1(nn::functional::softplus(x, 2.0, 1.0), a23());
  AD1(nn::functional::elu(x, 0.7), a23());
  AD1(nn::functional::selu(x), a23());
  AD1(nn::functional::leaky_relu(x, 0.2), a23());
  AD1(nn::functional::silu(x), a23());
  AD1(clamp(x, -0.5, 1.0), a23());
  AD1(clamp_min(x, 0.1), a23());
  AD1(clamp_max(x, 0.1), a23());
  AD1(nan_to_num(x), a23());
  AD1(x.to<float>().to<double>() * 0 + x, a23());
  AD1(sin(x) * exp(x), a23());
}

TEST_CASE("check_ad: binary elementwise ops and broadcasting") {
  AD2(x + y, a23(), b23());
  AD2(x - y, a23(), b23());
  AD2(x * y, a23(), b23());
  AD2(x / y, a23(), b23());
  AD2(pow(x, y), pos23(), b23());
  AD2(maximum(x, y), a23(), b23());
  AD2(minimum(x, y), a23(), b23());
  AD2(fmax(x, y), a23(), b23());
  AD2(fmin(x, y), a23(), b23());
  AD2(where(gt(x, y), x * y, x - y), a23(), b23());
  AD2(x * y + sin(x) / (y * y + 1), a23(), row3());      // [2,3] with [3]
  AD2(x * y, a23().select(1, 0).unsqueeze(1), row3());  // [2,1] with [3]
  AD1(x * 2.5 + 1.0, a23());
  AD1(pow(x, 3.0), a23());
  AD1(2.0 / x, a23());
}

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

// Every op of the op lists (reel/expr/functions.hpp), checked from the lists themselves: an op added
// there gets these checks with no line of its own. Real inputs inside every op's domain, away
// from integers, 1/2 and ties (floor, ceil and round have derivative 0 there); complex inputs
// for the ops the lists mark as defined for complex tensors (a real result is checked through
// cast<complex>). A bool result (predicates, comparisons) has no derivative: such ops are
// checked by their in-place form where they have one.
namespace list_checks {
using C = std::complex<double>;
Td x0() { return tensor<double>({{0.3, 0.7, 1.1}, {0.45, 0.85, 0.15}}); }
Td y0() { return tensor<double>({{1.2, 0.55, 0.8}, {0.35, 0.75, 1.6}}); }
Tc z0() { return tensor<C>({C(0.3, -0.8), C(1.1, 0.4), C(-0.6, 0.9)}); }
Tc w0() { return tensor<C>({C(-0.2, 0.5), C(0.7, -1.2), C(0.25, 0.35)}); }
// check_ad of f on the inputs when f's result has a derivative; returns whether it checked.
template <class F, class X>
bool check_listed(F f, const std::vector<X>& in) {
  using R = detail::value_t<decltype(f(in))>;
  if constexpr (std::is_same_v<R, bool>) {
    return false;
  } else {
    check_ad([f](const std::vector<X>& v) -> X { return cast<detail::value_t<X>>(f(v)); }, in);
    return true;
  }
}
template <bool Cplx, class F>
int check_listed_complex(F f, std::vector<Tc> in) {
  if constexpr (Cplx) return check_listed(f, in) ? 1 : 0;
  return 0;
}
}  // namespace list_checks

TEST_CASE("check_ad: every op of REEL_UNARY_OPS and REEL_BINARY_OPS, real and complex; in-place forms") {
  using namespace list_checks;
  int real_checked = 0, complex_checked = 0;
#define REEL_LIST_INPLACE_0(NAME)
#define REEL_LIST_INPLACE_1(NAME)                             \
  {                                                           \
    Td y = x0();                                              \
    NAME##_(y);                                               \
    CHECK(y.to_vector() == Td(NAME(x0())).to_vector());       \
  }
#define REEL_LIST_UNARY(NAME, OP, INPLACE, CPLX)                                                              \
  {                                                                                                           \
    CAPTURE(#NAME);                                                                                           \
    real_checked += check_listed([](const auto& v) { return NAME(v[0]); }, V{x0()});                         \
    complex_checked += check_listed_complex<CPLX>([](const auto& v) { return NAME(v[0]); }, Vc{z0()});       \
    REEL_LIST_INPLACE_##INPLACE(NAME)                                                                         \
  }
#define REEL_LIST_BINARY(NAME, OP, CPLX)                                                                      \
  {                                                                                                           \
    CAPTURE(#NAME);                                                                                           \
    real_checked += check_listed([](const auto& v) { return NAME(v[0], v[1]); }, V{x0(), y0()});             \
    complex_checked += check_listed_complex<CPLX>([](const auto& v) { return NAME(v[0], v[1]); }, Vc{z0(), w0()}); \
  }
  REEL_UNARY_OPS(REEL_LIST_UNARY)
  REEL_BINARY_OPS(REEL_LIST_BINARY)
#undef REEL_LIST_UNARY
#undef REEL_LIST_BINARY
#undef REEL_LIST_INPLACE_0
#undef REEL_LIST_INPLACE_1
  CHECK(real_checked == 43);     // the lists' ops with a real result (all but the bool-valued ones)
  CHECK(complex_checked == 22);  // the same for the complex ops
}

TEST_CASE("check_ad reports a wrong derivative") {
  // a hook that doubles the gradient makes the reverse mode wrong: the check must say so
  auto wrong = [](const V& v) -> Td {
    Td y = v[0] * v[0];
    if (y.requires_grad()) y.register_hook([](const Td& g) { return Td(g * 2.0); });
    return y;
  };
  CHECK_THROWS_WITH_AS(check_ad(wrong, V{a23()}), doctest::Contains("reverse mode"), error);
}

// Bundled with other suites (tests/CMakeLists.txt): the macros end with the file.
#undef AD1
#undef AD2
