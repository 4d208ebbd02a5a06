// Passthrough mode: the real NCCL does the work; the shim forwards every call
// unchanged and only measures it (docs/nccl.md#passthrough).
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace antdt_nccl::passthrough {

// The real library's entry points (ANTDT_NCCL_LIBRARY, else the next
// libnccl.so.2 that is not this shim); a missing one is null.
struct Table {
#define NCCL_FN(ret, name, params, args) ret(*name) params = nullptr;
#include "nccl_functions.def"
#undef NCCL_FN
};
const Table& real();

// Every function of the table by its .def name (Fn::AllReduce): the forwarded
// call carries it, so the per-call accounting indexes an array and tests the
// few functions that matter (groups, AllReduce, teardown) without comparing names.
enum class Fn : std::uint16_t {
#define NCCL_FN(ret, name, params, args) name,
#include "nccl_functions.def"
#undef NCCL_FN
  count
};
inline constexpr std::size_t kFnCount = static_cast<std::size_t>(Fn::count);
const char* fn_name(Fn f) noexcept;  // "ncclAllReduce"

// Accounts one forwarded call: CPU time, and the CUDA events recorded around it
// on its stream (read later without synchronizing). `begin` returns a token.
struct CallTiming {
  std::chrono::steady_clock::time_point start;
  void* begin_event = nullptr;
  cudaStream_t stream = nullptr;
};
CallTiming begin_call(cudaStream_t stream, bool has_stream);
// `comm` is the call's communicator (null for calls without one): each
// ncclAllReduce outside a group ends one of its Monitor steps.
void end_call(Fn fn, const CallTiming& t, ncclComm_t comm);
ncclResult_t missing(Fn fn);
// Before the real ncclCommFinalize / ncclCommDestroy / ncclCommAbort of `comm`:
// the cross-rank straggler report (passthrough_report.cpp) where it is due.
void before_teardown(Fn fn, ncclComm_t comm);
// Waits for the device, then reads every recorded event (only at teardown).
void settle_events();

template <class A>
void find_stream(cudaStream_t& stream, bool& has, A a) {
  if constexpr (std::is_same_v<A, cudaStream_t>) {
    stream = a;
    has = true;
  }
}
template <class A>
void find_comm(ncclComm_t& comm, A a) {
  if constexpr (std::is_same_v<A, ncclComm_t>) {
    if (comm == nullptr) comm = a;
  }
}

// Forwards one call to the real library, unchanged.
template <class R, class... P, class... A>
R forward(Fn id, R (*fn)(P...), A... a) {
  if (fn == nullptr) {
    if constexpr (std::is_same_v<R, ncclResult_t>) return missing(id);
    else if constexpr (std::is_pointer_v<R>) return (missing(id), "libantdt_nccl passthrough: function missing in the real NCCL");
    else return;
  }
  cudaStream_t stream = nullptr;
  bool has_stream = false;
  ncclComm_t comm = nullptr;
  (find_stream(stream, has_stream, a), ...);
  (find_comm(comm, a), ...);
  if (comm != nullptr) before_teardown(id, comm);
  const CallTiming t = begin_call(stream, has_stream);
  if constexpr (std::is_void_v<R>) {
    fn(a...);
    end_call(id, t, comm);
  } else {
    R r = fn(a...);
    end_call(id, t, comm);
    return r;
  }
}

}  // namespace antdt_nccl::passthrough
