// The algorithm choice (collectives/selection.hpp): the table and its
// conditions. Uses collectives/selection.hpp, the communicator, core/dtype.hpp
// and core/log.hpp (the TRACE line).
#include "collectives/selection.hpp"

#include "collectives/power_of_two_fold.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"

#include <array>
#include <cstdint>
#include <limits>

namespace antdt::coll {
namespace {

// The model behind ANTDT_ALGO=auto, in picoseconds: a step (one message's
// latency, header checks and wake-up) and the per-byte costs of moving and of
// reducing data through memory.
constexpr std::uint64_t kAlphaPs = 3'000'000;
constexpr std::uint64_t kBetaPsPerByte = 200;
constexpr std::uint64_t kGammaPsPerByte = 200;

bool shm_not_forced_off(const SelectionInput& in) {
  return in.nranks > 1 && (in.forced == AllreduceAlgo::automatic || in.forced == AllreduceAlgo::shm);
}

// The ranks (or a partial step's contributors) sit on several nodes, the same
// number on each and more than one: the shape the hierarchical algorithms need.
bool several_equal_nodes(const SelectionInput& in) {
  return in.nodes > 1 && in.nodes_uniform && in.nranks > in.nodes;
}
bool forced_hierarchical(const SelectionInput& in) { return in.forced == AllreduceAlgo::hierarchical; }
// ANTDT_ALGO=auto, several equal nodes and at least kHierarchicalMinBytes of
// the vector each rank holds whole (ReduceScatter's input, AllGather's output).
bool auto_hierarchical(const SelectionInput& in, std::size_t vector_bytes) {
  return in.forced == AllreduceAlgo::automatic && several_equal_nodes(in) && vector_bytes >= kHierarchicalMinBytes;
}

bool power_of_two_ranks(const SelectionInput& in) { return in.nranks >= 2 && PowerOfTwoFold(in.nranks).extra == 0; }
// Some rank reaches a peer over TCP, a power-of-two rank count and the whole
// vector (AllReduce's, ReduceScatter's input, AllGather's output) from
// kRabenseifnerMinBytes to kRabenseifnerMaxBytes: the log-step algorithms.
bool log_steps_over_tcp(const SelectionInput& in, std::size_t vector_bytes) {
  return in.tcp_links && power_of_two_ranks(in) && vector_bytes >= kRabenseifnerMinBytes &&
         vector_bytes <= kRabenseifnerMaxBytes;
}
// ANTDT_ALGO=rabenseifner: ReduceScatter and AllGather run its halves where
// they can (a power-of-two rank count), the ring elsewhere.
bool forced_log_steps(const SelectionInput& in) {
  return in.forced == AllreduceAlgo::rabenseifner && power_of_two_ranks(in);
}
std::size_t whole_vector(const SelectionInput& in) { return in.bytes * static_cast<std::size_t>(in.nranks); }
// ANTDT_ALGO=auto and ReduceScatter's input or AllGather's output (in.bytes
// is one rank's block) in the log-step window over TCP.
bool auto_log_steps_of_blocks(const SelectionInput& in) {
  return in.forced == AllreduceAlgo::automatic && log_steps_over_tcp(in, whole_vector(in));
}

struct Row {
  Kind kind;
  bool (*when)(const SelectionInput&);
  Algo algo;
  Algo fallback;  // Selection::fallback
  const char* collective;
  const char* reason;
};

// First match wins, per collective. A partial step (Kind::partial) reads its
// own rows, then the AllReduce's: with every rank contributing it chooses what
// the plain AllReduce would, so its result is bit-identical (docs/partial.md,
// invariant 5). ANTDT_ALGO=shm beyond the shared-memory rows' reach counts as auto.
constexpr Row kRows[] = {
    {Kind::partial,
     [](const SelectionInput& in) {
       return !in.everyone && (forced_hierarchical(in) || auto_hierarchical(in, in.bytes));
     },
     Algo::hierarchical, Algo::none, "partial_allreduce",
     "not every rank contributes, the contributors on several nodes, as many on each and more than one, at least "
     "kHierarchicalMinBytes (or ANTDT_ALGO=hierarchical): the hierarchical AllReduce among the contributors"},
    {Kind::partial, [](const SelectionInput& in) { return !in.everyone; }, Algo::ring, Algo::none,
     "partial_allreduce", "not every rank contributes to this step: the ring among the contributors"},
    {Kind::allreduce,
     [](const SelectionInput& in) {
       return shm_not_forced_off(in) && in.mailbox_usable && in.shm_max_bytes > 0 && in.bytes <= in.shm_max_bytes;
     },
     Algo::shm, Algo::recursive_doubling, "allreduce",
     "at most ANTDT_SHM_MAX_BYTES and the mailbox usable or not tried: the shared-memory mailbox"},
    {Kind::allreduce,
     [](const SelectionInput& in) {
       return shm_not_forced_off(in) && in.bulk_usable && in.shm_bulk_bytes > 0 && in.bytes > in.shm_max_bytes;
     },
     Algo::shm_bulk, Algo::ring, "allreduce",
     "above ANTDT_SHM_MAX_BYTES, ANTDT_SHM_BULK_BYTES not 0 and the bulk area usable or not tried: the "
     "shared-memory bulk area"},
    {Kind::allreduce, [](const SelectionInput& in) { return in.forced == AllreduceAlgo::ring; }, Algo::ring,
     Algo::none, "allreduce", "ANTDT_ALGO=ring"},
    {Kind::allreduce, [](const SelectionInput& in) { return in.forced == AllreduceAlgo::recursive_doubling; },
     Algo::recursive_doubling, Algo::none, "allreduce", "ANTDT_ALGO=recursive_doubling"},
    {Kind::allreduce, [](const SelectionInput& in) { return in.forced == AllreduceAlgo::rabenseifner; },
     Algo::rabenseifner, Algo::none, "allreduce", "ANTDT_ALGO=rabenseifner"},
    {Kind::allreduce, forced_hierarchical, Algo::hierarchical, Algo::none, "allreduce", "ANTDT_ALGO=hierarchical"},
    {Kind::allreduce, [](const SelectionInput& in) { return auto_hierarchical(in, in.bytes); },
     Algo::hierarchical, Algo::none, "allreduce",
     "ranks on several nodes, as many on each and more than one, at least kHierarchicalMinBytes: intra-node "
     "reduce-scatter, inter-node ring per slice, intra-node allgather"},
    {Kind::allreduce,
     [](const SelectionInput& in) {
       return in.nranks > 1 && in.count <= recursive_doubling_max_bytes(in.nranks) / dtype_size(in.dtype);
     },
     Algo::recursive_doubling, Algo::none, "allreduce",
     "at most recursive_doubling_max_bytes(ranks) (the alpha-beta-gamma model's crossover)"},
    {Kind::allreduce,
     [](const SelectionInput& in) {
       return in.tcp_links && in.nranks == 2 && in.bytes >= kTcpPairRecursiveDoublingMinBytes &&
              in.bytes <= kTcpPairRecursiveDoublingMaxBytes;
     },
     Algo::recursive_doubling, Algo::none, "allreduce",
     "two ranks linked over TCP, kTcpPairRecursiveDoublingMinBytes to kTcpPairRecursiveDoublingMaxBytes: one "
     "exchange of the whole vector"},
    {Kind::allreduce,
     [](const SelectionInput& in) { return log_steps_over_tcp(in, in.bytes); },
     Algo::rabenseifner, Algo::none, "allreduce",
     "some rank reaches a peer over TCP, a power-of-two rank count, kRabenseifnerMinBytes to "
     "kRabenseifnerMaxBytes: recursive halving and doubling, 2 log2(n) steps"},
    {Kind::allreduce, [](const SelectionInput&) { return true; }, Algo::ring, Algo::none, "allreduce",
     "above the crossover (or one rank)"},
    {Kind::broadcast, forced_hierarchical, Algo::hierarchical, Algo::none, "broadcast", "ANTDT_ALGO=hierarchical"},
    {Kind::broadcast, [](const SelectionInput& in) { return auto_hierarchical(in, in.bytes); }, Algo::hierarchical,
     Algo::none, "broadcast",
     "ranks on several nodes, as many on each and more than one, at least kHierarchicalMinBytes: a chain per "
     "slice across the nodes, intra-node allgather"},
    {Kind::broadcast, [](const SelectionInput& in) { return in.bytes <= kBroadcastTreeMaxBytes; },
     Algo::binomial_tree, Algo::none, "broadcast", "at most 64 KiB: log2(ranks) latency"},
    {Kind::broadcast, [](const SelectionInput&) { return true; }, Algo::chain, Algo::none, "broadcast",
     "above 64 KiB: pipelined"},
    {Kind::reduce, [](const SelectionInput& in) { return in.bytes <= kReduceTreeMaxBytes; }, Algo::binomial_tree,
     Algo::none, "reduce", "at most 64 KiB: log2(ranks) latency"},
    {Kind::reduce, [](const SelectionInput&) { return true; }, Algo::chain, Algo::none, "reduce",
     "above 64 KiB: pipelined"},
    {Kind::reduce_scatter, forced_hierarchical, Algo::hierarchical, Algo::none, "reduce_scatter",
     "ANTDT_ALGO=hierarchical"},
    {Kind::reduce_scatter, [](const SelectionInput& in) { return auto_hierarchical(in, whole_vector(in)); },
     Algo::hierarchical, Algo::none, "reduce_scatter",
     "ranks on several nodes, as many on each and more than one, input at least kHierarchicalMinBytes: intra-node "
     "reduce-scatter, then one inter-node ring per local position"},
    {Kind::reduce_scatter, forced_log_steps, Algo::recursive_halving, Algo::none, "reduce_scatter",
     "ANTDT_ALGO=rabenseifner, a power-of-two rank count: its reduce-scatter half"},
    {Kind::reduce_scatter, auto_log_steps_of_blocks,
     Algo::recursive_halving, Algo::none, "reduce_scatter",
     "some rank reaches a peer over TCP, a power-of-two rank count, an input of kRabenseifnerMinBytes to "
     "kRabenseifnerMaxBytes: recursive halving, log2(n) steps"},
    {Kind::reduce_scatter, [](const SelectionInput&) { return true; }, Algo::ring, Algo::none, "reduce_scatter",
     "one node, nodes of unequal size, or small"},
    {Kind::allgather, forced_hierarchical, Algo::hierarchical, Algo::none, "allgather", "ANTDT_ALGO=hierarchical"},
    {Kind::allgather, [](const SelectionInput& in) { return auto_hierarchical(in, whole_vector(in)); },
     Algo::hierarchical, Algo::none, "allgather",
     "ranks on several nodes, as many on each and more than one, output at least kHierarchicalMinBytes: one "
     "inter-node ring per local position, then intra-node allgather"},
    {Kind::allgather, forced_log_steps, Algo::recursive_doubling, Algo::none, "allgather",
     "ANTDT_ALGO=rabenseifner, a power-of-two rank count: its allgather half"},
    {Kind::allgather, auto_log_steps_of_blocks,
     Algo::recursive_doubling, Algo::none, "allgather",
     "some rank reaches a peer over TCP, a power-of-two rank count, an output of kRabenseifnerMinBytes to "
     "kRabenseifnerMaxBytes: recursive doubling, log2(n) steps"},
    {Kind::allgather, [](const SelectionInput&) { return true; }, Algo::ring, Algo::none, "allgather",
     "one node, nodes of unequal size, or small"},
    {Kind::allgatherv, forced_hierarchical, Algo::hierarchical, Algo::none, "allgatherv", "ANTDT_ALGO=hierarchical"},
    {Kind::allgatherv, [](const SelectionInput& in) { return auto_hierarchical(in, in.bytes); }, Algo::hierarchical,
     Algo::none, "allgatherv",
     "ranks on several nodes, as many on each and more than one, output at least kHierarchicalMinBytes: as "
     "allgather"},
    {Kind::allgatherv, [](const SelectionInput&) { return true; }, Algo::ring, Algo::none, "allgatherv",
     "one node, nodes of unequal size, or small"},
    {Kind::alltoall, [](const SelectionInput&) { return true; }, Algo::pairwise, Algo::none, "alltoall",
     "the only one"},
    {Kind::barrier, [](const SelectionInput&) { return true; }, Algo::dissemination, Algo::none, "barrier",
     "the only one"},
};

bool applies(const Row& row, Kind kind) {
  return row.kind == kind || (kind == Kind::partial && row.kind == Kind::allreduce);
}

}  // namespace

std::size_t recursive_doubling_max_bytes(int nranks) {
  if (nranks < 2) return 0;
  const auto n = static_cast<std::uint64_t>(nranks);
  std::uint64_t p = 1, log2p = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++log2p;
  }
  const std::uint64_t fold = n != p ? 1 : 0;
  const std::uint64_t rd_steps = log2p + 2 * fold;
  const std::uint64_t rd_reductions = log2p + fold;
  const std::uint64_t ring_steps = 2 * (n - 1);
  if (ring_steps <= rd_steps) return 0;
  // Per-byte costs, times n (the ring's are multiples of 1/n).
  const std::uint64_t rd_per_byte = n * (rd_steps * kBetaPsPerByte + rd_reductions * kGammaPsPerByte);
  const std::uint64_t ring_per_byte = 2 * (n - 1) * kBetaPsPerByte + (n - 1) * kGammaPsPerByte;
  if (rd_per_byte <= ring_per_byte) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>((ring_steps - rd_steps) * kAlphaPs * n / (rd_per_byte - ring_per_byte));
}

