#pragma once
// Functions that device code calls too (op bodies, element conversion) are marked REEL_HD.
#include "config.hpp"
#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define REEL_HD __host__ __device__
#else
#define REEL_HD
#endif

namespace reel::inline REEL_ABI::detail {

// A product and a sum, each rounded on its own, on every device and under any flags. nvcc
// contracts `a * b + c` into one fused multiply-add by default (--fmad=true), and g++ does
// too with -ffp-contract=fast (its default in GNU mode) where FMA instructions exist
// (-march=native): one rounding instead of two, so the same formula gives different last bits
// on the CPU and the GPU. Code whose rounding is specified (the range factories, which
// reproduce PyTorch's kernels operation by operation) spells out the two roundings with
// these, and a fused one with fma_rn below. On the device they are the _rn
// intrinsics, which nvcc never contracts; on the host the product passes through an empty
// asm statement that the optimizer cannot see through, so it cannot fuse it into an FMA.
template <class A>
REEL_HD inline A mul_rn(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, float>)
    return __fmul_rn(a, b);
  else if constexpr (std::is_same_v<A, double>)
    return __dmul_rn(a, b);
  else
    return a * b;
#else
  A p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (std::is_floating_point_v<A>) asm("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
  if constexpr (std::is_floating_point_v<A>) asm("" : "+w"(p));
#else
  volatile A q = p;
  p = q;
#endif
  return p;
#endif
}
template <class A>
REEL_HD inline A add_rn(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, float>)
    return __fadd_rn(a, b);
  else if constexpr (std::is_same_v<A, double>)
    return __dadd_rn(a, b);
  else
    return a + b;
#else
  return a + b;  // (contraction needs the product visible, which mul_rn hides)
#endif
}

// One fused multiply-add, a * b + c rounded once, on every device (the range factories use it
// where PyTorch's kernels are compiled with contraction).
template <class A>
REEL_HD inline A fma_rn(A a, A b, A c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, float>)
    return __fmaf_rn(a, b, c);
  else
    return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace reel::detail
