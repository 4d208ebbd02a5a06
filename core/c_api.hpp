// The C API's shared plumbing (defined in core/api.cpp): every C function runs
// its body through c_api_call, which turns an antdt::Error into its status
// code and keeps the message for antdtLastError().
#pragma once

#include <antdt/comm.h>
#include <antdt/comm.hpp>

#include <type_traits>

// The object behind an antdtComm_t. Defined here (not in core/api.cpp) so that
// the Agent's C API can hand out a handle to the communicator it owns.
struct antdtComm {
  antdt::Communicator comm;
};

namespace antdt::detail {

antdtStatus_t c_api_call(void (*body)(void*), void* context) noexcept;
// The communicator behind a handle (InvalidArgument when null).
Communicator& c_api_comm(antdtComm_t comm);
// A C dtype / op code checked (InvalidArgument naming the bad value).
DataType c_api_dtype(antdtDataType_t t);
ReduceOp c_api_op(antdtReduceOp_t o);

// Runs `body` (any callable) under c_api_call, without allocating.
template <class Body>
antdtStatus_t c_api_guarded(Body&& body) noexcept {
  using B = std::remove_reference_t<Body>;
  return c_api_call([](void* context) { (*static_cast<B*>(context))(); }, &body);
}

}  // namespace antdt::detail
