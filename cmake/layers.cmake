# The library's layers (docs/architecture.md#layers), bottom to top:
#
#   core -> transport -> cuda -> telemetry -> collectives -> scheduler -> api
#
# Each layer is an OBJECT library of its own that links only the layers below
# it (for their usage requirements: third-party include paths, definitions),
# and each third-party library is linked by the lowest layer that uses it, so a
# layer cannot even find the headers of a dependency it does not declare.
# tests/layering.cmake (ctest: Architecture.Layering) fails when a source file
# includes a header of a higher layer. The shared and the static library take
# every layer's object files (antdt_layer_objects()).

set(ANTDT_LAYERS core transport cuda telemetry collectives scheduler api)
# Where each layer's files live: folder=layer, the longest folder that matches
# a path wins. tests/layering.cmake reads this to tell a file's layer.
set(ANTDT_LAYER_FOLDERS
  core=core
  transport=transport
  cuda=cuda
  collectives/telemetry=telemetry
  collectives=collectives
  scheduler=scheduler
  collectives/api=api
  collectives/api/python=api  # antdt._agent: Python bindings on the public API only
  collectives/api/nccl=api    # libantdt_nccl.so: the NCCL ABI on the public API only
  collectives/api/torch=api)  # antdt.torch._C: the torch.distributed backend on the public API only

# antdt_layer(<name> SOURCES <files...> [BELOW <layers...>])
# Defines antdt_<name>; BELOW names the layers it links (the ones it may use).
function(antdt_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;BELOW" ${ARGN})
  list(FIND ANTDT_LAYERS ${name} level)
  if(level LESS 0)
    message(FATAL_ERROR "antdt_layer: '${name}' is not one of ANTDT_LAYERS (${ANTDT_LAYERS})")
  endif()
  foreach(below IN LISTS L_BELOW)
    list(FIND ANTDT_LAYERS ${below} below_level)
    if(below_level LESS 0 OR NOT below_level LESS level)
      message(FATAL_ERROR "antdt_layer: ${name} may only link layers below it, not '${below}'")
    endif()
  endforeach()
  add_library(antdt_${name} OBJECT ${L_SOURCES})
  target_compile_options(antdt_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ANTDT_WARNINGS}>)
  set_target_properties(antdt_${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_compile_definitions(antdt_${name} PUBLIC ANTDT_BUILDING_LIBRARY=1)
  target_include_directories(antdt_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  foreach(below IN LISTS L_BELOW)
    target_link_libraries(antdt_${name} PUBLIC antdt_${below})
  endforeach()
endfunction()

# The object files of every layer, for the libraries.
function(antdt_layer_objects out)
  set(objects)
  foreach(layer IN LISTS ANTDT_LAYERS)
    list(APPEND objects $<TARGET_OBJECTS:antdt_${layer}>)
  endforeach()
  set(${out} ${objects} PARENT_SCOPE)
endfunction()
