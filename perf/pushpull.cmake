# antdt_pushpull_perf (push-pull rounds, nccl-tests columns) and its mpirun
# smoke tests. Included from perf/CMakeLists.txt after suite.cmake, whose
# antdt_add_perf_smoke_test registers them when MPI and tests are available.
add_executable(antdt_pushpull_perf ${CMAKE_CURRENT_SOURCE_DIR}/antdt_pushpull_perf.cpp)
target_compile_options(antdt_pushpull_perf PRIVATE ${ANTDT_WARNINGS})
target_link_libraries(antdt_pushpull_perf PRIVATE antdt_perf_common)
set_target_properties(antdt_pushpull_perf PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS antdt_pushpull_perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT perf)
if(ANTDT_CUDA_ENABLED)
  # -G / ANTDT_MEM=device: the tool allocates its tensors with cudaMalloc.
  target_link_libraries(antdt_pushpull_perf PRIVATE CUDA::cudart)
  target_compile_definitions(antdt_pushpull_perf PRIVATE ANTDT_PUSHPULL_PERF_CUDA=1)
endif()

if(COMMAND antdt_add_perf_smoke_test)
  # Sizes across several 4 KiB partitions (ANTDT_PS_PARTITION_BYTES=4K), odd rank counts, every float dtype.
  antdt_add_perf_smoke_test(mpi.perf.pushpull.np2 2 $<TARGET_FILE:antdt_pushpull_perf> -b 0 -e 64K -f 16 -n 2 -w 1 -c 1)
  antdt_add_perf_smoke_test(mpi.perf.pushpull.np3 3 $<TARGET_FILE:antdt_pushpull_perf> -b 8 -e 64K -f 8 -n 2 -w 1 -c 1
    -d float,bfloat16,double,int32)
  antdt_add_perf_smoke_test(mpi.perf.pushpull.np3.avg 3 $<TARGET_FILE:antdt_pushpull_perf> -b 8 -e 64K -f 8 -n 2 -w 1
    -c 1 -d float,half -o avg)
  set_property(TEST mpi.perf.pushpull.np3 mpi.perf.pushpull.np3.avg APPEND PROPERTY ENVIRONMENT
    ANTDT_PS_PARTITION_BYTES=4K)
endif()
