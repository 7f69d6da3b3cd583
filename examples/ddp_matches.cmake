# Data-parallel training follows the single-process run (issue 20): the trainer built with MPI
# runs 40 steps on one process with a batch of 2B, then under mpirun on 2 ranks with B each
# (DistributedDataParallel averaging the gradients): every step's loss must be the single
# run's to a relative 1e-5 (float rounding of means over other partial sums: 300 steps
# differed by at most 1.2e-7 when this was written). Then the single run's checkpoint after
# step 20 resumes on 2 ranks and must give steps 21..40 again.
set(common --steps 40 --seed 7 --hidden 64 --blocks 1 --eval-every 20)
set(single "${WORKDIR}/ddp_single_losses.txt")
set(ck "${WORKDIR}/ddp_step20.pt")
file(REMOVE "${single}" "${ck}")
set(launch ${MPIEXEC} ${NPFLAG})
execute_process(COMMAND ${launch} 1 ${EXE} ${common} --batch 64 --log-losses "${single}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT (rc EQUAL 0 OR rc EQUAL 3) OR NOT EXISTS "${single}")  # (3: learned too little in 40 steps: fine)
  message(FATAL_ERROR "the single-process run failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${launch} 2 ${EXE} ${common} --batch 32 --compare-losses "${single}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT (rc EQUAL 0 OR rc EQUAL 3) OR NOT out MATCHES "data parallel: 2 ranks, 32 windows" OR
   NOT out MATCHES "losses compared with [^:]*: 40 steps, 0 differ")
  message(FATAL_ERROR "2 ranks x 32 did not follow 1 x 64 (${rc}):\n${out}\n${err}")
endif()
message(STATUS "2 ranks x 32 windows = 1 process x 64: 40 steps")
execute_process(COMMAND ${launch} 1 ${EXE} ${common} --steps 20 --batch 64 --checkpoint "${ck}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT EXISTS "${ck}")
  message(FATAL_ERROR "no checkpoint (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${launch} 2 ${EXE} ${common} --batch 32 --resume "${ck}" --compare-losses "${single}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE "${single}" "${ck}")
if(NOT (rc EQUAL 0 OR rc EQUAL 3) OR NOT out MATCHES "resumed from .* after step 20" OR
   NOT out MATCHES "losses compared with [^:]*: 20 steps, 0 differ")
  message(FATAL_ERROR "the 1-process checkpoint did not resume on 2 ranks (${rc}):\n${out}\n${err}")
endif()
message(STATUS "a 1-process checkpoint resumed on 2 ranks: steps 21..40 the same")