SelectionInput selection_input(const detail::CommImpl& comm, Kind kind, std::size_t count, DataType dtype) {
  const Config& cfg = comm.config();
  SelectionInput in;
  in.kind = kind;
  in.count = count;
  in.dtype = dtype;
  in.bytes = count * dtype_size(dtype);
  in.nranks = comm.size();
  in.forced = cfg.allreduce_algo;
  in.shm_max_bytes = cfg.shm_max_bytes;
  in.shm_bulk_bytes = cfg.shm_bulk_bytes;
  in.mailbox_usable = !comm.shm_tried(detail::ShmArea::mailbox) || comm.shm(detail::ShmArea::mailbox) != nullptr;
  in.bulk_usable = !comm.shm_tried(detail::ShmArea::bulk) || comm.shm(detail::ShmArea::bulk) != nullptr;
  in.nodes = comm.node_count();
  in.nodes_uniform = comm.nodes_uniform();
  in.tcp_links = comm.tcp_links();
  return in;
}

Selection select_algorithm(const SelectionInput& in) {
  for (std::size_t i = 0; i < std::size(kRows); ++i) {
    const Row& row = kRows[i];
    if (!applies(row, in.kind) || !row.when(in)) continue;
    ANTDT_TRACE(row.collective, " of ", in.count, " x ", dtype_name(in.dtype), " (", in.bytes, " bytes) on ",
                in.nranks, " ranks: ", algo_name(row.algo), " (row ", i, ": ", row.reason, ")");
    return Selection{row.algo, row.fallback, static_cast<int>(i), row.reason};
  }
  raise<InternalError>("select_algorithm: no row for call kind ", static_cast<int>(in.kind));
}

Algo allreduce_algorithm(std::size_t count, DataType dtype, int nranks, AllreduceAlgo forced) {
  SelectionInput in;  // no shared memory
  in.count = count;
  in.dtype = dtype;
  in.bytes = count * dtype_size(dtype);
  in.nranks = nranks;
  in.forced = forced;
  return select_algorithm(in).algo;
}

bool use_shm_pushpull(const detail::CommImpl& comm) {
  const AllreduceAlgo algo = comm.config().allreduce_algo;
  const bool usable =
      !comm.shm_tried(detail::ShmArea::pushpull) || comm.shm(detail::ShmArea::pushpull) != nullptr;
  return comm.config().shm_bulk_bytes > 0 && (algo == AllreduceAlgo::automatic || algo == AllreduceAlgo::shm) &&
         comm.size() > 1 && usable;
}

}  // namespace antdt::coll
