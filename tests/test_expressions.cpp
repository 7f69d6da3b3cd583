// Expressions behave like tensors (issue 16): the non-elementwise functions a PyTorch user
// calls take expressions (evaluated once), and an expression offers the Tensor members one
// calls on a result. Each result is compared with the same call on the evaluated tensor.
#include <doctest/doctest.h>

#include <reel/linalg.hpp>
#include <reel/reel.hpp>

using namespace reel;

TEST_CASE("expressions behave like tensors: the functions and members a PyTorch user reaches for") {
  Generator g(5);
  auto A = randn<double>({3, 3}, g), b = randn<double>({3}, g);
  auto I = eye<double>(3);
  // non-elementwise functions take expressions (evaluated once) as well as tensors
  auto A2 = Tensor<double>(A + I * 4.0);
  CHECK(Tensor<double>(matmul(A * 2.0, b)).to_vector() == Tensor<double>(matmul(Tensor<double>(A * 2.0), b)).to_vector());
  CHECK(linalg::solve(A + I * 4.0, b).to_vector() == linalg::solve(A2, b).to_vector());
  auto x = randn<double>({4, 3}, g), w = randn<double>({2, 3}, g);
  CHECK(nn::functional::linear(x, w * 0.5).to_vector() == nn::functional::linear(x, Tensor<double>(w * 0.5)).to_vector());
  auto t = tensor<int64_t>({0, 1, 1, 0});
  CHECK(nn::functional::linear_cross_entropy(x, w * 0.5, t).item() ==
        nn::functional::linear_cross_entropy(x, Tensor<double>(w * 0.5), t).item());
  CHECK(nn::functional::cross_entropy(x * 2.0, t).item() == nn::functional::cross_entropy(Tensor<double>(x * 2.0), t).item());
  CHECK(cat(std::vector<Tensor<double>>{x * 2.0, x}, 0).sizes() == Shape{8, 3});
  // Tensor members on an expression: evaluate once, return tensors
  auto e = x * 0.02;
  CHECK(e.sizes() == Shape{4, 3});  // (shape without evaluating)
  auto leaf = (randn<double>({2, 2}, g) * 0.02).requires_grad_();
  CHECK(leaf.requires_grad());
  CHECK(leaf.is_leaf());
  sum(Tensor<double>(leaf * leaf)).backward();
  CHECK(leaf.grad().defined());
  CHECK(e.to_vector() == Tensor<double>(e).to_vector());
  CHECK(e.reshape({12}).sizes() == Shape{12});
  CHECK(e.view({3, 4}).sizes() == Shape{3, 4});
  CHECK(e.to<float>().to_vector()[0] == static_cast<float>(Tensor<double>(e).to_vector()[0]));
  CHECK((x[0][0] * 3.0).item() == x[0][0].item() * 3.0);
  CHECK(!e.detach().requires_grad());
  CHECK(e.clone().sizes() == Shape{4, 3});
}
