# --init-from: weights PyTorch wrote (tests/reference/pt/charlm_init.pt) give, in reel, the eval
# loss PyTorch computed for them (charlm_init_loss.txt, 6 decimals), within 2e-5.
execute_process(COMMAND ${EXE} --init-from "${FIXTURES}/charlm_init.pt" --hidden 32 --blocks 1 --steps 0
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
file(READ "${FIXTURES}/charlm_init_loss.txt" want)
string(STRIP "${want}" want)
if(NOT rc EQUAL 0 OR NOT out MATCHES "eval loss ([0-9]+)\\.([0-9][0-9][0-9][0-9][0-9][0-9])")
  message(FATAL_ERROR "the run failed (${rc}):\n${out}")
endif()
set(got "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
string(REPLACE "." "" want_int "${want}")
math(EXPR diff "${got} - ${want_int}")
if(diff GREATER 20 OR diff LESS -20)
  message(FATAL_ERROR "eval loss ${CMAKE_MATCH_1}.${CMAKE_MATCH_2} in reel, ${want} in PyTorch")
endif()
message(STATUS "eval loss ${CMAKE_MATCH_1}.${CMAKE_MATCH_2} in reel, ${want} in PyTorch")
