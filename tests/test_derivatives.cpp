// Each op's single definition carries its derivative rules (used by autograd). Check every
// rule against central finite differences of the op's own primal, in double.
#include <doctest/doctest.h>

#include <reel/reel.hpp>

using namespace reel;

namespace {
template <class R>
std::vector<double> values(const R& r, int64_t n) {
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
}  // namespace

TEST_CASE("unary derivative rules match finite differences") {
  auto x = tensor<double>({0.3, 0.7, 1.1, 1.9, 2.4});
  auto s = tensor<double>({-1.3, -0.4, 0.2, 0.9, 1.7});  // signed, away from kinks
  check_rule<0>(ExpOp{}, x);
  check_rule<0>(LogOp{}, x);
  check_rule<0>(Log1pOp{}, x);
  check_rule<0>(Expm1Op{}, s);
  check_rule<0>(SqrtOp{}, x);
  check_rule<0>(RsqrtOp{}, x);
  check_rule<0>(SinOp{}, s);
  check_rule<0>(CosOp{}, s);
  check_rule<0>(TanOp{}, s);
  check_rule<0>(TanhOp{}, s);
  check_rule<0>(SigmoidOp{}, s);
  check_rule<0>(ReciprocalOp{}, x);
  check_rule<0>(SquareOp{}, s);
  check_rule<0>(NegOp{}, s);
  check_rule<0>(ReluOp{}, s);
  check_rule<0>(AbsOp{}, s);
  check_rule<0>(ErfOp{}, s);
  check_rule<0>(SignOp{}, s);
  check_rule<0>(FloorOp{}, s);
  check_rule<0>(ClampOp<double>(-1.0, 1.0, "clamp"), s);
  check_rule<0>(NanToNumOp<double>{{}, 0, 1, -1}, s);
}

TEST_CASE("binary and ternary derivative rules match finite differences") {
  auto a = tensor<double>({0.3, 0.7, 1.1, 1.9, 2.4});
  auto b = tensor<double>({1.2, 0.2, -0.7, 2.5, 1.3});
  check_rule<0>(AddOp{}, a, b);
  check_rule<1>(AddOp{}, a, b);
  check_rule<0>(SubOp{}, a, b);
  check_rule<1>(SubOp{}, a, b);
  check_rule<0>(MulOp{}, a, b);
  check_rule<1>(MulOp{}, a, b);
  check_rule<0>(DivOp{}, a, b);
  check_rule<1>(DivOp{}, a, b);
  check_rule<0>(PowOp{}, a, b);
  check_rule<1>(PowOp{}, a, b);
  check_rule<0>(MaximumOp{}, a, b);
  check_rule<1>(MaximumOp{}, a, b);
  check_rule<0>(MinimumOp{}, a, b);
  check_rule<1>(MinimumOp{}, a, b);
  check_rule<0>(FmaxOp{}, a, b);
  check_rule<1>(FminOp{}, a, b);
  auto c = Tensor<double>(cast<double>(a > 1));
  check_rule<1>(WhereOp{}, c, a, b);
  check_rule<2>(WhereOp{}, c, a, b);
}

TEST_CASE("rules at the special points the seed names") {
  // ties split the gradient in half
  auto t = tensor<double>({2, 2});
  CHECK(values(MaximumOp{}.d0(t, t, t), 2) == std::vector<double>{0.5, 0.5});
  CHECK(values(FminOp{}.d1(t, t, t), 2) == std::vector<double>{0.5, 0.5});
  // fmin/fmax: the whole gradient to the non-NaN input, to the first when both are NaN
  auto x = tensor<double>({1, NAN, 3, NAN});
  auto y = tensor<double>({2, 2, NAN, NAN});
  CHECK(values(FminOp{}.d0(x, x, y), 4) == std::vector<double>{1, 0, 1, 1});
  CHECK(values(FminOp{}.d1(x, x, y), 4) == std::vector<double>{0, 1, 0, 0});
  CHECK(values(FmaxOp{}.d0(x, x, y), 4) == std::vector<double>{0, 0, 1, 1});
  CHECK(values(FmaxOp{}.d1(x, x, y), 4) == std::vector<double>{1, 1, 0, 0});
  // x^y at x == 0: d/dy is taken as 0 (the limit), not NaN
  auto z = tensor<double>({0.0});
  auto e = tensor<double>({2.0});
  CHECK(values(PowOp{}.d1(Tensor<double>(pow(z, e)), z, e), 1) == std::vector<double>{0});
}
