# The core and the evaluator stand without autograd (DESIGN.md §1). Two checks on SRC
# (tests/test_core_layer.cpp):
#  1. compiled with REEL_NO_AUTOGRAD, it includes nothing of reel but core/, expr/, random/
#     and ops/factories.hpp (the include list comes from the compiler, -MM);
#  2. without REEL_NO_AUTOGRAD and without autograd's headers, the first recorded op does not
#     compile, and the error names the hook autograd installs (detail::Recorder) instead of
#     linking a program that silently records nothing.
execute_process(COMMAND ${CXX} -std=c++20 -MM -DREEL_NO_AUTOGRAD -I${INC} -I${EIGEN} -I${DOCTEST} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "listing the includes of ${SRC} failed:\n${err}")
endif()
string(REGEX REPLACE "[ \t\r\n\\\\]+" ";" deps "${deps}")
set(reel_headers 0)
foreach(d IN LISTS deps)
  if(NOT d MATCHES "/reel/")
    continue()
  endif()
  get_filename_component(d "${d}" ABSOLUTE)  # core/../expr/x.hpp -> expr/x.hpp
  math(EXPR reel_headers "${reel_headers} + 1")
  if(NOT d MATCHES "/reel/(core|expr|random)/[^/]+$" AND NOT d MATCHES "/reel/ops/factories\\.hpp$")
    message(FATAL_ERROR "the core layer includes a header of a layer above it: ${d}")
  endif()
endforeach()
if(reel_headers LESS 10)
  message(FATAL_ERROR "expected the core's headers in the include list, found ${reel_headers}:\n${deps}")
endif()
message(STATUS "${reel_headers} headers, all in core/, expr/, random/ or ops/factories.hpp")

execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INC} -I${EIGEN} -I${DOCTEST} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the core without autograd and without REEL_NO_AUTOGRAD compiled")
endif()
string(FIND "${err}" "incomplete type" p1)
string(FIND "${err}" "Recorder<" p2)
if(p1 EQUAL -1 OR p2 EQUAL -1)
  message(FATAL_ERROR "the error does not name the missing hook (incomplete type ... Recorder<...>):\n${err}")
endif()
message(STATUS "without autograd and without REEL_NO_AUTOGRAD: refused at compile time, naming detail::Recorder")
