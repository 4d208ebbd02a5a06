# Sanitizer builds (docs/testing.md, "Sanitizers"):
#   -DANTDT_SANITIZE=address   AddressSanitizer + UndefinedBehaviorSanitizer
#   -DANTDT_SANITIZE=thread    ThreadSanitizer
# Every target of the tree (library, tests, tools) is instrumented, and UBSan
# findings abort (-fno-sanitize-recover) so a test fails instead of printing.
# The ISA-dispatch clones of core/dtype.cpp (target_clones, an ifunc the loader
# resolves before the sanitizer runtime is up) are left out: ANTDT_NO_ISA_CLONES.
set(ANTDT_SANITIZE "" CACHE STRING "Sanitizer build: empty (none), address (ASan+UBSan) or thread (TSan)")
set_property(CACHE ANTDT_SANITIZE PROPERTY STRINGS "" address thread)

if(ANTDT_SANITIZE STREQUAL "address")
  set(ANTDT_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(ANTDT_SANITIZE STREQUAL "thread")
  set(ANTDT_SANITIZER_FLAGS -fsanitize=thread)
elseif(NOT ANTDT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "ANTDT_SANITIZE='${ANTDT_SANITIZE}': use address, thread or leave it empty")
endif()

if(ANTDT_SANITIZER_FLAGS)
  # Frame pointers for readable stacks; -O1 (after the build type's -O2, so it
  # wins) roughly halves the instrumented compile time and keeps stacks exact.
  # Host code only (nvcc does not take these).
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${ANTDT_SANITIZER_FLAGS};-fno-omit-frame-pointer;-O1>")
  add_link_options(${ANTDT_SANITIZER_FLAGS})
  add_compile_definitions(ANTDT_NO_ISA_CLONES=1)
  message(STATUS "ANTDT_SANITIZE=${ANTDT_SANITIZE}: ${ANTDT_SANITIZER_FLAGS}")
endif()

# libFuzzer (docs/fuzzing.md): -DANTDT_FUZZ=ON with clang builds the targets of
# tests/fuzz as fuzzers and instruments the library for coverage. Without it
# (gcc too) the same targets are built with a replay main that ctest runs over
# the seed corpora.
option(ANTDT_FUZZ "Build tests/fuzz as libFuzzer fuzzers (needs clang)" OFF)
if(ANTDT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ANTDT_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                        "-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()

# clang links its sanitizer and libFuzzer runtimes into executables only, so a
# shared library of a clang sanitizer or fuzz build leaves __asan_*, __tsan_*,
# __ubsan_* and __sancov_* to the program that loads it: the library's
# --no-undefined link check is dropped there (CMakeLists.txt, antdt_comm).
# gcc links its runtimes into shared libraries too and keeps the check.
set(ANTDT_SANITIZER_RUNTIME_IN_PROGRAM OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND (ANTDT_SANITIZER_FLAGS OR ANTDT_FUZZ))
  set(ANTDT_SANITIZER_RUNTIME_IN_PROGRAM ON)
endif()

# Seconds an mpirun test may take (tests/integration): instrumented ranks,
# oversubscribed on a 2-core CI machine, compute their checks several times
# slower (ASan + UBSan + libFuzzer's comparison tracing), so sanitizer builds
# allow 5x the plain build's 120 s.
set(ANTDT_MPI_TEST_TIMEOUT_S 120)
if(ANTDT_SANITIZER_FLAGS)
  set(ANTDT_MPI_TEST_TIMEOUT_S 600)
endif()
