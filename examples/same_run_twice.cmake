# Runs the trainer twice for 300 steps with the same seed: each run must learn (exit code 0:
# eval loss at least 0.5 nats below the unigram entropy) and both must report the same
# losses (the numbers after "loss"; tokens/s and times may differ).
foreach(run 1 2)
  execute_process(COMMAND ${EXE} --steps 300 --seed 7 RESULT_VARIABLE rc OUTPUT_VARIABLE out${run})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${run} failed (${rc}):\n${out${run}}")
  endif()
  string(REGEX MATCHALL "loss [0-9.]+" losses${run} "${out${run}}")
endforeach()
if(NOT losses1 OR NOT "${losses1}" STREQUAL "${losses2}")
  message(FATAL_ERROR "two runs with seed 7 differ:\n${losses1}\n${losses2}")
endif()
message(STATUS "same losses in both runs: ${losses1}")
