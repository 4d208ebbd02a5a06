# ctest check (cmake -P): the shared library exports only the public API.
#   -DLIBRARY=  libantdt_comm.so     -DNM= nm     -DCXXFILT= c++filt (for messages)
#   -DHEADER_DIR=  include/antdt (the public headers)
# Allowed dynamic symbols:
#   - C symbols whose name starts with "antdt" (the C API of comm.h);
#   - C++ symbols in namespace antdt whose first name inside antdt (the class,
#     enum or function) is declared in the public headers, including typeinfo,
#     typeinfo names and vtables of those classes.
# Everything else (std:: template instantiations, antdt::detail, UCX/hwloc
# symbols, internal antdt helpers) fails the check and is listed by name.
# Some symbols must be exported: the C API's antdtGetVersion, and the typeinfo
# of antdt::Error and antdt::InvalidArgument (catching antdt errors by type in a
# program needs the library's typeinfo to be visible).
cmake_minimum_required(VERSION 3.20)

foreach(var LIBRARY NM HEADER_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_exports.cmake: -D${var}= is required")
  endif()
endforeach()
if(NOT EXISTS "${LIBRARY}")
  message(FATAL_ERROR "check_exports.cmake: ${LIBRARY} does not exist")
endif()

# Names declared at namespace antdt scope in the public headers.
set(id "[A-Za-z_][A-Za-z0-9_]*")
set(public_names "")
file(GLOB headers "${HEADER_DIR}/*.h" "${HEADER_DIR}/*.hpp")
foreach(header IN LISTS headers)
  file(READ "${header}" text)
  foreach(pattern
      "class ANTDT_API ${id}"           # exported classes
      "ANTDT_DECLARE_ERROR\\(${id}"     # the Error subclasses
      "struct ${id}"
      "enum class ${id}"
      "ANTDT_API [^;{(]*[^A-Za-z0-9_(]${id}\\(")  # exported functions
    string(REGEX MATCHALL "${pattern}" found "${text}")
    foreach(decl IN LISTS found)
      string(REGEX REPLACE "\\($" "" decl "${decl}")
      string(REGEX MATCH "${id}$" name "${decl}")
      list(APPEND public_names "${name}")
    endforeach()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES public_names)
list(REMOVE_ITEM public_names detail)
if(NOT "Communicator" IN_LIST public_names OR NOT "Error" IN_LIST public_names)
  message(FATAL_ERROR "check_exports.cmake: could not read the public declarations in ${HEADER_DIR} "
                      "(found: ${public_names})")
endif()

execute_process(COMMAND "${NM}" -D --defined-only --format=posix "${LIBRARY}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_exports.cmake: ${NM} -D failed on ${LIBRARY}: ${nm_err}")
endif()

string(REPLACE "\n" ";" lines "${nm_out}")
set(offending "")
set(exported_count 0)
set(required antdtGetVersion _ZTIN5antdt5ErrorE _ZTIN5antdt15InvalidArgumentE)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([^ ]+) ([A-Za-z]) ")
    continue()
  endif()
  set(symbol "${CMAKE_MATCH_1}")
  set(type "${CMAKE_MATCH_2}")
  # Strip a symbol version (name@VERSION or name@@VERSION).
  string(REGEX REPLACE "@.*$" "" symbol "${symbol}")
  # Version definition nodes are absolute symbols, not code or data.
  if(type STREQUAL "A")
    continue()
  endif()
  math(EXPR exported_count "${exported_count} + 1")
  list(REMOVE_ITEM required "${symbol}")
  if(NOT symbol MATCHES "^_Z")
    if(NOT symbol MATCHES "^antdt")
      list(APPEND offending "${symbol}")
    endif()
    continue()
  endif()
  # Itanium mangling: an entity in namespace antdt is a nested name
  # N [cv/ref qualifiers] 5antdt <length><name> ..., optionally behind TV/TI/TS
  # (vtable, typeinfo, typeinfo name).
  if(symbol MATCHES "^_Z(TV|TI|TS)?N[rVKRO]*5antdt([0-9]+)(.*)$")
    string(SUBSTRING "${CMAKE_MATCH_3}" 0 "${CMAKE_MATCH_2}" first_name)
    if(first_name IN_LIST public_names)
      continue()
    endif()
  endif()
  list(APPEND offending "${symbol}")
endforeach()

if(required)
  list(JOIN required ", " required)
  message(FATAL_ERROR "${LIBRARY} does not export ${required}, which must be visible to programs. "
                      "Its dynamic symbols:\n${nm_out}")
endif()

if(offending)
  list(LENGTH offending n)
  string(REPLACE ";" "\n" report "${offending}")
  if(CXXFILT)
    # c++filt prints one line per argument, demangled where it can.
    execute_process(COMMAND "${CXXFILT}" ${offending} OUTPUT_VARIABLE demangled RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      string(STRIP "${demangled}" report)
    endif()
  endif()
  string(REPLACE "\n" "\n  " report "${report}")
  message(FATAL_ERROR "${LIBRARY} exports ${n} symbol(s) outside the public API "
                      "(C: antdt*; C++: names declared in include/antdt):\n  ${report}")
endif()
message(STATUS "${LIBRARY}: ${exported_count} exported symbols, all in the public API")
