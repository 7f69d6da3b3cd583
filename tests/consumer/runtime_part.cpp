// A second translation unit of the reel::runtime consumer: records a graph and runs backward
// (tape, engine and graph evaluation come from the library).
#include <reel/reel.hpp>

float slope_at(const reel::Tensor<float>& x) {
  auto v = x.detach().requires_grad_();
  reel::sum(v * v).backward();
  return reel::sum(v.grad()).item();
}
