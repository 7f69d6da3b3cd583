// A short tour of reel's core: typed tensors, views, fused expressions, reductions,
// matmul, exact reduced-precision ranges and saturating integer clamps.
#include <iostream>
#include <reel/reel.hpp>

using namespace reel;

int main() {
  // Typed tensors and factories
  auto a = tensor<float>({{1, 2, 3}, {4, 5, 6}});
  auto b = tensor<float>({10, 20, 30});
  std::cout << "a =\n" << a << "\n";

  // Expressions are fused: this is one pass over the output, with broadcasting
  Tensor<float> c = a * b + 1;
  std::cout << "a * b + 1 =\n" << c << "\n";

  // Views share storage; copy_ writes in place, `=` rebinds
  auto col = a.select(1, 0);
  col.copy_(col * 100);
  std::cout << "after scaling column 0 through a view:\n" << a << "\n";

  // Reductions and products
  std::cout << "sum over dim 1: " << sum(a, {1}) << "\n";
  std::cout << "a @ a^T =\n" << matmul(a, a.mT()) << "\n";
  std::cout << "softmax(a / 100):\n" << nn::functional::softmax(Tensor<float>(a / 100), 1) << "\n";

  // Exact reduced-precision ranges, rounded once
  std::cout << "linspace<half>(-2, 2, 10) = " << linspace<half>(-2, 2, 10) << "\n";

  // Integer clamps saturate out-of-range bounds instead of wrapping
  auto u = tensor<uint8_t>({0, 10, 255});
  std::cout << "clamp(uint8, min=-255) = " << Tensor<uint8_t>(clamp_min(u, -255)) << "\n";

  // Random numbers: counter-based, identical on every platform and thread count
  Generator gen(0);
  std::cout << "randn: " << randn<double>({3}, gen) << "\n";
  return 0;
}
