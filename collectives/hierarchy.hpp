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
// The ring steps move *units* made of pieces: unit u of a ring of m members is
// what member u owns at the end (reduce-scatter) or at the start (allgather);
// its pieces need not be contiguous (a node's share of a reduce-scatter input
// is one block per node, wherever those ranks sit in rank order), so nothing is
// packed. Pieces are cut into ANTDT_CHUNK_BYTES chunks, each one message, and
// every piece has at least one (possibly empty) chunk, so the message stream
// does not depend on the count and mismatched calls stay detectable.
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

// Ring reduce-scatter over `ring` (ranks; this rank among them) of units of
// `pieces` pieces of `count` elements each: piece k of unit u is in(u, k).
// This rank (ring position i) ends with unit i reduced over the ring, piece k
// in out[k] (which may be in(i, k): in place). `regions` holds (m-1) units of
// scratch (pieces * count elements each); avg is not reduced here (the caller
// sums and divides once). Posts from the call's current index base and waits
// for everything it posted.
template <class In>
void ring_reduce_scatter_units(Call& call, std::span<const int> ring, std::size_t pieces, std::size_t count,
                               DataType dtype, ReduceOp op, In in, std::span<std::byte* const> out,
                               std::span<std::byte> regions);

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

// ---- template definition ----
namespace hierarchy_detail {
struct PieceChunks {
  std::size_t count, chunk_elems;
  std::size_t chunks() const { return std::max<std::size_t>(1, (count + chunk_elems - 1) / chunk_elems); }
  std::size_t first(std::size_t c) const { return std::min(count, c * chunk_elems); }
  std::size_t elems(std::size_t c) const { return std::min(count, first(c) + chunk_elems) - first(c); }
};
constexpr std::size_t kReceiveWindow = 8;
std::size_t chunk_elems_of(const Call& call, std::size_t esize);
std::size_t esize_of(DataType dtype);
std::size_t position_in(std::span<const int> ring, int rank);
}  // namespace hierarchy_detail

template <class In>
void ring_reduce_scatter_units(Call& call, std::span<const int> ring, std::size_t pieces, std::size_t count,
                               DataType dtype, ReduceOp op, In in, std::span<std::byte* const> out,
                               std::span<std::byte> regions) {
  using hierarchy_detail::PieceChunks;
  const std::size_t m = ring.size();
  const std::size_t i = hierarchy_detail::position_in(ring, call.rank());
  const std::size_t esize = hierarchy_detail::esize_of(dtype);
  CallMemory& memory = call.memory();
  if (m == 1) {
    for (std::size_t k = 0; k < pieces; ++k)
      if (in(i, k) != out[k]) memory.copy(out[k], in(i, k), count * esize);
    memory.settle();
    return;
  }
  const PieceChunks piece{count, hierarchy_detail::chunk_elems_of(call, esize)};
  const std::size_t per_step = pieces * piece.chunks();  // messages per step
  const std::size_t steps = m - 1, total = steps * per_step;
  const std::size_t unit_bytes = pieces * count * esize;
  auto send_unit = [&](std::size_t s) { return (i + 2 * m - s - 1) % m; };
  auto recv_unit = [&](std::size_t s) { return (i + 2 * m - s - 2) % m; };
  // Message t of the walk: step t / per_step, piece (t / chunks) % pieces, chunk t % chunks.
  auto piece_of = [&](std::size_t t) { return (t / piece.chunks()) % pieces; };
  auto chunk_of = [&](std::size_t t) { return t % piece.chunks(); };
  auto input = [&](std::size_t unit, std::size_t t) {
    const std::size_t c = chunk_of(t);
    return std::span(in(unit, piece_of(t)) + piece.first(c) * esize, piece.elems(c) * esize);
  };
  auto region = [&](std::size_t t) {
    const std::size_t s = t / per_step, c = chunk_of(t);
    return regions.subspan(s * unit_bytes + (piece_of(t) * count + piece.first(c)) * esize, piece.elems(c) * esize);
  };
  const int right = ring[(i + 1) % m], left = ring[(i + m - 1) % m];
  // Pool indexes: receives [0, total), sends [total, 2 total), both in walk order.
  for (std::size_t t = 0; t < per_step; ++t) call.send(total + t, right, input(send_unit(0), t));
  std::size_t posted = 0;
  for (std::size_t done = 0; done < total; ++done) {
    for (; posted < total && posted < done + hierarchy_detail::kReceiveWindow; ++posted)
      call.recv(posted, left, region(posted));
    call.wait(done);
    const std::size_t s = done / per_step;
    const std::span<std::byte> arrived = region(done);
    const std::span<const std::byte> mine = input(recv_unit(s), done);
    if (s + 1 < steps) {
      memory.reduce_into(dtype, op, arrived, arrived, mine);
      memory.settle();
      call.send(total + done + per_step, right, arrived);
    } else {
      const std::size_t c = chunk_of(done);
      memory.reduce_into(dtype, op, std::span(out[piece_of(done)] + piece.first(c) * esize, piece.elems(c) * esize),
                         mine, arrived);
    }
  }
  memory.settle();
  call.wait_all();
}

}  // namespace antdt::coll
