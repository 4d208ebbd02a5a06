// Helpers of the native mode: dtype/op conversion, error translation, the
// process-wide last error, and the thread's group-call recording.
#pragma once

#include "shim_comm.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace antdt_nccl {

// Records `message` as the last error (of `comm` when given, and of the
// process: ncclGetLastError(NULL)) and returns `code`.
ncclResult_t fail(ncclComm_t comm, ncclResult_t code, const std::string& message);
std::string last_error(ncclComm_t comm);

// The NCCL code for an antdt error.
ncclResult_t code_of(const antdt::Error& e);

// The NCCL code of the exception being handled (recorded as the last error); a
// lost peer also becomes the communicator's async error. Only inside a catch.
ncclResult_t current_exception_code(ncclComm_t comm, const char* what);

// Runs `body` translating every exception into an NCCL code. A template, not a
// std::function: the 8-byte AllReduce path allocates nothing and is inlined.
template <class Body>
ncclResult_t guarded(ncclComm_t comm, const char* what, Body&& body) {
  try {
    body();
    return ncclSuccess;
  } catch (...) {
    return current_exception_code(comm, what);
  }
}

// false (and the last error set) for fp8 and unknown types.
bool to_dtype(ncclComm_t comm, ncclDataType_t t, antdt::DataType& out);
std::size_t nccl_dtype_size(ncclDataType_t t);

// A usable communicator: not null, initialized (a non-blocking init is waited
// for), neither revoked nor finalized nor aborted. Otherwise the NCCL code.
ncclResult_t usable(ncclComm_t comm, const char* what);

// The calls of a group (ncclGroupStart .. ncclGroupEnd), per thread: each is run
// against its communicator inside that communicator's antdt group at the end.
struct GroupedCall {
  ncclComm_t comm;
  std::function<void(antdt::Communicator&)> run;
  std::vector<std::byte> scratch;  // kept alive until the group ran
  bool collective = true;          // runs inside the antdt group (false: split, which runs collectives itself)
  bool point_to_point = false;     // send/recv: leaves a running partial run alone (only two ranks meet)
};
int& group_depth();
std::vector<GroupedCall>& group_calls();

// Ends the communicator's running partial run (ANTDT_NCCL_LATE), if any: every
// rank meets at the same call (partial_finish), so no rank is still inside a
// partial step when any other collective, a split or a destroy runs. Throws.
void end_partial_run(ncclComm_t comm);

// Records a call of an open group (run at ncclGroupEnd).
enum class CallKind { collective, point_to_point };
ncclResult_t record(ncclComm_t comm, std::function<void(antdt::Communicator&)> run, CallKind kind);

// Runs `run` now, or records it when a group is open. Inside a group, errors
// surface at ncclGroupEnd (as in NCCL). A collective ends a running partial run
// first; a point-to-point call does not (its peers alone take part).
template <class Run>
ncclResult_t run_or_record(ncclComm_t comm, const char* what, Run&& run, CallKind kind = CallKind::collective) {
  if (group_depth() > 0) return record(comm, std::forward<Run>(run), kind);
  return guarded(comm, what, [&] {
    if (kind != CallKind::point_to_point) end_partial_run(comm);
    run(*comm->comm);
  });
}

}  // namespace antdt_nccl
