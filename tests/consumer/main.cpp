#include <reel/reel.hpp>
int main() {
  auto a = reel::tensor<float>({1, 2, 3});
  reel::Tensor<float> b = a * a + 1;
  return reel::sum(b).item() == 17.0f ? 0 : 1;
}
