# The real-engine policy benchmark (docs/scheduler.md, "Real-engine benchmark"):
# a trainer on the Agent API under antdt-run. It reads ANTDT_INJECT through the
# library's Injector (an internal class), so it links the static library.
add_executable(antdt_policy_perf ${CMAKE_CURRENT_SOURCE_DIR}/antdt_policy_perf.cpp)
target_compile_options(antdt_policy_perf PRIVATE ${ANTDT_WARNINGS})
target_link_libraries(antdt_policy_perf PRIVATE antdt_comm_static CLI11::CLI11)
install(TARGETS antdt_policy_perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)

if(NOT ANTDT_BUILD_TESTS)
  return()
endif()
# This directory is configured before the top level enables testing.
enable_testing()
# Smoke test: a few steps with 3 ranks under antdt-run, once per built-in
# policy (antdt-nd with its restart on), rank 2 slowed; --check makes the tool
# fail unless the ranks' models agree and every sample was counted once. No
# timing is asserted.
set(ANTDT_POLICY_SMOKE_CONFIG_bsp "{}")
set(ANTDT_POLICY_SMOKE_CONFIG_antdt-dd "{\"warmup\":2,\"interval\":3}")
set(ANTDT_POLICY_SMOKE_CONFIG_antdt-nd "{\"warmup\":2,\"interval\":3,\"restart_cooldown\":5}")
foreach(policy bsp antdt-dd antdt-nd)
  add_test(NAME perf.policy.${policy}
           COMMAND ${CMAKE_COMMAND} -E env ANTDT_POLICY=${policy}
                   "ANTDT_POLICY_CONFIG=${ANTDT_POLICY_SMOKE_CONFIG_${policy}}" "ANTDT_INJECT=rank=2:slow=3,incarnation=0"
                   $<TARGET_FILE:antdt-run> -n 3 --restarts 2 --
                   $<TARGET_FILE:antdt_policy_perf> --steps 40 --global-batch 48 --sample-ms 0.1 --bytes 64K --check)
  set_tests_properties(perf.policy.${policy} PROPERTIES
    TIMEOUT 120
    LABELS perf
    PROCESSORS 3
    RESOURCE_LOCK antdt_multiprocess
    ENVIRONMENT "UCX_WARN_UNUSED_ENV_VARS=n;ANTDT_TIMEOUT_MS=30000"
    # The exit code carries --check's verdict; an error message fails it too.
    FAIL_REGULAR_EXPRESSION "error:|inconsistent")
endforeach()
# antdt-nd with a straggler that stays slow after its restart: the arbiter stops
# waiting for it and drops every contribution; the job must still consume the
# dataset (the coordinator hands dropped samples to other ranks).
add_test(NAME perf.policy.antdt-nd.still_slow
         COMMAND ${CMAKE_COMMAND} -E env ANTDT_POLICY=antdt-nd
                 "ANTDT_POLICY_CONFIG=${ANTDT_POLICY_SMOKE_CONFIG_antdt-nd}" "ANTDT_INJECT=rank=2:slow=3"
                 $<TARGET_FILE:antdt-run> -n 3 --restarts 2 --
                 $<TARGET_FILE:antdt_policy_perf> --steps 40 --global-batch 48 --sample-ms 0.1 --bytes 64K --check)
set_tests_properties(perf.policy.antdt-nd.still_slow PROPERTIES
  TIMEOUT 120
  LABELS perf
  PROCESSORS 3
  RESOURCE_LOCK antdt_multiprocess
  ENVIRONMENT "UCX_WARN_UNUSED_ENV_VARS=n;ANTDT_TIMEOUT_MS=30000"
  FAIL_REGULAR_EXPRESSION "error:|inconsistent")
# kill -9 of rank 0 during partial steps with the arbiter in an antdt-coordinator
# apart: the job completes, every sample once (docs/partial.md#where-the-arbiter-runs).
add_test(NAME integration.policy.rank0_kill_external
         COMMAND ${PROJECT_SOURCE_DIR}/tests/integration/policy_rank0_kill.sh $<TARGET_FILE:antdt-run>
                 $<TARGET_FILE:antdt-coordinator> $<TARGET_FILE:antdt_policy_perf>)
set_tests_properties(integration.policy.rank0_kill_external PROPERTIES
  TIMEOUT 180
  LABELS "integration;perf"
  PROCESSORS 4
  RESOURCE_LOCK antdt_multiprocess
  FAIL_REGULAR_EXPRESSION "FAIL|inconsistent")
