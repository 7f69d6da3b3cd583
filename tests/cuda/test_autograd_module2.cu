// A second translation unit for test_autograd.cu's two-file test: the ops of this expression
// (log1p, expm1) are instantiated for CUDA graphs here only, so their device functions exist
// only in this file's device code. Linked with relocatable device code (-rdc) into the
// evaluator's module, they must be callable by autograd's graph kernel (reel/cuda/ir_eval.cuh).
#include "common.cuh"

namespace rt {
template <class D>
Tensor<double, D> second_file_expr(const Tensor<double, D>& x) {
  return log1p(x * x) * expm1(x * 0.5);
}
template Tensor<double, CUDA> second_file_expr(const Tensor<double, CUDA>&);
template Tensor<double, CPU> second_file_expr(const Tensor<double, CPU>&);
}  // namespace rt
