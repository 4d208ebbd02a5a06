// The C ABI's shared plumbing (collectives/api/c_api.cpp): every C function of
// include/antdt/*.h runs its body through c_api_guarded, which turns an
// antdt::Error into its status code and keeps the message for antdtLastError().
// The C functions themselves: comm_c_api.cpp, pushpull_c_api.cpp, agent_c_api.cpp.
#pragma once

#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include <type_traits>

// The object behind an antdtComm_t. Defined here so that the Agent's C API can
// hand out a handle to the communicator it owns.
struct antdtComm {
  antdt::Communicator comm;
};

namespace antdt::api {

// Runs body(context): ANTDT_OK, or the status of what it threw (the message
// kept for c_api_last_error()). Never throws.
antdtStatus_t c_api_call(void (*body)(void*), void* context) noexcept;
// The message of the calling thread's last failed C call ("" after a success).
const char* c_api_last_error() noexcept;
// The communicator behind a handle (InvalidArgument when null).
Communicator& c_api_comm(antdtComm_t comm);
// A C dtype / op code checked (InvalidArgument naming the bad value).
DataType c_api_dtype(antdtDataType_t t);
ReduceOp c_api_op(antdtReduceOp_t o);
// A caller's result struct: null, or with a struct_size that covers the
// struct (InvalidArgument otherwise). Checked before the call runs.
void c_api_check_partial_result(const antdtPartialResult* out);
// The versioned C struct from the C++ result (`out` checked as above, may be null).
void c_api_partial_result(const PartialResult& r, antdtPartialResult* out);

// Runs `body` (any callable) under c_api_call, without allocating.
template <class Body>
antdtStatus_t c_api_guarded(Body&& body) noexcept {
  using B = std::remove_reference_t<Body>;
  return c_api_call([](void* context) { (*static_cast<B*>(context))(); }, &body);
}

}  // namespace antdt::api
