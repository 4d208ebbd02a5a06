// The algorithms, one file each, written against coll::Call only. The entry
// points in collectives.hpp validate arguments and choose among them.
#pragma once

#include "collectives/call.hpp"

namespace antdt::coll {

// Pipelined ring: reduce-scatter then allgather, each rank's segment split in
// chunks of ANTDT_CHUNK_BYTES; a chunk is forwarded as soon as it is reduced.
// Runs over `members` in that order (every rank of the communicator when empty);
// the calling rank must be one of them.
void allreduce_ring(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                    ReduceOp op, std::span<const int> members = {});

// Pipelined chain root -> root+1 -> ... (large messages).
void broadcast_chain(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root);
// Binomial tree (small messages: log2(n) latency).
void broadcast_binomial_tree(Call& call, const std::byte* send, std::byte* recv, std::size_t bytes, int root);

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
void barrier_dissemination(Call& call);

}  // namespace antdt::coll
