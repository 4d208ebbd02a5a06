# The Monitor's overhead benchmark. It measures internal classes (StepTimer,
# Monitor, TraceWriter), so it links the static library, whose internals are
# visible, rather than the shared one.
add_executable(antdt_monitor_overhead_bench ${CMAKE_CURRENT_SOURCE_DIR}/monitor_overhead_bench.cpp
  $<TARGET_OBJECTS:antdt_perf_common_obj>)
target_include_directories(antdt_monitor_overhead_bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(antdt_monitor_overhead_bench PRIVATE ${ANTDT_WARNINGS})
target_link_libraries(antdt_monitor_overhead_bench PRIVATE antdt_comm_static CLI11::CLI11)
