#pragma once
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
