# Compiles a one-line misuse of the API and passes only if compilation fails with MSG.
# (the second header only where it is another: with a precompiled reel.hpp, GCC looks for a
# repeated include of it beside the .gch)
set(second "")
if(NOT HEADER STREQUAL "reel/reel.hpp")
  set(second "#include <${HEADER}>")
endif()
file(WRITE ${OUT} "#include <reel/reel.hpp>
${second}
using namespace reel;
void f(Tensor<std::complex<float>> tensor_c, Tensor<float> tensor_f, Tensor<double> tensor_d,
       Tensor<uint16_t> tensor_u16, Tensor<int32_t> tensor_i32, Tensor<int64_t> tensor_i64) {
  (void)tensor_c; (void)tensor_f; (void)tensor_d; (void)tensor_u16; (void)tensor_i32; (void)tensor_i64;
  (void)(${EXPR});
}
")
# (PCH: a folder with reel/reel.hpp.gch, precompiled with these flags, searched first)
set(pch_inc "")
if(PCH)
  set(pch_inc -I${PCH})
endif()
execute_process(COMMAND ${CXX} -std=c++20 -DREEL_COMPILED_LIB -fsyntax-only ${pch_inc} -I${INC} -I${EIGEN} ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a compile error for: ${EXPR}")
endif()
# The first error line must say why (a static_assert or a constraint in words), not the
# hundredth line of a template backtrace.
string(REGEX MATCH "[^\n]*error:[^\n]*" first "${err}")
string(FIND "${first}" "${MSG}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "the first error for `${EXPR}` does not say '${MSG}':\n${first}\n\nall of it:\n${err}")
endif()
message(STATUS "rejected as expected: ${EXPR}")
