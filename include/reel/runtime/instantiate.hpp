#pragma once
// What nearly every program instantiates for float and double on the CPU, listed once: in
// compiled mode (reel::runtime, REEL_COMPILED_LIB) the headers declare these instantiations
// `extern template` and the sources generated from src/instantiate.cpp.in define them, so a
// user's translation unit does not instantiate and optimize them again (header-only mode:
// nothing changes; nor with REEL_RUNTIME_NO_INSTANTIATIONS, a runtime built without them:
// CMake's REEL_RUNTIME_INSTANTIATE=OFF). An entry is the instantiated declaration with T for the element type; X
// receives it as its arguments. The elementwise ops' autograd tables and the evaluation of one
// op over tensors and numbers (`a + b`, `x * 2`, `exp(x)`: materialize), for complex<float> and
// complex<double> too, come from the op lists (instantiate_ops.inc).
#include "../core/config.hpp"

#define REEL_INSTANTIATE_TYPED(X, T)                                                                      \
  X(Tensor<T, CPU> matmul<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&))                         \
  X(Tensor<T, CPU> mm<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&))                             \
  X(Tensor<T, CPU> bmm<T, CPU>(const Tensor<T, CPU>&, const Tensor<T, CPU>&))                            \
  X(Tensor<T, CPU> cat<T, CPU>(std::span<const Tensor<T, CPU>>, int64_t))                                \
  X(Tensor<T, CPU> stack<T, CPU>(std::span<const Tensor<T, CPU>>, int64_t))                              \
  X(Tensor<T, CPU> sum<Tensor<T, CPU>>(const Tensor<T, CPU>&, Shape, bool))                              \
  X(Tensor<T, CPU> mean<Tensor<T, CPU>>(const Tensor<T, CPU>&, Shape, bool))                             \
  X(Tensor<T, CPU> prod<Tensor<T, CPU>>(const Tensor<T, CPU>&, Shape, bool))                             \
  X(Tensor<T, CPU> cumsum<Tensor<T, CPU>>(const Tensor<T, CPU>&, int64_t))                               \
  X(Tensor<T, CPU> logsumexp<Tensor<T, CPU>>(const Tensor<T, CPU>&, Shape, bool))                       \
  X(Tensor<T, CPU> norm<Tensor<T, CPU>>(const Tensor<T, CPU>&, double, Shape, bool))                     \
  X(Tensor<T, CPU> nn::functional::softmax<Tensor<T, CPU>>(const Tensor<T, CPU>&, int64_t))              \
  X(Tensor<T, CPU> nn::functional::log_softmax<Tensor<T, CPU>>(const Tensor<T, CPU>&, int64_t))          \
  X(ValuesIndices<T, CPU> sort<Tensor<T, CPU>>(const Tensor<T, CPU>&, int64_t, bool))                     \
  X(void histc<T, CPU>(const Tensor<T, CPU>&, int64_t, double, double, Tensor<T, CPU>&))                 \
  X(Tensor<T, CPU> linspace<T, CPU>(double, double, int64_t))                                            \
  X(Tensor<T, CPU> rand<T, CPU>(Shape, Generator&))                                                      \
  X(Tensor<T, CPU> randn<T, CPU>(Shape, Generator&))                                                     \
  X(Tensor<int64_t, CPU> argmax<Tensor<T, CPU>>(const Tensor<T, CPU>&, std::optional<int64_t>, bool))    \
  X(Tensor<int64_t, CPU> argmin<Tensor<T, CPU>>(const Tensor<T, CPU>&, std::optional<int64_t>, bool))    \
  X(Tensor<T, CPU> detail::extreme<true, T, CPU>(const Tensor<T, CPU>&, const Shape&, bool, bool))       \
  X(Tensor<T, CPU> detail::extreme<false, T, CPU>(const Tensor<T, CPU>&, const Shape&, bool, bool))      \
  X(Tensor<T, CPU> detail::gather_along<T, CPU>(const Tensor<T, CPU>&, const Tensor<int64_t, CPU>&, int64_t)) \
  X(Tensor<T, CPU> detail::scatter_add_along<T, CPU>(const Shape&, const Tensor<int64_t, CPU>&,          \
                                                     const Tensor<T, CPU>&, int64_t))                    \
  X(ValuesIndices<T, CPU> detail::ordered_lines<T, CPU>(const Tensor<T, CPU>&, int64_t, int64_t, bool,   \
                                                        const char*))                                    \
  X(Tensor<T, CPU> detail::record_fn_typed<T, CPU>(Tensor<T, CPU>, const char*, std::span<const Tensor<T, CPU>>, \
                                                   std::span<const Tensor<T, CPU>>,                     \
                                                   std::shared_ptr<detail::FnNodeBase> (*)(void*), void*, \
                                                   detail::FwRule<T, CPU>))                             \
  X(void detail::forward_levels<T, CPU>(detail::FwRule<T, CPU>, const std::vector<const detail::TensorImpl*>&, \
                                        Tensor<T, CPU>&, const std::vector<uint64_t>&))                 \
  REEL_INSTANTIATE_TENSOR(X, T)                                                                          \
  X(Tensor<T, CPU> detail::materialize<Expr<ClampOp<T>, Tensor<T, CPU>>>(const Expr<ClampOp<T>, Tensor<T, CPU>>&)) \
  X(class optim::detail::Optimizer<T, CPU, optim::SGDOptions, optim::detail::SGDState<T, CPU>>)         \
  X(class optim::detail::Optimizer<T, CPU, optim::AdamOptions, optim::detail::AdamState<T, CPU>>)       \
  X(class optim::detail::Optimizer<T, CPU, optim::AdamWOptions, optim::detail::AdamState<T, CPU>>)      \
  X(class optim::detail::AdamImpl<T, CPU, optim::AdamOptions, false>)                                   \
  X(class optim::detail::AdamImpl<T, CPU, optim::AdamWOptions, true>)                                   \
  X(class optim::SGD<T, CPU>)                                                                           \
  X(class optim::Adam<T, CPU>)                                                                          \
  X(class optim::AdamW<T, CPU>)

