# The coordinator's and bootstrap root's measurements (docs/benchmarks.md,
# "Coordinator commit rate" and "Unauthenticated connection flood"). They use
# internal classes (CoordinatorService, CoordinatorClient), so they link the
# static library, whose internals are visible. The ctest runs are smoke runs:
# they check that the tools run and that their own checks hold, not a speed.
foreach(tool antdt_coordinator_commit_perf antdt_flood_perf)
  add_executable(${tool} ${CMAKE_CURRENT_SOURCE_DIR}/${tool}.cpp)
  target_compile_options(${tool} PRIVATE ${ANTDT_WARNINGS})
  target_include_directories(${tool} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${tool} PRIVATE antdt_comm_static CLI11::CLI11)
  install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)
endforeach()

if(ANTDT_BUILD_TESTS)
  add_test(NAME perf.coordinator.commit_rate
           COMMAND antdt_coordinator_commit_perf --clients 4,16 --seconds 0.5 --warmup 0.1
                   --dir ${CMAKE_CURRENT_BINARY_DIR})
  add_test(NAME perf.flood.smoke
           COMMAND antdt_flood_perf --connections 100 --ranks 2 --repeats 1)
  set_tests_properties(perf.coordinator.commit_rate perf.flood.smoke PROPERTIES
    TIMEOUT 120 LABELS perf RESOURCE_LOCK antdt_multiprocess)
endif()
