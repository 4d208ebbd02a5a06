# GPU benchmarks, built only when cmake/cuda.cmake enabled CUDA. They measure
# internal kernels, so they link the static library (internals visible).
#
# antdt_reduce_kernel_bench: `a += b` with antdt's reduction kernels and with
# cub::DeviceTransform, beside a device-to-device copy from the same run.
add_executable(antdt_reduce_kernel_bench
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce_kernel_bench.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce_kernel_bench_cub.cu
  $<TARGET_OBJECTS:antdt_perf_common_obj>)
target_include_directories(antdt_reduce_kernel_bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(antdt_reduce_kernel_bench PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${ANTDT_WARNINGS}>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow>)
target_link_libraries(antdt_reduce_kernel_bench PRIVATE antdt_comm_static CUDA::cudart CLI11::CLI11)

# antdt_allreduce_device_perf: antdt_allreduce_perf from GPU memory (-G or
# ANTDT_MEM=device), a stream synchronised per call. Links the shared library,
# as applications do, and the CUDA runtime for its own buffers.
add_executable(antdt_allreduce_device_perf ${CMAKE_CURRENT_SOURCE_DIR}/antdt_allreduce_device_perf.cpp)
target_compile_options(antdt_allreduce_device_perf PRIVATE ${ANTDT_WARNINGS})
target_link_libraries(antdt_allreduce_device_perf PRIVATE antdt_perf_common CUDA::cudart)
set_target_properties(antdt_allreduce_device_perf PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS antdt_allreduce_device_perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)
