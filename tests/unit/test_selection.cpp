// The algorithm table (collectives/selection.hpp): which row each call takes,
// the partial step reading the AllReduce's rows, and the TRACE line a call prints.
#include "collectives/selection.hpp"

#include "core/log.hpp"
#include "test_environment.hpp"

#include <gtest/gtest.h>

#include <string>

namespace antdt::test {
namespace {

using coll::Algo;
using coll::Kind;
using coll::SelectionInput;

SelectionInput allreduce_of(std::size_t count, DataType dtype, int nranks) {
  SelectionInput in;
  in.kind = Kind::allreduce;
  in.count = count;
  in.dtype = dtype;
  in.bytes = count * dtype_size(dtype);
  in.nranks = nranks;
  in.shm_max_bytes = 4096;
  in.shm_bulk_bytes = 64 << 20;
  in.mailbox_usable = true;
  in.bulk_usable = true;
  return in;
}

TEST(Selection, AllreduceRowsInOrder) {
  // On one node: the mailbox up to ANTDT_SHM_MAX_BYTES, the bulk area above.
  EXPECT_EQ(coll::select_algorithm(allreduce_of(1024, DataType::f32, 4)).algo, Algo::shm);
  EXPECT_EQ(coll::select_algorithm(allreduce_of(1025, DataType::f32, 4)).algo, Algo::shm_bulk);
  // A failed set-up falls back to what the ranks can do without shared memory.
  EXPECT_EQ(coll::select_algorithm(allreduce_of(1024, DataType::f32, 4)).fallback, Algo::recursive_doubling);
  EXPECT_EQ(coll::select_algorithm(allreduce_of(1025, DataType::f32, 4)).fallback, Algo::ring);
  // Without shared memory: the model's crossover, as allreduce_algorithm() says.
  for (int n : {2, 3, 4, 8}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
      SelectionInput in = allreduce_of(count, DataType::f32, n);
      in.mailbox_usable = in.bulk_usable = false;
      EXPECT_EQ(coll::select_algorithm(in).algo,
                coll::allreduce_algorithm(count, DataType::f32, n, AllreduceAlgo::automatic))
          << n << " ranks, " << count << " floats";
    }
  }
  // ANTDT_ALGO forces the network algorithms and turns shared memory off.
  SelectionInput forced = allreduce_of(16, DataType::f32, 4);
  forced.forced = AllreduceAlgo::ring;
  EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::ring);
  forced.forced = AllreduceAlgo::recursive_doubling;
  forced.count = 1 << 24;
  forced.bytes = forced.count * 4;
  EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::recursive_doubling);
  // One rank: no shared memory, the ring (a copy).
  EXPECT_EQ(coll::select_algorithm(allreduce_of(16, DataType::f32, 1)).algo, Algo::ring);
}

