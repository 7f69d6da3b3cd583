#pragma once
// Eigen's fast math (its default) takes float sqrt as x * rsqrt(x) with one Newton step: NaN
// at inf, +0 at -0.0, 0 for denormals, and not correctly rounded. reel's values are IEEE's (as
// PyTorch's), so Eigen is included with it off; reel keeps Eigen's fast float tanh itself.
#if !defined(EIGEN_FAST_MATH)
#define EIGEN_FAST_MATH 0
#elif EIGEN_FAST_MATH && !defined(REEL_ALLOW_EIGEN_FAST_MATH)
#error "reel: Eigen was included before reel with EIGEN_FAST_MATH on (its float sqrt is wrong at inf, -0.0 and denormals): include reel first, or define EIGEN_FAST_MATH 0 (or REEL_ALLOW_EIGEN_FAST_MATH to accept it)"
#endif
// The settings that change reel's inline definitions, named in an inline namespace that holds
// everything reel declares (reel::cfg_<autograd>_<threads>_<mode>::Tensor, ...). Translation
// units compiled with different settings then use different entities instead of silently
// breaking the one-definition rule, and code that hands reel types from one to the other does
// not link (tests/link_guard).
//   REEL_NO_AUTOGRAD   recording compiled out                       ag / noag
//   _OPENMP            -fopenmp: parallel loops and their thresholds omp / seq
//   REEL_COMPILED_LIB  reel::runtime: the non-template runtime is    lib / hdr
//                      declared here and compiled once in src/ (header-only otherwise)
// (The namespace is transparent to users: they write reel::Tensor.)

#if defined(REEL_NO_AUTOGRAD)
#define REEL_CFG_AUTOGRAD noag
#else
#define REEL_CFG_AUTOGRAD ag
#endif
#if defined(_OPENMP)
#define REEL_CFG_THREADS omp
#else
#define REEL_CFG_THREADS seq
#endif
#if defined(REEL_COMPILED_LIB)
#define REEL_CFG_MODE lib
#else
#define REEL_CFG_MODE hdr
#endif
#define REEL_CFG_NAME3(a, b, c) cfg_##a##_##b##_##c
#define REEL_CFG_NAME(a, b, c) REEL_CFG_NAME3(a, b, c)
#define REEL_ABI REEL_CFG_NAME(REEL_CFG_AUTOGRAD, REEL_CFG_THREADS, REEL_CFG_MODE)

// Non-template runtime functions are declared REEL_INLINE: inline definitions in header-only
// mode; in compiled mode (REEL_COMPILED_LIB) the headers only declare them and src/ defines
// them once (their bodies are in the *-inl.hpp files).
#if defined(REEL_COMPILED_LIB)
#define REEL_INLINE
#else
#define REEL_INLINE inline
#endif

// Entries of the instantiation lists (reel/runtime/instantiate.hpp, linalg.hpp): an extern
// declaration in users' translation units (compiled mode), the definition in src/.
#define REEL_EXTERN_TEMPLATE(...) extern template __VA_ARGS__;
#define REEL_TEMPLATE_INSTANCE(...) template __VA_ARGS__;