// The tensor class (its members that are not templates: views, reshape, to_vector, clone,
// backward, ...), making one, copies between tensors of one type, and printing.
#define REEL_INSTANTIATE_TENSOR(X, T)                                                                     \
  X(class Tensor<T, CPU>)                                                                                 \
  X(Tensor<T, CPU> detail::make_tensor<T, CPU>(Shape))                                                    \
  X(void detail::eval_into<T, CPU, Tensor<T, CPU>>(const Tensor<T, CPU>&, const Tensor<T, CPU>&))         \
  X(void detail::assign_expr<T, CPU, Tensor<T, CPU>>(const Tensor<T, CPU>&, const Tensor<T, CPU>&))       \
  X(std::ostream& operator<< <T, CPU>(std::ostream&, const Tensor<T, CPU>&))
// The index and mask types every program meets (argmax, comparisons), bytes and half
// precision (data loading, mixed precision), once, with part core of float; and what programs
// do with them: sums and cumulative sums of int64 (counts), randint, half and bfloat16
// linspace, and a Shape in an error message.
#define REEL_INSTANTIATE_UNTYPED(X)                                                         \
  REEL_INSTANTIATE_TENSOR(X, int64_t) REEL_INSTANTIATE_TENSOR(X, bool) REEL_INSTANTIATE_TENSOR(X, uint8_t) \
  REEL_INSTANTIATE_TENSOR(X, half) REEL_INSTANTIATE_TENSOR(X, bfloat16)                     \
  X(Tensor<int64_t, CPU> sum<Tensor<int64_t, CPU>>(const Tensor<int64_t, CPU>&, Shape, bool)) \
  X(Tensor<int64_t, CPU> cumsum<Tensor<int64_t, CPU>>(const Tensor<int64_t, CPU>&, int64_t)) \
  X(Tensor<int64_t, CPU> randint<int64_t, CPU>(int64_t, int64_t, Shape, Generator&))       \
  X(Tensor<uint8_t, CPU> randint<uint8_t, CPU>(int64_t, int64_t, Shape, Generator&))       \
  X(Tensor<half, CPU> linspace<half, CPU>(double, double, int64_t))                        \
  X(Tensor<bfloat16, CPU> linspace<bfloat16, CPU>(double, double, int64_t))                \
  X(void detail::append_arg<Shape>(std::string&, const Shape&))

#define REEL_INSTANTIATE_ALL(X) \
  REEL_INSTANTIATE_TYPED(X, float) REEL_INSTANTIATE_TYPED(X, double) REEL_INSTANTIATE_UNTYPED(X)

#if defined(REEL_COMPILED_LIB) && !defined(REEL_INSTANTIATING) && !defined(REEL_RUNTIME_NO_INSTANTIATIONS)
namespace reel::inline REEL_ABI {
REEL_INSTANTIATE_ALL(REEL_EXTERN_TEMPLATE)
#define REEL_OP_ENTRY REEL_EXTERN_TEMPLATE
#define REEL_OP_TABLES 1
#define REEL_OP_KERNELS 1
#define REEL_OP_COMPLEX 0
#define REEL_OP_T float
#include "instantiate_ops.inc"
#undef REEL_OP_T
#define REEL_OP_T double
#include "instantiate_ops.inc"
#undef REEL_OP_T
#undef REEL_OP_COMPLEX
#define REEL_OP_COMPLEX 1
#define REEL_OP_T std::complex<float>
#include "instantiate_ops.inc"
#undef REEL_OP_T
#define REEL_OP_T std::complex<double>
#include "instantiate_ops.inc"
#undef REEL_OP_T
#undef REEL_OP_COMPLEX
#undef REEL_OP_ENTRY
#undef REEL_OP_TABLES
#undef REEL_OP_KERNELS
}  // namespace reel::inline REEL_ABI
#endif