TEST(Selection, RabenseifnerOverTcpForMediumVectors) {
  auto over_tcp = [](std::size_t bytes, int nranks, bool tcp) {
    SelectionInput in = allreduce_of(bytes, DataType::u8, nranks);
    in.mailbox_usable = in.bulk_usable = false;  // no shared memory among them
    in.tcp_links = tcp;
    return coll::select_algorithm(in).algo;
  };
  for (int n : {4, 8, 16}) {
    EXPECT_EQ(over_tcp(coll::kRabenseifnerMinBytes, n, true), Algo::rabenseifner) << n;
    EXPECT_EQ(over_tcp(1 << 20, n, true), Algo::rabenseifner) << n;
    EXPECT_EQ(over_tcp(coll::kRabenseifnerMaxBytes, n, true), Algo::rabenseifner) << n;
    // Outside the window, or without TCP links: the ring (small: recursive doubling).
    EXPECT_EQ(over_tcp(coll::kRabenseifnerMinBytes - 1, n, true), Algo::ring) << n;
    EXPECT_EQ(over_tcp(coll::kRabenseifnerMaxBytes + 1, n, true), Algo::ring) << n;
    EXPECT_EQ(over_tcp(1 << 20, n, false), Algo::ring) << n;
    EXPECT_EQ(over_tcp(64, n, true), Algo::recursive_doubling) << n;
  }
  // Two ranks: recursive doubling from kTcpPairRecursiveDoublingMinBytes to
  // kTcpPairRecursiveDoublingMaxBytes, Rabenseifner above it to the window's
  // end, the ring beyond; below, the ring down to the model's crossover.
  EXPECT_EQ(over_tcp(coll::kTcpPairRecursiveDoublingMinBytes - 1, 2, true), Algo::ring);
  EXPECT_EQ(over_tcp(64, 2, true), Algo::recursive_doubling);
  EXPECT_EQ(over_tcp(coll::kTcpPairRecursiveDoublingMinBytes, 2, true), Algo::recursive_doubling);
  EXPECT_EQ(over_tcp(coll::kRabenseifnerMinBytes, 2, true), Algo::recursive_doubling);
  EXPECT_EQ(over_tcp(1 << 20, 2, true), Algo::rabenseifner);
  EXPECT_EQ(over_tcp(coll::kTcpPairRecursiveDoublingMaxBytes, 2, true), Algo::recursive_doubling);
  EXPECT_EQ(over_tcp(coll::kTcpPairRecursiveDoublingMaxBytes + 1, 2, true), Algo::rabenseifner);
  EXPECT_EQ(over_tcp(coll::kRabenseifnerMaxBytes, 2, true), Algo::rabenseifner);
  EXPECT_EQ(over_tcp(coll::kRabenseifnerMaxBytes + 1, 2, true), Algo::ring);
  EXPECT_EQ(over_tcp(256 << 10, 2, false), Algo::ring);  // without TCP links: the model's crossover
  EXPECT_EQ(over_tcp(256 << 10, 3, true), Algo::ring);   // three ranks: the ring
  // Not measured for other rank counts (the fold moves whole vectors): the ring.
  for (int n : {3, 5, 6, 12}) EXPECT_EQ(over_tcp(1 << 20, n, true), Algo::ring) << n;
  // Shared memory, when the ranks have it, and a forced algorithm come first.
  SelectionInput shm = allreduce_of(1 << 20, DataType::u8, 4);
  shm.tcp_links = true;
  EXPECT_EQ(coll::select_algorithm(shm).algo, Algo::shm_bulk);
  SelectionInput forced = allreduce_of(1 << 20, DataType::u8, 4);
  forced.tcp_links = true;
  forced.forced = AllreduceAlgo::ring;
  EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::ring);
  forced.tcp_links = false;
  forced.forced = AllreduceAlgo::rabenseifner;
  EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::rabenseifner);
  // A partial step with every rank reads the same rows.
  SelectionInput partial = allreduce_of(1 << 20, DataType::u8, 4);
  partial.kind = Kind::partial;
  partial.mailbox_usable = partial.bulk_usable = false;
  partial.tcp_links = true;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::rabenseifner);
}

// ReduceScatter and AllGather take Rabenseifner's halves in the same window,
// measured by the whole vector (the input, the output), not by one block.
TEST(Selection, HalvingAndDoublingOverTcpForMediumVectors) {
  auto choose = [](Kind kind, std::size_t whole, int nranks, bool tcp,
                   AllreduceAlgo forced = AllreduceAlgo::automatic) {
    SelectionInput in;
    in.kind = kind;
    in.dtype = DataType::u8;
    in.count = in.bytes = whole / static_cast<std::size_t>(nranks);
    in.nranks = nranks;
    in.tcp_links = tcp;
    in.forced = forced;
    return coll::select_algorithm(in).algo;
  };
  const struct {
    Kind kind;
    Algo log_steps;
  } cases[] = {{Kind::reduce_scatter, Algo::recursive_halving}, {Kind::allgather, Algo::recursive_doubling}};
  for (const auto& c : cases) {
    for (int n : {2, 4, 8}) {
      EXPECT_EQ(choose(c.kind, coll::kRabenseifnerMinBytes, n, true), c.log_steps) << n;
      EXPECT_EQ(choose(c.kind, coll::kRabenseifnerMaxBytes, n, true), c.log_steps) << n;
      EXPECT_EQ(choose(c.kind, coll::kRabenseifnerMinBytes / 2, n, true), Algo::ring) << n;
      EXPECT_EQ(choose(c.kind, coll::kRabenseifnerMaxBytes * 2, n, true), Algo::ring) << n;
      EXPECT_EQ(choose(c.kind, 1 << 20, n, false), Algo::ring) << n;
      EXPECT_EQ(choose(c.kind, 1 << 20, n, true, AllreduceAlgo::ring), Algo::ring) << n;
      // Forced: at any size and without TCP links.
      EXPECT_EQ(choose(c.kind, 64, n, false, AllreduceAlgo::rabenseifner), c.log_steps) << n;
    }
    // Other rank counts have no halving: the ring, forced or not.
    for (int n : {3, 6}) {
      EXPECT_EQ(choose(c.kind, 3 << 18, n, true), Algo::ring) << n;
      EXPECT_EQ(choose(c.kind, 3 << 18, n, true, AllreduceAlgo::rabenseifner), Algo::ring) << n;
    }
    EXPECT_EQ(choose(c.kind, 1 << 20, 1, true, AllreduceAlgo::rabenseifner), Algo::ring);
  }
}

