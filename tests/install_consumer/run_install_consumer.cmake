# ctest driver (cmake -P): installs the AntDT build tree into a fresh temporary
# prefix, builds ./consumer against it and runs the consumers.
#   -DANTDT_BUILD_DIR=  the build tree to install
#   -DCONSUMER_SOURCE_DIR=, -DWORK_DIR=  the consumer project, and a scratch directory
#   -DGENERATOR= -DMAKE_PROGRAM= -DC_COMPILER= -DCXX_COMPILER=  as in the main build
#   -DLIBDIR=  CMAKE_INSTALL_LIBDIR of the main build
cmake_minimum_required(VERSION 3.20)

foreach(var ANTDT_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR C_COMPILER CXX_COMPILER LIBDIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_consumer.cmake: -D${var}= is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc}):\n  ${ARGN}\n${out}")
  endif()
  message(STATUS "install_consumer: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("cmake --install" "${CMAKE_COMMAND}" --install "${ANTDT_BUILD_DIR}" --prefix "${prefix}")

set(expected_files
  include/antdt/comm.h include/antdt/comm.hpp include/antdt/export.h
  ${LIBDIR}/libantdt_comm.so ${LIBDIR}/libantdt_comm.so.0 ${LIBDIR}/libantdt_comm.a
  ${LIBDIR}/pkgconfig/antdt_comm.pc
  ${LIBDIR}/cmake/antdt_comm/antdt_commConfig.cmake
  ${LIBDIR}/cmake/antdt_comm/antdt_commConfigVersion.cmake
  ${LIBDIR}/cmake/antdt_comm/antdt_comm-shared-targets.cmake
  ${LIBDIR}/cmake/antdt_comm/antdt_comm-static-targets.cmake)
foreach(f IN LISTS expected_files)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "install_consumer: the install did not produce ${f}")
  endif()
endforeach()
# The exported interface must not leak the build: no source or build paths and
# no reference to the internal object libraries (the layers).
file(GLOB exported_cmake "${prefix}/${LIBDIR}/cmake/antdt_comm/*.cmake")
foreach(f IN LISTS exported_cmake)
  file(READ "${f}" text)
  foreach(leak antdt_core antdt_transport antdt_cuda antdt_telemetry antdt_collectives antdt_scheduler antdt_api
               ANTDT_BUILDING_LIBRARY "${ANTDT_BUILD_DIR}")
    string(FIND "${text}" "${leak}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install_consumer: ${f} mentions '${leak}', an internal of the build")
    endif()
  endforeach()
endforeach()

# The consumer must see only the new prefix through pkg-config.
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
set(configure_args -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
  "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_PREFIX_PATH=${prefix}" "-DANTDT_PREFIX=${prefix}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run_step("configure the consumer" "${CMAKE_COMMAND}" ${configure_args})
run_step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")

find_program(LDD ldd)
foreach(exe consumer_cpp consumer_cpp_static consumer_c consumer_c_static)
  run_step("run ${exe}" "${consumer_build}/${exe}")
  message(STATUS "${step_output}")
  if(LDD)
    # The shared-library consumers must load the installed library; the static
    # ones must not load any libantdt_comm.so.
    execute_process(COMMAND "${LDD}" "${consumer_build}/${exe}" OUTPUT_VARIABLE deps ERROR_VARIABLE deps)
    string(REGEX MATCH "libantdt_comm\\.so[^ ]* => ([^ ]+)" loaded "${deps}")
    set(loaded_path "${CMAKE_MATCH_1}")
    if(exe MATCHES "_static$")
      if(loaded)
        message(FATAL_ERROR "install_consumer: ${exe} should be statically linked but loads ${loaded_path}")
      endif()
    else()
      get_filename_component(loaded_path "${loaded_path}" REALPATH)
      get_filename_component(real_prefix "${prefix}" REALPATH)
      string(FIND "${loaded_path}" "${real_prefix}/" at)
      if(NOT at EQUAL 0)
        message(FATAL_ERROR "install_consumer: ${exe} loads '${loaded_path}', not the library in ${prefix}:\n${deps}")
      endif()
    endif()
  endif()
endforeach()
message(STATUS "install_consumer: all consumers built against ${prefix} and passed")
