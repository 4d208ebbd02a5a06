# Installation: headers, the shared and static libraries, a CMake package
# (find_package(antdt_comm) -> antdt::comm, antdt::comm_static) and pkg-config
# (antdt_comm.pc). Both files are relocatable: `cmake --install <build>
# --prefix <dir>` works for any <dir>.
#
# The layers' OBJECT libraries (cmake/layers.cmake) are never exported: the two
# libraries take their object files through $<TARGET_OBJECTS:...> and do not
# link them, so neither the object libraries nor their usage requirements (ANTDT_BUILDING_LIBRARY, the source-tree include
# path) appear in the exported link interfaces.

set(ANTDT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/antdt_comm" CACHE STRING
    "Where the antdt_comm CMake package files are installed (relative to the prefix)")
set(ANTDT_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
    "Where antdt_comm.pc is installed (relative to the prefix)")

set_target_properties(antdt_comm PROPERTIES EXPORT_NAME comm)
set_target_properties(antdt_comm_static PROPERTIES EXPORT_NAME comm_static)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/antdt
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT development
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

install(TARGETS antdt_comm EXPORT antdt_comm_shared_targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development)
install(TARGETS antdt_comm_static EXPORT antdt_comm_static_targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)

# Two export files so that users of the shared library need none of the static
# library's dependencies (UCX, hwloc, ... development files) to be installed.
install(EXPORT antdt_comm_shared_targets
  NAMESPACE antdt:: FILE antdt_comm-shared-targets.cmake
  DESTINATION ${ANTDT_INSTALL_CMAKEDIR} COMPONENT development)
install(EXPORT antdt_comm_static_targets
  NAMESPACE antdt:: FILE antdt_comm-static-targets.cmake
  DESTINATION ${ANTDT_INSTALL_CMAKEDIR} COMPONENT development)

# The config file re-finds the static library's dependencies by the same means
# and names as this build does (the exported targets refer to these names).
set(ANTDT_CONFIG_CUDA_ENABLED ${ANTDT_CUDA_ENABLED})
set(ANTDT_CONFIG_CUDA_ROOT "")
if(ANTDT_CUDA_ENABLED)
  get_filename_component(ANTDT_CONFIG_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/antdt_commConfig.cmake.in
  ${PROJECT_BINARY_DIR}/antdt_commConfig.cmake
  INSTALL_DESTINATION ${ANTDT_INSTALL_CMAKEDIR})
# 0.x releases may break compatibility between minor versions.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/antdt_commConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/antdt_commConfig.cmake
  ${PROJECT_BINARY_DIR}/antdt_commConfigVersion.cmake
  DESTINATION ${ANTDT_INSTALL_CMAKEDIR} COMPONENT development)

# ---------------------------------------------------------------------------
# pkg-config. prefix is derived from the .pc file's own location so the
# installed tree can move; Libs.private lists what a static link needs.
# ---------------------------------------------------------------------------
get_filename_component(ANTDT_PC_CRYPTO_DIR "${OPENSSL_CRYPTO_LIBRARY}" DIRECTORY)
set(ANTDT_PC_PRIVATE_FLAGS ${UCX_LDFLAGS} ${HWLOC_LDFLAGS} ${IBVERBS_LDFLAGS} "-L${ANTDT_PC_CRYPTO_DIR}" -lcrypto)
list(APPEND ANTDT_PC_PRIVATE_FLAGS -lsqlite3)
if(ANTDT_CUDA_ENABLED)
  list(APPEND ANTDT_PC_PRIVATE_FLAGS "-L${CUDAToolkit_LIBRARY_DIR}" -lcudart)
endif()
# The library is C++: a C program linking the archive needs the C++ runtime.
list(APPEND ANTDT_PC_PRIVATE_FLAGS -pthread -lstdc++ -lm)
# The compiler searches its own directories anyway; naming them is only noise.
foreach(dir IN LISTS CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
  list(REMOVE_ITEM ANTDT_PC_PRIVATE_FLAGS "-L${dir}")
endforeach()
list(REMOVE_DUPLICATES ANTDT_PC_PRIVATE_FLAGS)
list(JOIN ANTDT_PC_PRIVATE_FLAGS " " ANTDT_PC_LIBS_PRIVATE)

if(IS_ABSOLUTE "${ANTDT_INSTALL_PKGCONFIGDIR}")
  set(ANTDT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH ANTDT_PC_UP "/prefix/${ANTDT_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" ANTDT_PC_UP "${ANTDT_PC_UP}")
  set(ANTDT_PC_PREFIX "\${pcfiledir}/${ANTDT_PC_UP}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(ANTDT_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(ANTDT_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/antdt_comm.pc.in ${PROJECT_BINARY_DIR}/antdt_comm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/antdt_comm.pc
  DESTINATION ${ANTDT_INSTALL_PKGCONFIGDIR} COMPONENT development)