TEST(Selection, HierarchicalAcrossUniformNodes) {
  // Two nodes of two ranks, no shared memory across them: the hierarchy from
  // kHierarchicalMinBytes up, the model's choice below.
  SelectionInput in = allreduce_of(coll::kHierarchicalMinBytes / 4, DataType::f32, 4);
  in.mailbox_usable = in.bulk_usable = false;
  in.nodes = 2;
  EXPECT_EQ(coll::select_algorithm(in).algo, Algo::hierarchical);
  SelectionInput small = allreduce_of(coll::kHierarchicalMinBytes / 4 - 1, DataType::f32, 4);
  small.mailbox_usable = small.bulk_usable = false;
  small.nodes = 2;
  EXPECT_NE(coll::select_algorithm(small).algo, Algo::hierarchical);
  // Nodes of unequal size, or one rank per node: the flat algorithms.
  SelectionInput uneven = in;
  uneven.nodes_uniform = false;
  EXPECT_EQ(coll::select_algorithm(uneven).algo, Algo::ring);
  SelectionInput one_each = in;
  one_each.nodes = 4;
  EXPECT_EQ(coll::select_algorithm(one_each).algo, Algo::ring);
  // One node: shared memory as before; ANTDT_ALGO=hierarchical forces it anywhere.
  EXPECT_EQ(coll::select_algorithm(allreduce_of(1 << 20, DataType::f32, 4)).algo, Algo::shm_bulk);
  SelectionInput forced = allreduce_of(16, DataType::f32, 4);
  forced.forced = AllreduceAlgo::hierarchical;
  EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::hierarchical);
  // A partial step with every rank reads the same row; without, the
  // contributors' rows: the hierarchy when they sit on equal nodes, else their ring.
  SelectionInput partial = in;
  partial.kind = Kind::partial;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::hierarchical);
  partial.everyone = false;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::hierarchical);
  partial.nodes_uniform = false;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::ring);
}

// SelectionInput of `kind` for count elements of f32 on 2 nodes x 2 ranks.
SelectionInput on_two_nodes(Kind kind, std::size_t count) {
  SelectionInput in;
  in.kind = kind;
  in.count = count;
  in.dtype = DataType::f32;
  in.bytes = count * 4;
  in.nranks = 4;
  in.nodes = 2;
  return in;
}

