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
  // A partial step with every rank reads the same row; without, the contributors' ring.
  SelectionInput partial = in;
  partial.kind = Kind::partial;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::hierarchical);
  partial.everyone = false;
  EXPECT_EQ(coll::select_algorithm(partial).algo, Algo::ring);
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
