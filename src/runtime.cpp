// reel::runtime: reel's non-template runtime (tape and backward engine, graph interning and
// evaluation, recording, structured tangents, storage, capture, geometry, printing, warnings,
// Philox) compiled once. The reel_runtime target defines REEL_COMPILED_LIB for itself and for
// its users, whose headers then only declare these functions (include/detail/config.hpp).
#ifndef REEL_COMPILED_LIB
#error "src/runtime.cpp is compiled with REEL_COMPILED_LIB (the reel_runtime target defines it)"
#endif
#include <reel.hpp>

// Every *-inl.hpp under include/ (CMakeLists.txt checks that none is missing).
#include <errors-inl.hpp>
#include <detail/shape-inl.hpp>
#include <detail/geometry-inl.hpp>
#include <detail/storage-inl.hpp>
#include <detail/capture-inl.hpp>
#include <detail/print-inl.hpp>
#include <detail/random/philox-inl.hpp>
#include <detail/expr/engine-inl.hpp>
#include <detail/autograd/graph-inl.hpp>
#include <detail/autograd/structured-inl.hpp>
#include <detail/autograd/ir-inl.hpp>
#include <detail/autograd/ir_program-inl.hpp>
#include <detail/autograd/record-inl.hpp>
