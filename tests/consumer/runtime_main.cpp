// Against reel::runtime: the tensor made here is differentiated in runtime_part.cpp.
#include <reel/reel.hpp>

float slope_at(const reel::Tensor<float>& x);  // runtime_part.cpp

int main() {
  auto x = reel::tensor<float>({1, 2, 3});
  return slope_at(x) == 12.0f ? 0 : 1;  // d/dx sum(x^2) at x = (1, 2, 3), summed
}
