// reel::runtime: reel's non-template runtime (tape and backward engine, graph interning and
// evaluation, recording, structured tangents, storage, capture, geometry, printing, warnings,
// Philox) compiled once. The reel_runtime target defines REEL_COMPILED_LIB for itself and for
// its users, whose headers then only declare these functions (include/reel/core/config.hpp).
#ifndef REEL_COMPILED_LIB
#error "src/runtime.cpp is compiled with REEL_COMPILED_LIB (the reel_runtime target defines it)"
#endif
#include <reel/reel.hpp>

// Every *-inl.hpp under include/ (CMakeLists.txt checks that none is missing).
#include <reel/core/errors-inl.hpp>
#include <reel/core/shape-inl.hpp>
#include <reel/core/geometry-inl.hpp>
#include <reel/core/storage-inl.hpp>
#include <reel/core/capture-inl.hpp>
#include <reel/core/print-inl.hpp>
#include <reel/random/philox-inl.hpp>
#include <reel/expr/engine-inl.hpp>
#include <reel/ops/reduce_kernels-inl.hpp>
#include <reel/autograd/graph-inl.hpp>
#include <reel/autograd/structured-inl.hpp>
#include <reel/autograd/ir-inl.hpp>
#include <reel/autograd/ir_program-inl.hpp>
#include <reel/autograd/fusion-inl.hpp>
#include <reel/autograd/fusion_jit-inl.hpp>
#include <reel/autograd/record-inl.hpp>
#include <reel/autograd/record_fn-inl.hpp>
#include <reel/nn/scaled_mm-inl.hpp>
#include <reel/nn/quantize-inl.hpp>
