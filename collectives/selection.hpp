// The algorithm choice of every collective: one table (selection.cpp) of rows
// (collective, condition on bytes / ranks / ANTDT_ALGO / shared-memory
// availability -> algorithm), read by the plain and the partial AllReduce
// alike. Every condition is a function of values every rank shares (the
// arguments, the configuration, the shared-memory availability agreed at
// set-up), so every rank chooses the same. At ANTDT_DEBUG=TRACE each choice is
// logged with its row. Uses collectives/call.hpp and the communicator.
#pragma once

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"

#include <cstddef>

namespace antdt::coll {

// Below this many bytes broadcast uses the binomial tree, above it the pipelined chain.
inline constexpr std::size_t kBroadcastTreeMaxBytes = 64 * 1024;
// Below this many bytes reduce uses the binomial tree, above it the pipelined chain.
inline constexpr std::size_t kReduceTreeMaxBytes = 64 * 1024;

// What the table's conditions read.
struct SelectionInput {
  Kind kind = Kind::allreduce;  // allreduce, or partial (a partial AllReduce's ring step)
  std::size_t count = 0;
  DataType dtype = DataType::u8;
  std::size_t bytes = 0;  // count * dtype size
  int nranks = 1;
  AllreduceAlgo forced = AllreduceAlgo::automatic;  // ANTDT_ALGO
  std::size_t shm_max_bytes = 0;                    // ANTDT_SHM_MAX_BYTES
  std::size_t shm_bulk_bytes = 0;                   // ANTDT_SHM_BULK_BYTES
  // The area is usable or not yet tried (its set-up runs inside the call).
  bool mailbox_usable = false;
  bool bulk_usable = false;
  bool everyone = true;  // partial: every rank contributes to this step
  // Nodes the ranks are on (CommImpl::node_count) and whether every node has
  // the same number of them; a partial step that not every rank contributes
  // to sets both from its contributors (nranks: their number).
  int nodes = 1;
  bool nodes_uniform = true;
  bool tcp_links = false;  // some rank reaches a peer over TCP (CommImpl::tcp_links)
};

// From this many bytes up, ranks on more than one node (the same number on
// each, more than one per node) run the hierarchical algorithms
// (collectives/*_hierarchical.cpp; docs/multinode.md): AllReduce, a partial
// step's contributors, Broadcast (the payload), ReduceScatter (each rank's
// input: all blocks), AllGather(v) (the gathered output). Below it the flat ones.
inline constexpr std::size_t kHierarchicalMinBytes = 256 * 1024;

// Where some rank reaches a peer over TCP, power-of-two rank counts run
// Rabenseifner's AllReduce (collectives/allreduce_rabenseifner.cpp) for
// vectors in [kRabenseifnerMinBytes, kRabenseifnerMaxBytes]: over TCP a step
// costs tens of microseconds, and it takes 2·log2(n) steps where the ring takes
// 2(n-1). Below, its halves of 128 KiB and less lose to the ring's smaller
// messages (UCX sends them eagerly); above, the ring's pipeline wins
// (docs/benchmarks.md#rabenseifner-over-tcp). Over memory it is 2-4x slower
// than the ring at 4 ranks, so only TCP links choose it. Its halves serve
// ReduceScatter (recursive halving) and AllGather (recursive doubling) in the
// same window, by their input and output (docs/collectives.md).
inline constexpr std::size_t kRabenseifnerMinBytes = 512 * 1024;
inline constexpr std::size_t kRabenseifnerMaxBytes = 2 * 1024 * 1024;

// Two ranks over TCP exchange whole vectors (recursive doubling: one step)
// from kTcpPairRecursiveDoublingMinBytes to kTcpPairRecursiveDoublingMaxBytes,
// ahead of Rabenseifner's window: over TCP a step costs tens of microseconds,
// and at two ranks the ring and Rabenseifner take two. At 1 MiB it was even
// (1.03x over loopback, 0.92-0.97x across namespace nodes). Below 256 KiB the
// ring's halves (128 KiB and less, split into 64 KiB-ish UCX messages) stay
// eager where the whole vector would go by rendezvous, and the ring holds
// its own (docs/benchmarks.md#two-ranks-over-tcp).
inline constexpr std::size_t kTcpPairRecursiveDoublingMinBytes = 256 * 1024;
inline constexpr std::size_t kTcpPairRecursiveDoublingMaxBytes = 512 * 1024;

// The chosen row.
struct Selection {
  Algo algo = Algo::none;
  // When algo is a shared-memory one and its set-up finds that the ranks cannot
  // share memory (every rank learns that in the same call), the plain
  // AllReduce finishes this call with `fallback` (under algo's signature).
  Algo fallback = Algo::none;
  int row = -1;  // index in the table, for the trace
  const char* reason = "";
};

// The input of a call of `kind` on `comm` (its configuration and shared-memory state).
SelectionInput selection_input(const detail::CommImpl& comm, Kind kind, std::size_t count, DataType dtype);
// The first row of input.kind whose condition holds.
Selection select_algorithm(const SelectionInput& input);
inline Selection select_algorithm(const detail::CommImpl& comm, Kind kind, std::size_t count, DataType dtype) {
  return select_algorithm(selection_input(comm, kind, count, dtype));
}

// The AllReduce rows without shared memory: ANTDT_ALGO when forced, else
// recursive doubling up to recursive_doubling_max_bytes(nranks) and the ring above.
Algo allreduce_algorithm(std::size_t count, DataType dtype, int nranks, AllreduceAlgo forced);
// The α-β-γ model's crossover (docs/collectives.md#allreduce-selection).
std::size_t recursive_doubling_max_bytes(int nranks);
// Whether push and pull move data through the push-pull shared-memory area
// (collectives/pushpull/pushpull_shm.cpp): more than one rank, ANTDT_ALGO auto
// or shm, ANTDT_SHM_BULK_BYTES not 0 and the area not known to be unavailable.
bool use_shm_pushpull(const detail::CommImpl& comm);

}  // namespace antdt::coll
