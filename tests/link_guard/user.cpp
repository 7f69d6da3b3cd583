// Calls provider.cpp's function (built with the same or with other settings).
#include <reel/core/tensor.hpp>

int64_t elements_of(const reel::Tensor<float>& t);

int main() { return elements_of(reel::Tensor<float>()) == -1 ? 0 : 1; }
