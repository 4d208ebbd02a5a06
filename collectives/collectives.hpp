// Collective entry points on a communicator: argument checks, algorithm
// selection, and the Call that bounds and checks every message.
#pragma once

#include <antdt/comm.hpp>

#include "core/communicator.hpp"

namespace antdt::coll {

void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root);
void barrier(detail::CommImpl& comm);

// Below this many bytes broadcast uses the binomial tree, above it the pipelined chain.
inline constexpr std::size_t kBroadcastTreeMaxBytes = 64 * 1024;

}  // namespace antdt::coll
