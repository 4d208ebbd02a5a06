# antdt-run sets torchrun's env:// variables for each rank (issue 14,
# docs/torch.md "Launch"), and keeps the ones the caller set.
#   cmake -DANTDT_RUN=<antdt-run> -P antdt_run_torch_env.cmake
set(show [=[echo "rank=$ANTDT_RANK RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT ROOT=$ANTDT_ROOT COORDINATOR=$ANTDT_COORDINATOR"]=])

function(run_job out_var)
  execute_process(COMMAND ${ARGN} ${ANTDT_RUN} -n 2 -- sh -c "${show}"
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "antdt-run exited with ${rc}:\n${out}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Nothing set by the caller: antdt-run's values.
run_job(out ${CMAKE_COMMAND} -E env --unset=RANK --unset=WORLD_SIZE --unset=LOCAL_RANK --unset=LOCAL_WORLD_SIZE
        --unset=MASTER_ADDR --unset=MASTER_PORT)
message(STATUS "antdt-run's values:\n${out}")
set(ports "")
foreach(r 0 1)
  string(REGEX MATCH "rank=${r} RANK=${r} WORLD_SIZE=2 LOCAL_RANK=${r} LOCAL_WORLD_SIZE=2 MASTER_ADDR=127\\.0\\.0\\.1 MASTER_PORT=([0-9]+) ROOT=127\\.0\\.0\\.1:([0-9]+) COORDINATOR=127\\.0\\.0\\.1:([0-9]+)"
         line "${out}")
  if(NOT line)
    message(FATAL_ERROR "rank ${r}: no line with its env:// variables in\n${out}")
  endif()
  if(CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "rank ${r}: MASTER_PORT is ANTDT_ROOT's port ${CMAKE_MATCH_1}")
  endif()
  # Rank 0 listens on all three (torch's TCPStore, antdt's bootstrap, the embedded coordinator).
  if(CMAKE_MATCH_3 STREQUAL CMAKE_MATCH_1 OR CMAKE_MATCH_3 STREQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "rank ${r}: the coordinator's port ${CMAKE_MATCH_3} is also MASTER_PORT or ANTDT_ROOT's")
  endif()
  if(CMAKE_MATCH_1 LESS 1 OR CMAKE_MATCH_1 GREATER 65535)
    message(FATAL_ERROR "rank ${r}: MASTER_PORT ${CMAKE_MATCH_1} is not a port")
  endif()
  list(APPEND ports ${CMAKE_MATCH_1})
endforeach()
list(GET ports 0 p0)
list(GET ports 1 p1)
if(NOT p0 STREQUAL p1)
  message(FATAL_ERROR "the ranks got different MASTER_PORTs: ${p0} and ${p1}")
endif()

# The caller's values win.
run_job(out ${CMAKE_COMMAND} -E env --unset=RANK --unset=LOCAL_RANK MASTER_ADDR=10.1.2.3 MASTER_PORT=29555
        WORLD_SIZE=7 LOCAL_WORLD_SIZE=5)
message(STATUS "with the caller's values:\n${out}")
foreach(r 0 1)
  string(REGEX MATCH "rank=${r} RANK=${r} WORLD_SIZE=7 LOCAL_RANK=${r} LOCAL_WORLD_SIZE=5 MASTER_ADDR=10\\.1\\.2\\.3 MASTER_PORT=29555 "
         line "${out}")
  if(NOT line)
    message(FATAL_ERROR "rank ${r}: the caller's variables were overridden in\n${out}")
  endif()
endforeach()
run_job(out ${CMAKE_COMMAND} -E env RANK=9 LOCAL_RANK=8)
foreach(r 0 1)
  string(REGEX MATCH "rank=${r} RANK=9 WORLD_SIZE=[0-9]+ LOCAL_RANK=8 " line "${out}")
  if(NOT line)
    message(FATAL_ERROR "rank ${r}: the caller's RANK / LOCAL_RANK were overridden in\n${out}")
  endif()
endforeach()
message(STATUS "PASS")