TEST(Selection, HierarchicalReduceScatterAllgatherBroadcastRows) {
  // ReduceScatter and AllGather: from kHierarchicalMinBytes of the vector each
  // rank holds whole (ranks x block), Broadcast and AllGatherV: of the payload.
  const std::size_t floats = coll::kHierarchicalMinBytes / 4;
  for (Kind kind : {Kind::reduce_scatter, Kind::allgather}) {
    EXPECT_EQ(coll::select_algorithm(on_two_nodes(kind, floats / 4)).algo, Algo::hierarchical);
    EXPECT_EQ(coll::select_algorithm(on_two_nodes(kind, floats / 4 - 1)).algo, Algo::ring);
  }
  EXPECT_EQ(coll::select_algorithm(on_two_nodes(Kind::allgatherv, floats)).algo, Algo::hierarchical);
  EXPECT_EQ(coll::select_algorithm(on_two_nodes(Kind::allgatherv, floats - 1)).algo, Algo::ring);
  EXPECT_EQ(coll::select_algorithm(on_two_nodes(Kind::broadcast, floats)).algo, Algo::hierarchical);
  EXPECT_EQ(coll::select_algorithm(on_two_nodes(Kind::broadcast, floats - 1)).algo, Algo::chain);
  EXPECT_EQ(coll::select_algorithm(on_two_nodes(Kind::broadcast, 16)).algo, Algo::binomial_tree);
  for (Kind kind : {Kind::reduce_scatter, Kind::allgather, Kind::allgatherv, Kind::broadcast}) {
    const Algo flat = kind == Kind::broadcast ? Algo::chain : Algo::ring;
    // One node, unequal nodes, one rank per node, ANTDT_ALGO=ring: flat.
    SelectionInput one_node = on_two_nodes(kind, floats);
    one_node.nodes = 1;
    EXPECT_EQ(coll::select_algorithm(one_node).algo, flat);
    SelectionInput uneven = on_two_nodes(kind, floats);
    uneven.nodes_uniform = false;
    EXPECT_EQ(coll::select_algorithm(uneven).algo, flat);
    SelectionInput one_each = on_two_nodes(kind, floats);
    one_each.nodes = 4;
    EXPECT_EQ(coll::select_algorithm(one_each).algo, flat);
    SelectionInput ring = on_two_nodes(kind, floats);
    ring.forced = AllreduceAlgo::ring;
    EXPECT_EQ(coll::select_algorithm(ring).algo, flat);
    // ANTDT_ALGO=hierarchical forces it at any size and on any layout.
    SelectionInput forced = on_two_nodes(kind, 1);
    forced.nodes = 1;
    forced.forced = AllreduceAlgo::hierarchical;
    EXPECT_EQ(coll::select_algorithm(forced).algo, Algo::hierarchical);
  }
}

TEST(Selection, PartialSubsetOnEqualNodesIsHierarchical) {
  // Not every rank contributes; the contributors' own nodes decide.
  SelectionInput in = on_two_nodes(Kind::partial, coll::kHierarchicalMinBytes / 4);
  in.everyone = false;
  EXPECT_EQ(coll::select_algorithm(in).algo, Algo::hierarchical);
  SelectionInput small = in;
  small.count = 16;
  small.bytes = 64;
  EXPECT_EQ(coll::select_algorithm(small).algo, Algo::ring);
  small.forced = AllreduceAlgo::hierarchical;
  EXPECT_EQ(coll::select_algorithm(small).algo, Algo::hierarchical);
  SelectionInput uneven = in;
  uneven.nodes_uniform = false;
  EXPECT_EQ(coll::select_algorithm(uneven).algo, Algo::ring);
  SelectionInput ring = in;
  ring.forced = AllreduceAlgo::ring;
  EXPECT_EQ(coll::select_algorithm(ring).algo, Algo::ring);
}

TEST(Selection, PartialStepsReadTheAllreduceRows) {
  SelectionInput in = allreduce_of(1024, DataType::f32, 4);
  in.kind = Kind::partial;
  EXPECT_EQ(coll::select_algorithm(in).algo, Algo::shm);  // every rank: what the plain AllReduce runs
  in.everyone = false;
  EXPECT_EQ(coll::select_algorithm(in).algo, Algo::ring);  // a subset: the ring among the contributors
}

TEST(Selection, TreeOrChainAt64KiB) {
  for (Kind kind : {Kind::broadcast, Kind::reduce}) {
    SelectionInput in;
    in.kind = kind;
    in.nranks = 4;
    in.bytes = 64 * 1024;
    EXPECT_EQ(coll::select_algorithm(in).algo, Algo::binomial_tree);
    in.bytes += 1;
    EXPECT_EQ(coll::select_algorithm(in).algo, Algo::chain);
  }
}

TEST(Selection, EveryCallPrintsItsRowAtTrace) {
  ScopedEnv level("ANTDT_DEBUG", "TRACE");
  reload_config();
  StderrCapture capture;
  const coll::Selection chosen = coll::select_algorithm(allreduce_of(2, DataType::f32, 2));
  const std::string out = capture.finish();
  EXPECT_NE(out.find("allreduce of 2 x f32 (8 bytes) on 2 ranks: shared-memory (row " + std::to_string(chosen.row)),
            std::string::npos)
      << out;
}

TEST(Selection, NothingPrintedBelowTrace) {
  ScopedEnv level("ANTDT_DEBUG", "INFO");
  reload_config();
  StderrCapture capture;
  coll::select_algorithm(allreduce_of(2, DataType::f32, 2));
  EXPECT_EQ(capture.finish(), "");
}

}  // namespace
}  // namespace antdt::test
