#pragma once
// Loop fusion and code generation for autograd::compile (compile.hpp, option `fuse`).
//
// A capture keeps, next to each kernel it can replay, a description of what the kernel
// computes where it is an elementwise expression or a sum / mean of one (core/capture.hpp's
// KernelDesc: the expression's IR graph, its leaf tensors, the output). fuse() then:
//   1. inlines a kernel into its one consumer where the buffer between them is read by
//      nothing else, is no argument, result or constant, and is read exactly as it was
//      written (same elements, same order): the buffer disappears, and so does the pass
//      that wrote it (P.unsqueeze(1) - P.unsqueeze(0), squared and summed over xyz, becomes
//      one loop nest that never stores the [n, n, 3] differences);
//   2. writes each run of consecutive described kernels as one C++ function: a loop nest per
//      kernel with the shapes, strides and offsets as constants, the reduced dims innermost
//      with a register accumulator, the innermost loop marked `omp simd`, and every node of
//      the graph a call of its op's own `apply` (the op structs of reel/expr/ops*.hpp: one
//      definition of each op, here as in the eager engine).
// jit_compile() compiles that source with the system's C++ compiler into a shared library
// in a cache directory (keyed by a hash of the source, the compiler, its flags and reel's
// headers, so a program's later runs load it without compiling, and a library compiled
// against other headers is never loaded) and loads it. Kernels without a
// description (products, factorizations, scatter, ...) run as captured, between the
// generated functions.
//
// Environment: REEL_JIT_CXX (the compiler; default the one CMake found, else `c++`; `none`
// turns code generation off), REEL_JIT_FLAGS (more flags), REEL_JIT_CACHE (the cache
// directory; default $XDG_CACHE_HOME/reel-jit, else ~/.cache/reel-jit, else the temp dir).
#include "../core/config.hpp"
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/capture.hpp"
#include "ir.hpp"

namespace reel::inline REEL_ABI::detail::fusion {

// A captured program, as compile hands it over.
struct Program {
  std::vector<std::shared_ptr<const KernelDesc>> descs;  // per kept kernel (null: none)
  std::vector<std::vector<const Storage*>> reads, writes;
  std::vector<char> skip;              // per kept kernel: not run by a replay (folded)
  std::vector<const Storage*> pinned;  // storages the caller sees: arguments and results
  std::vector<const Storage*> fresh;   // storages the function allocated (the only ones that may go)
};

// One step of the fused replay: a kept kernel as captured, or a generated function called
// with the data of `buffers` (argument i: buffers[i]->storage->data).
struct Part {
  int step = -1;      // the kept kernel, or -1
  int function = -1;  // the generated function reel_fused_<function>
  std::vector<std::shared_ptr<TensorImpl>> buffers;
};
struct Fused {
  std::vector<Part> parts;
  std::string source;           // the generated functions ("" when there are none)
  int functions = 0;
  int kept = 0;                 // loop nests after fusion
  // (kernel, storage): kernel now also reads storage (CaptureTrace::extend_use)
  std::vector<std::pair<size_t, const Storage*>> moved_reads;
};
REEL_INLINE Fused fuse(const Program& p);

// A loaded library of generated functions.
using FusedFn = void (*)(void* const*);
struct JitLibrary {
  void* handle = nullptr;
  std::vector<FusedFn> fns;
  JitLibrary() = default;
  JitLibrary(const JitLibrary&) = delete;
  JitLibrary& operator=(const JitLibrary&) = delete;
  REEL_INLINE ~JitLibrary();
};
// Compiles (or finds in the cache) and loads `source`'s functions reel_fused_0 ..
// reel_fused_<n - 1>; null with `error` set when that fails.
REEL_INLINE std::shared_ptr<JitLibrary> jit_compile(const std::string& source, int n, std::string& error);
// A fingerprint of the headers under include_dir/reel (each file's path, size and
// modification time): part of the cache key, so that editing, replacing or moving reel's
// headers compiles generated code again. 0 where the directory cannot be read.
REEL_INLINE uint64_t jit_headers_fingerprint(const std::string& include_dir);

}  // namespace reel::detail::fusion

#ifndef REEL_COMPILED_LIB
#include "fusion-inl.hpp"
#endif
