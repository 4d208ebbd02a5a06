# GPU benchmarks, built only when cmake/cuda.cmake enabled CUDA. They measure
# internal kernels, so they link the static library (internals visible).
#
# antdt_reduce_kernel_bench: `a += b` with antdt's reduction kernels and with
# cub::DeviceTransform, beside a device-to-device copy from the same run.
add_executable(antdt_reduce_kernel_bench
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce_kernel_bench.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce_kernel_bench_cub.cu)
target_compile_options(antdt_reduce_kernel_bench PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${ANTDT_WARNINGS}>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow>)
target_link_libraries(antdt_reduce_kernel_bench PRIVATE antdt_comm_static CUDA::cudart CLI11::CLI11)
