// autograd::Function: custom ops with a backward and a forward rule, checked against the
// same function built from reel's ops and against finite differences (gradcheck), to second
// order in reverse, forward and mixed modes.
#include <doctest/doctest.h>

#include <any>
#include <cmath>

#include <reel/reel.hpp>

#include "check_close.hpp"

using namespace reel;
using Td = Tensor<double>;
using V = std::vector<Td>;
namespace fad = autograd::forward_ad;
namespace F = autograd::functional;
using autograd::FunctionCtx;

// exp, saving its output (the rules read y = exp(x), which differentiates again)
struct MyExp : autograd::Function<MyExp> {
  static constexpr const char* name = "MyExpBackward";
  template <class T, class D>
  static Tensor<T, D> forward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& x) {
    Tensor<T, D> y = exp(x);
    ctx.save_for_backward({y});
    return y;
  }
  template <class T, class D>
  static std::vector<Tensor<T, D>> backward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& g) {
    return {g * ctx.saved_tensors()[0]};
  }
  template <class T, class D>
  static Tensor<T, D> jvp(FunctionCtx<T, D>& ctx, const std::vector<Tensor<T, D>>& t) {
    return t[0] * ctx.saved_tensors()[0];
  }
};

// alpha * a * b + sin(a): two inputs saved, a number kept in saved_data
struct MulSin : autograd::Function<MulSin> {
  template <class T, class D>
  static auto forward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& a, double alpha, const Tensor<T, D>& b) {
    ctx.save_for_backward({a, b});
    ctx.saved_data["alpha"] = alpha;
    return a * b * alpha + sin(a);  // an expression: apply evaluates it
  }
  template <class T, class D>
  static std::vector<Tensor<T, D>> backward(FunctionCtx<T, D>& ctx, const Tensor<T, D>& g) {
    auto s = ctx.saved_tensors();
    double alpha = std::any_cast<double>(ctx.saved_data.at("alpha"));
    Tensor<T, D> ga, gb;
    if (ctx.needs_input_grad(0)) ga = g * (s[1] * alpha + cos(s[0]));
    if (ctx.needs_input_grad(1)) gb = g * s[0] * alpha;
    return {ga, gb};
  }
  template <class T, class D>
  static Tensor<T, D> jvp(FunctionCtx<T, D>& ctx, const std::vector<Tensor<T, D>>& t) {
    auto s = ctx.saved_tensors();
    double alpha = std::any_cast<double>(ctx.saved_data.at("alpha"));
    return t[0] * (s[1] * alpha + cos(s[0])) + t[1] * s[0] * alpha;
  }
};

// no forward rule; and one with a wrong number of gradients
struct NoJvp : autograd::Function<NoJvp> {
  template <class T, class D>
  static Tensor<T, D> forward(FunctionCtx<T, D>&, const Tensor<T, D>& x) { return x * x; }
  template <class T, class D>
  static std::vector<Tensor<T, D>> backward(FunctionCtx<T, D>&, const Tensor<T, D>& g) { return {g, g}; }
};

TEST_CASE("autograd::Function: gradients to second order equal the built-in ops'") {
  Td x = tensor<double>({-1.5, 0.25, 2.0});
  CHECK(autograd::gradcheck([](const V& v) { return MyExp::apply(v[0]); }, V{x}));
  CHECK(autograd::gradgradcheck([](const V& v) { return MyExp::apply(v[0]); }, V{x}));
  auto f = [](const V& v) { return MulSin::apply(v[0], 0.7, v[1]); };
  Td a = tensor<double>({0.3, -1.2, 2.5}), b = tensor<double>({1.5, 0.5, -2.0});
  CHECK(autograd::gradcheck(f, V{a, b}));
  CHECK(autograd::gradgradcheck(f, V{a, b}));
  // against the same function from reel's ops: grad and the Hessian of a scalar
  auto builtin = [](const V& v) { return Td(v[0] * v[1] * 0.7 + sin(v[0])); };
  auto scalar = [&](auto g) { return [g](const V& v) { return Td(sum(g(v) * g(v))); }; };
  auto Hc = F::hessian(scalar(f), V{a, b});
  auto Hb = F::hessian(scalar(builtin), V{a, b});
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) check_close(Hc[i][j], Hb[i][j].to_vector(), 1e-12);
  // expressions as arguments
  Td xr = x.clone().requires_grad_();
  Td y = MyExp::apply(xr * 2.0);
  y.sum().backward();
  check_close(xr.grad(), {2 * std::exp(-3.0), 2 * std::exp(0.5), 2 * std::exp(4.0)});
}

TEST_CASE("autograd::Function: forward mode and forward-over-reverse use jvp") {
  Td a = tensor<double>({0.3, -1.2}), b = tensor<double>({1.5, 0.5});
  Td ta = tensor<double>({1.0, -2.0}), tb = tensor<double>({0.5, 3.0});
  auto f = [](const V& v) { return MulSin::apply(v[0], 0.7, v[1]); };
  auto builtin = [](const V& v) { return Td(v[0] * v[1] * 0.7 + sin(v[0])); };
  auto [o1, t1] = F::jvp(f, V{a, b}, V{ta, tb});
  auto [o2, t2] = F::jvp(builtin, V{a, b}, V{ta, tb});
  check_close(o1, o2.to_vector(), 1e-14);
  check_close(t1, t2.to_vector(), 1e-14);
  {
    fad::dual_level level;
    auto x = fad::make_dual(tensor<double>({0.5, 1.0}), tensor<double>({1.0, 2.0}));
    auto t = fad::unpack_dual(MyExp::apply(x)).tangent;
    check_close(t, {std::exp(0.5), 2 * std::exp(1.0)});
    CHECK_THROWS_AS(NoJvp::apply(x), not_implemented_error);
  }
  // Hessian-vector products (forward-over-reverse) of sum(exp(x)^2): 4 exp(2x) v
  auto g = [](const V& v) { return Td(sum(MyExp::apply(v[0]) * MyExp::apply(v[0]))); };
  auto [o3, hv] = F::hvp(g, V{tensor<double>({0.1, -0.4})}, V{tensor<double>({3.0, 4.0})});
  check_close(hv[0], {12 * std::exp(0.2), 16 * std::exp(-0.8)}, 1e-12);
}

TEST_CASE("autograd::Function: misuse is reported") {
  Td x = tensor<double>({1.0, 2.0}).requires_grad_();
  // backward must return one gradient per tensor input
  Td y = NoJvp::apply(x);
  CHECK_THROWS_WITH_AS(y.sum().backward(),
                       doctest::Contains("function CustomFunctionBackward returned an incorrect number of gradients "
                                         "(expected 1, got 2)"),
                       error);
  // a saved tensor changed in place before backward
  Td a = tensor<double>({1.0, 2.0}).requires_grad_();
  Td b = tensor<double>({3.0, 4.0});
  Td z = MulSin::apply(a, 2.0, b);
  b.add_(1.0);
  CHECK_THROWS_WITH_AS(z.sum().backward(), doctest::Contains("modified by an inplace operation"), error);
  // an output that is saved, changed in place
  Td e = MyExp::apply(x);
  e.mul_(2.0);
  CHECK_THROWS_WITH_AS(e.sum().backward(), doctest::Contains("saved by MyExpBackward"), error);
  // without inputs that need gradients nothing is recorded
  Td c = MyExp::apply(tensor<double>({0.0}));
  CHECK_FALSE(c.requires_grad());
}
