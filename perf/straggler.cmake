# The straggler benchmark (docs/benchmarks.md). It reads ANTDT_INJECT through the
# library's Injector (core/inject.hpp), an internal class, so it links the
# static library, whose internals are visible, and compiles the perf tools'
# shared pieces in (antdt_perf_common links the shared library).
add_executable(antdt_straggler_perf
  ${CMAKE_CURRENT_SOURCE_DIR}/antdt_straggler_perf.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/perf_common.cpp)
target_compile_options(antdt_straggler_perf PRIVATE ${ANTDT_WARNINGS})
target_include_directories(antdt_straggler_perf PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(antdt_straggler_perf PRIVATE antdt_comm_static CLI11::CLI11)
install(TARGETS antdt_straggler_perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)
