# Builds and runs tests/consumer against reel, either in-tree (add_subdirectory: reel configured
# and built again inside the consumer) or from an install prefix (find_package: the build BUILD
# installed there).
file(REMOVE_RECURSE ${WORK})
set(consumer ${SRC}/tests/consumer)
if(MODE STREQUAL "find_package")
  # what a user does after building reel: install it (this build's reel::runtime, built with the
  # suites) and find it from another project
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "installing reel from ${BUILD} failed")
  endif()
  set(cfg -DCMAKE_PREFIX_PATH=${WORK}/prefix -DREEL_CONSUME=find_package)
else()
  # (reel::runtime without its explicit instantiations: the find_package case links the suites'
  # complete one; this one checks the in-tree build: 34 s instead of 139 s)
  set(cfg -DREEL_SRC=${SRC} -DREEL_CONSUME=subdirectory -DREEL_RUNTIME_INSTANTIATE=OFF)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${consumer} -B ${WORK}/build ${cfg} -DCMAKE_BUILD_TYPE= RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build -j2 RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed")
endif()
foreach(program IN ITEMS consumer consumer_runtime)
  execute_process(COMMAND ${WORK}/build/${program} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "the consumer program ${program} failed")
  endif()
endforeach()
message(STATUS "consumer (${MODE}) built and ran")
