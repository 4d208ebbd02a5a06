# The straggler benchmark as a test: four processes under mpirun, rank 2 three
# times slower (ANTDT_INJECT), every late policy in one launch. The tool exits
# non-zero on any error and when the ranks did not apply the same results
# (it hashes every result it applies), so exit 0 is the check; nothing here
# depends on timing.
if(NOT TARGET antdt_straggler_perf)
  return()
endif()
find_program(MPIEXEC_EXECUTABLE NAMES mpirun mpiexec)
if(NOT (MPI_C_FOUND AND MPIEXEC_EXECUTABLE))
  message(STATUS "mpirun straggler tests are not registered (needs MPI and mpirun)")
  return()
endif()

set(ANTDT_STRAGGLER_TEST_BOOTSTRAP_DIR ${CMAKE_CURRENT_BINARY_DIR}/bootstrap-straggler)
file(MAKE_DIRECTORY ${ANTDT_STRAGGLER_TEST_BOOTSTRAP_DIR})

# antdt_add_straggler_test(<name> <ANTDT_INJECT value> <tool arguments...>)
function(antdt_add_straggler_test name inject)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --bind-to none --oversubscribe -np 4
                   $<TARGET_FILE:antdt_straggler_perf> ${ARGN})
  set_tests_properties(${name} PROPERTIES
    TIMEOUT 120
    LABELS "mpi;integration"
    PROCESSORS 4
    # Oversubscribed ranks are timing-sensitive: never run two jobs at once.
    RESOURCE_LOCK antdt_multiprocess
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;UCX_WARN_UNUSED_ENV_VARS=n;ANTDT_BOOTSTRAP_DIR=${ANTDT_STRAGGLER_TEST_BOOTSTRAP_DIR};ANTDT_TIMEOUT_MS=30000;ANTDT_INJECT=${inject}")
endfunction()

# One rank 3x slower: wait, drop and defer side by side, results hashed on every rank.
antdt_add_straggler_test(mpi.straggler.slow_rank.np4 "rank=2:slow=3" --steps 30 --compute-ms 10)
# Transient spikes: 10% of steps 5x slower, on random ranks.
antdt_add_straggler_test(mpi.straggler.spikes.np4 "rank=*:spike_p=0.1,spike_x=5,spike_len=1" --steps 30 --compute-ms 10)
# The slow rank's sends also delayed by 2 ms (the fault transport, where the communicator applies it).
antdt_add_straggler_test(mpi.straggler.delayed_sends.np4 "rank=2:slow=3,delay_us=2000" --steps 20 --compute-ms 10)
