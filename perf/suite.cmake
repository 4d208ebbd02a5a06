# The collective suite's perf tools (nccl-tests' *_perf for each collective) and
# their mpirun smoke tests. Included from perf/CMakeLists.txt, after the
# antdt_perf_common library is defined. Like antdt_allreduce_perf they link the
# shared library, as applications do.
set(ANTDT_SUITE_PERF_TOOLS
  antdt_allgather_perf
  antdt_reducescatter_perf
  antdt_broadcast_perf
  antdt_reduce_perf
  antdt_alltoall_perf)
foreach(tool ${ANTDT_SUITE_PERF_TOOLS})
  add_executable(${tool} ${CMAKE_CURRENT_SOURCE_DIR}/${tool}.cpp)
  target_compile_options(${tool} PRIVATE ${ANTDT_WARNINGS})
  target_link_libraries(${tool} PRIVATE antdt_perf_common)
  set_target_properties(${tool} PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endforeach()
install(TARGETS ${ANTDT_SUITE_PERF_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)

# ---------------------------------------------------------------------------
# Smoke tests: each tool under mpirun -np 2 (and an odd rank count for the ones
# whose blocks split by rank), tiny sizes, results checked (a wrong element
# makes the tool exit non-zero). Registered like tests/integration's perf tests.
# ---------------------------------------------------------------------------
if(NOT ANTDT_BUILD_TESTS)
  return()
endif()
find_program(MPIEXEC_EXECUTABLE NAMES mpirun mpiexec)
if(NOT (MPI_C_FOUND AND MPIEXEC_EXECUTABLE))
  message(STATUS "perf smoke tests are not registered (needs MPI and mpirun)")
  return()
endif()
# This directory is configured before the top level enables testing.
enable_testing()

set(ANTDT_PERF_BOOTSTRAP_DIR ${CMAKE_CURRENT_BINARY_DIR}/bootstrap)
file(MAKE_DIRECTORY ${ANTDT_PERF_BOOTSTRAP_DIR})
set(ANTDT_PERF_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1
  UCX_WARN_UNUSED_ENV_VARS=n
  ANTDT_BOOTSTRAP_DIR=${ANTDT_PERF_BOOTSTRAP_DIR}
  ANTDT_TIMEOUT_MS=30000)

# antdt_add_perf_smoke_test(<name> <ranks> <command...>)
function(antdt_add_perf_smoke_test name ranks)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --bind-to none --oversubscribe -np ${ranks} ${ARGN})
  set_tests_properties(${name} PROPERTIES
    TIMEOUT 120
    LABELS "perf;mpi"
    PROCESSORS ${ranks}
    # Oversubscribed ranks are timing-sensitive: never run two jobs at once.
    RESOURCE_LOCK antdt_multiprocess
    ENVIRONMENT "${ANTDT_PERF_TEST_ENV}")
endfunction()

set(ANTDT_PERF_SMOKE_ARGS -b 0 -e 64K -f 16 -n 2 -w 1 -c 1)
antdt_add_perf_smoke_test(mpi.perf.allgather.np2 2 $<TARGET_FILE:antdt_allgather_perf> ${ANTDT_PERF_SMOKE_ARGS})
antdt_add_perf_smoke_test(mpi.perf.allgather.np3 3 $<TARGET_FILE:antdt_allgather_perf> ${ANTDT_PERF_SMOKE_ARGS} -d int8,half,double)
antdt_add_perf_smoke_test(mpi.perf.reducescatter.np2 2 $<TARGET_FILE:antdt_reducescatter_perf> ${ANTDT_PERF_SMOKE_ARGS})
antdt_add_perf_smoke_test(mpi.perf.reducescatter.np3 3 $<TARGET_FILE:antdt_reducescatter_perf> ${ANTDT_PERF_SMOKE_ARGS} -d int8,bfloat16 -o all)
antdt_add_perf_smoke_test(mpi.perf.broadcast.np2 2 $<TARGET_FILE:antdt_broadcast_perf> ${ANTDT_PERF_SMOKE_ARGS} -r 1)
antdt_add_perf_smoke_test(mpi.perf.reduce.np2 2 $<TARGET_FILE:antdt_reduce_perf> ${ANTDT_PERF_SMOKE_ARGS} -r 1 -o sum,max)
antdt_add_perf_smoke_test(mpi.perf.alltoall.np2 2 $<TARGET_FILE:antdt_alltoall_perf> ${ANTDT_PERF_SMOKE_ARGS})
antdt_add_perf_smoke_test(mpi.perf.alltoall.np3 3 $<TARGET_FILE:antdt_alltoall_perf> ${ANTDT_PERF_SMOKE_ARGS} -d uint8,int64)
if(TARGET gloo_allreduce_perf)
  antdt_add_perf_smoke_test(mpi.perf.gloo_ring_chunked.np2 2 $<TARGET_FILE:gloo_allreduce_perf>
    -b 8 -e 64K -f 16 -n 2 -w 1 -c 1 -a ring_chunked)
  antdt_add_perf_smoke_test(mpi.perf.gloo_halving_doubling.np2 2 $<TARGET_FILE:gloo_allreduce_perf>
    -b 8 -e 64K -f 16 -n 2 -w 1 -c 1 -a halving_doubling)
endif()
