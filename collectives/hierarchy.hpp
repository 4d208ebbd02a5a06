// The node hierarchy of a call's ranks and the ring steps the topology-aware
// collectives (collectives/*_hierarchical.cpp) are built from.
//
// The ranks of a call (every rank of the communicator, or a partial step's
// contributors) are grouped by node (CommImpl::node_of: ANTDT_NODE_ID, else
// host name and boot id). With every node holding the same number L of them,
// rank (node j, local position q) is the q-th of node j's ranks in rank order;
// the ranks at one position on every node form that position's inter-node
// ring, the ranks of one node its local ring. Every rank computes the same
// hierarchy from the node map it shares with the others.
//
// The AllReduce, ReduceScatter and AllGather(v) walk their rings block by
// block through collectives/block_pipeline.hpp. Broadcast's intra-node
// allgather uses ring_allgather_units below: a unit of a ring of m members is
// what member u owns at the start; its pieces need not be contiguous, so
// nothing is packed. Pieces are cut into ANTDT_CHUNK_BYTES chunks, each one
// message, and every piece has at least one (possibly empty) chunk, so the
// message stream does not depend on the count and mismatched calls stay
// detectable.
// Uses collectives/call.hpp.
#pragma once

#include "collectives/call.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace antdt::coll {

struct Hierarchy {
  // Nodes in the order they first appear among the members, each with its
  // members in rank order. Equal sizes when `uniform`.
  std::vector<std::vector<int>> nodes;
  bool uniform = true;
  std::size_t node = 0;      // this rank's node (index in nodes)
  std::size_t position = 0;  // this rank's position on it
  std::size_t per_node() const { return nodes.front().size(); }
  // The rank at `position` of node j (uniform hierarchies only).
  int at(std::size_t j, std::size_t position_on_node) const { return nodes[j][position_on_node]; }
  // This rank's local ring and its inter-node ring (one rank per node, in node order).
  const std::vector<int>& local() const { return nodes[node]; }
  std::vector<int> cross() const;
};

// The hierarchy of `members` (every rank of the communicator when empty); the
// calling rank must be one of them.
Hierarchy hierarchy_of(const detail::CommImpl& comm, std::span<const int> members = {});

// Before a hierarchical algorithm's first message: every member receives an
// empty message from the member before it (in rank order, cyclically) and
// sends one to the member after it. Each such header carries the sender's
// signature, so all members passing means all of them agree on the call
// (count, dtype, op, root, algorithm), and then on the rest of the message
// pattern, which they derive from the call and the node map they share.
// Without it, ranks that disagree on, say, the broadcast root could each wait
// on a peer the other never sends to (a timeout instead of the mismatch);
// with it, some member finds a differing neighbour, fails with MismatchError,
// and the abort makes it one on every rank. It shares its first step's peers
// with the flat ring, so a rank running the flat ring among hierarchical ones
// is caught too. Costs one step of empty messages. Leaves the index base after
// its two operations.
void agree_on_the_call(Call& call, std::span<const int> members = {});

// Ring allgather over `ring` of units of pieces: unit(u) lists unit u's
// pieces as spans of the caller's output (what this rank owns, unit i, is
// already in place). Every rank ends with every unit. Posts from the call's
// current index base and waits for everything it posted.
void ring_allgather_units(Call& call, std::span<const int> ring,
                          const std::vector<std::vector<std::span<std::byte>>>& units);

// A chain chain[0] -> chain[1] -> ... of `data`: chain[0] sends it (read-only),
// the others receive into it and forward each chunk once it arrived. The
// head's sends are only posted (it may head several chains at once); the
// others wait for their receives and sends. This rank must be in the chain.
void chain_broadcast(Call& call, std::span<const int> chain, std::span<std::byte> data);

namespace hierarchy_detail {
constexpr std::size_t kReceiveWindow = 8;
std::size_t position_in(std::span<const int> ring, int rank);
}  // namespace hierarchy_detail

}  // namespace antdt::coll
