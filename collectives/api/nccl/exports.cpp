// The exported NCCL API: ncclX and pncclX (its alias, the profiling entry
// points) for every function of nccl.h, dispatched to the mode chosen by
// ANTDT_NCCL_MODE (native: antdt does the work; passthrough: the real NCCL).
// The version script (nccl_shim.map) exports these and nothing else.
#include "native.hpp"
#include "passthrough.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace antdt_nccl {
namespace {
bool passthrough_mode() {
  static const bool on = [] {
    const char* mode = std::getenv("ANTDT_NCCL_MODE");
    if (mode == nullptr || std::strcmp(mode, "native") == 0 || mode[0] == '\0') return false;
    if (std::strcmp(mode, "passthrough") == 0) return true;
    std::fprintf(stderr, "libantdt_nccl: ANTDT_NCCL_MODE=%s is not native or passthrough; using native\n", mode);
    return false;
  }();
  return on;
}
}  // namespace
}  // namespace antdt_nccl

#define NCCL_FN(ret, name, params, args)                                                          \
  extern "C" __attribute__((visibility("default"))) ret nccl##name params {                       \
    if (antdt_nccl::passthrough_mode())                                                           \
      return antdt_nccl::passthrough::forward(antdt_nccl::passthrough::Fn::name,                  \
                                              antdt_nccl::passthrough::real().name                \
                                              NCCL_COMMA_ARGS args);                              \
    return antdt_nccl::native::name args;                                                         \
  }                                                                                               \
  extern "C" __attribute__((visibility("default"), alias("nccl" #name))) ret pnccl##name params;
// (a, b) -> , a, b   and () -> nothing
#define NCCL_COMMA_ARGS(...) __VA_OPT__(, ) __VA_ARGS__
#include "nccl_functions.def"
#undef NCCL_FN
