// The topology-aware collectives (collectives/*_hierarchical.cpp) with ranks
// as threads and a fake node map: each rank's node identity is what
// ANTDT_NODE_ID=node<k> gives it (core/node_identity.hpp), for layouts with
// the nodes' ranks contiguous or interleaved, several ranks per node or one,
// and nodes of unequal size (the flat algorithms then). ReduceScatter,
// AllGather(v), Broadcast and AllReduce for every dtype and op, odd counts,
// counts below the rank count, in place and out of place, against the
// independent references (reference.hpp); exact operations bit-identical to
// the flat algorithms and floating-point sums within tolerance on random
// data; the selection's rows over a real communicator's node map; mismatches
// an error on every rank, timeouts and aborts bounded; a partial step whose
// contributors are a uniform subset of the nodes.
#include "collectives/api/make_communicator.hpp"
#include "collective_checks.hpp"
#include "comm_fixture.hpp"
#include "reference.hpp"
#include "test_environment.hpp"

#include "collectives/selection.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/node_identity.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <tuple>

namespace antdt::test {
namespace {

using coll::Algo;
using coll::Kind;

// Which node each rank is on.
struct Layout {
  const char* name;
  std::vector<int> node_of;
  int size() const { return static_cast<int>(node_of.size()); }
};

Layout contiguous(const char* name, int nodes, int per_node) {
  Layout l{name, {}};
  for (int r = 0; r < nodes * per_node; ++r) l.node_of.push_back(r / per_node);
  return l;
}
Layout interleaved(const char* name, int nodes, int per_node) {
  Layout l{name, {}};
  for (int r = 0; r < nodes * per_node; ++r) l.node_of.push_back(r % nodes);
  return l;
}

const Layout kLayouts[] = {
    contiguous("2x2_contiguous", 2, 2), interleaved("2x2_interleaved", 2, 2), contiguous("3x2_contiguous", 3, 2),
    interleaved("2x3_interleaved", 2, 3), contiguous("4x1", 4, 1),          contiguous("1x3_one_node", 1, 3),
    Layout{"uneven_2_1", {0, 1, 0}},
};

// Like run_ranks, with each rank's node from the layout (the identity
// ANTDT_NODE_ID=node<k> gives) and a configuration per rank.
Outcomes run_on_nodes(const Layout& layout, TransportKind kind, const std::function<Config(int)>& config_of,
                      const std::function<void(Communicator&)>& fn) {
  RankSetup setup{.config_of = config_of};
  for (int node : layout.node_of) setup.nodes.push_back(topology_node("node" + std::to_string(node)));
  return run_ranks(layout.size(), kind, setup, fn);
}

Outcomes run_on_nodes(const Layout& layout, TransportKind kind, AllreduceAlgo algo,
                      const std::function<void(Communicator&)>& fn) {
  return run_on_nodes(layout, kind, [algo](int) { return config_with(algo); }, fn);
}

// The call really runs hierarchically: the selection over this communicator's
// node map says so (ANTDT_ALGO=hierarchical forces it on every layout).
void expect_selected(Communicator& comm, Kind kind, std::size_t count, DataType t, Algo want) {
  const Algo got = coll::select_algorithm(comm.impl(), kind, count, t).algo;
  if (got != want)
    throw std::runtime_error(cat("selected ", coll::algo_name(got), " instead of ", coll::algo_name(want)));
}

using Param = std::tuple<TransportKind, int>;  // transport, index in kLayouts

class Hierarchical : public ::testing::TestWithParam<Param> {
 protected:
  TransportKind kind() const { return std::get<0>(GetParam()); }
  const Layout& layout() const { return kLayouts[std::get<1>(GetParam())]; }
  int ranks() const { return layout().size(); }
};

const std::size_t kBlockCounts[] = {0, 1, 7, 1003};         // per rank's block
const std::size_t kVectorCounts[] = {0, 1, 3, 7, 1003, 5001};  // whole vectors: some below the rank count

// ---------------------------------------------------------------------------
// Against the references: every dtype, op, count, placement
// ---------------------------------------------------------------------------
TEST_P(Hierarchical, ReduceScatterEveryDtypeOpCountAndPlacement) {
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : kBlockCounts) {
          expect_selected(comm, Kind::reduce_scatter, count, t, Algo::hierarchical);
          for (bool in_place : {false, true}) check_reduce_scatter(comm, t, op, count, in_place);
        }
      }
    }
  }));
}

TEST_P(Hierarchical, AllgatherEveryDtypeCountAndPlacement) {
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    for (DataType t : kAllTypes) {
      for (std::size_t count : kBlockCounts) {
        expect_selected(comm, Kind::allgather, count, t, Algo::hierarchical);
        for (bool in_place : {false, true}) check_allgather(comm, t, count, in_place);
      }
    }
  }));
}

TEST_P(Hierarchical, AllgathervWithZeroLengthMembersGapsAndInPlace) {
  const int n = ranks();
  const auto un = static_cast<std::size_t>(n);
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    // Rank b sends (b * 5) % 7 elements (rank 0 nothing), block b one element after block b-1 ends (gaps).
    std::vector<std::size_t> counts(un), displs(un);
    std::size_t at = 0;
    for (std::size_t b = 0; b < un; ++b) {
      counts[b] = (b * 5) % 7 + (b == 2 ? 3000 : 0);  // one block of several chunks
      displs[b] = at;
      at += counts[b] + 1;
    }
    for (bool in_place : {false, true}) {
      std::vector<double> mine(counts[r]), recv(at, -1.0);
      for (std::size_t i = 0; i < counts[r]; ++i) mine[i] = tag_value(DataType::f64, r, 1, i);
      if (in_place) std::copy(mine.begin(), mine.end(), recv.begin() + static_cast<std::ptrdiff_t>(displs[r]));
      comm.allgatherv(in_place ? recv.data() + displs[r] : mine.data(), recv.data(), counts, displs, DataType::f64);
      for (std::size_t b = 0; b < un; ++b) {
        for (std::size_t i = 0; i < counts[b]; ++i)
          if (recv[displs[b] + i] != tag_value(DataType::f64, b, 1, i))
            throw std::runtime_error(cat("allgatherv block ", b, " element ", i, " is ", recv[displs[b] + i]));
        if (recv[displs[b] + counts[b]] != -1.0) throw std::runtime_error(cat("allgatherv wrote into gap ", b));
      }
    }
  }));
}

TEST_P(Hierarchical, BroadcastFromEveryRootEveryDtypeCountAndPlacement) {
  const int n = ranks();
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    for (int root = 0; root < n; ++root) {
      for (DataType t : kAllTypes) {
        const std::size_t es = dtype_size(t);
        for (std::size_t count : kVectorCounts) {
          expect_selected(comm, Kind::broadcast, count, t, Algo::hierarchical);
          for (bool in_place : {false, true}) {
            std::vector<std::byte> send(count * es), recv(count * es + 1, std::byte{0x5a});
            const auto from = static_cast<std::size_t>(root);
            for (std::size_t i = 0; i < count; ++i)
              store(t, send.data(), i, static_cast<int>(r) == root ? tag_value(t, from, 2, i) : 0.0);
            if (in_place && count > 0) std::memcpy(recv.data(), send.data(), count * es);
            comm.broadcast(in_place ? recv.data() : send.data(), recv.data(), count, t, root);
            const std::string what = cat(where("broadcast", t, ReduceOp::sum, count, in_place), " root ", root);
            for (std::size_t i = 0; i < count; ++i)
              if (load(t, recv.data(), i) != tag_value(t, from, 2, i))
                throw std::runtime_error(cat(what, ": element ", i, " is ", load(t, recv.data(), i)));
            if (recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
          }
        }
      }
    }
  }));
}

TEST_P(Hierarchical, AllreduceEveryDtypeOpCountAndPlacement) {
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        // Slices of several chunks at 1003 elements of 8 bytes; counts below the rank count.
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1003}}) {
          for (bool in_place : {false, true}) check_allreduce(comm, t, op, count, in_place);
        }
      }
    }
  }));
}

// The pipelines (collectives/block_pipeline.hpp): with 4 KiB chunks these
// counts run many more blocks than the window of blocks in flight, with a
// short last block, through every step kind of AllReduce, ReduceScatter and
// AllGather.
TEST_P(Hierarchical, PipelinesManyBlocksInEveryPlacement) {
  expect_all_ok(run_on_nodes(layout(), kind(), AllreduceAlgo::hierarchical, [&](Communicator& comm) {
    for (DataType t : {DataType::f32, DataType::i64, DataType::f16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        for (std::size_t count : {std::size_t{20011}, std::size_t{65536}}) {
          for (bool in_place : {false, true}) check_allreduce(comm, t, op, count, in_place);
        }
        for (bool in_place : {false, true}) check_reduce_scatter(comm, t, op, 9001, in_place);
      }
      for (bool in_place : {false, true}) check_allgather(comm, t, 9001, in_place);
    }
  }));
}

// ---------------------------------------------------------------------------
// Against the flat algorithms on random data
// ---------------------------------------------------------------------------
// Each rank's results of one call sequence, run once hierarchically and once flat.
struct Results {
  std::mutex lock;
  std::vector<std::vector<std::vector<std::byte>>> of_rank;  // [rank][call]
};

// Random values of the type's range (integer sums may wrap: the same way in
// either order).
void random_fill(std::vector<std::byte>& v, DataType t, std::mt19937& rng) {
  const bool narrow = t == DataType::i8 || t == DataType::u8;
  std::uniform_int_distribution<int> ints(is_signed_or_float(t) ? (narrow ? -100 : -1000) : 0, narrow ? 100 : 1000);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  for (std::size_t i = 0; i < v.size() / dtype_size(t); ++i)
    store(t, v.data(), i, is_float(t) ? real(rng) : static_cast<double>(ints(rng)));
}

// The calls compared: reduce-scatter and allreduce of every dtype with every
// op, allgather and broadcast of every dtype, all on random data.
void compared_calls(Communicator& comm, std::vector<std::vector<std::byte>>& out) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::mt19937 rng(static_cast<unsigned>(comm.rank()) * 977u + 5u);
  const std::size_t count = 2003;
  for (DataType t : kAllTypes) {
    const std::size_t es = dtype_size(t);
    for (ReduceOp op : kAllOps) {
      if (op == ReduceOp::prod && !is_float(t)) continue;  // integer products of random values overflow
      std::vector<std::byte> send(n * count * es), recv(count * es);
      random_fill(send, t, rng);
      comm.reduce_scatter(send.data(), recv.data(), count, t, op);
      out.push_back(recv);
      std::vector<std::byte> whole(count * es);
      random_fill(whole, t, rng);
      comm.allreduce(whole.data(), whole.data(), count, t, op);
      out.push_back(whole);
    }
    std::vector<std::byte> block(count * es), gathered(n * count * es), payload(count * es);
    random_fill(block, t, rng);
    comm.allgather(block.data(), gathered.data(), count, t);
    out.push_back(gathered);
    random_fill(payload, t, rng);
    comm.broadcast(payload.data(), payload.data(), count, t, static_cast<int>(n) - 1);
    out.push_back(payload);
  }
}

TEST_P(Hierarchical, ExactOperationsBitIdenticalToFlatFloatSumsWithinTolerance) {
  const int n = ranks();
  Results hier, flat;
  hier.of_rank.resize(static_cast<std::size_t>(n));
  flat.of_rank.resize(static_cast<std::size_t>(n));
  for (Results* results : {&hier, &flat}) {
    const AllreduceAlgo algo = results == &hier ? AllreduceAlgo::hierarchical : AllreduceAlgo::ring;
    expect_all_ok(run_on_nodes(layout(), kind(), algo, [&](Communicator& comm) {
      compared_calls(comm, results->of_rank[static_cast<std::size_t>(comm.rank())]);
    }));
  }
  for (int r = 0; r < n; ++r) {
    const auto& h = hier.of_rank[static_cast<std::size_t>(r)];
    const auto& f = flat.of_rank[static_cast<std::size_t>(r)];
    ASSERT_EQ(h.size(), f.size());
    std::size_t call = 0;
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        if (op == ReduceOp::prod && !is_float(t)) continue;
        const bool exact = !is_float(t) || op == ReduceOp::min || op == ReduceOp::max;
        for (const char* what : {"reduce_scatter", "allreduce"}) {
          const auto& a = h[call];
          const auto& b = f[call];
          ++call;
          if (exact) {
            EXPECT_TRUE(a == b) << what << " " << dtype_name(t) << " " << op_name(op) << " rank " << r
                            << ": an exact operation differs from the flat ring";
            continue;
          }
          // The reduction order differs: equal within the type's rounding.
          const double tol = t == DataType::bf16 ? 0.15 : t == DataType::f16 ? 0.03 : t == DataType::f32 ? 1e-5 : 1e-12;
          std::size_t off = 0;
          for (std::size_t i = 0; i < a.size() / dtype_size(t); ++i) {
            const double x = load(t, a.data(), i), y = load(t, b.data(), i);
            if (std::fabs(x - y) > tol * std::max(1.0, std::fabs(y))) ++off;
          }
          EXPECT_EQ(off, 0u) << what << " " << dtype_name(t) << " " << op_name(op) << " rank " << r;
        }
      }
      EXPECT_TRUE(h[call] == f[call]) << "allgather " << dtype_name(t) << " rank " << r;
      ++call;
      EXPECT_TRUE(h[call] == f[call]) << "broadcast " << dtype_name(t) << " rank " << r;
      ++call;
    }
  }
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (int i = 0; i < static_cast<int>(std::size(kLayouts)); ++i) p.emplace_back(TransportKind::inproc, i);
  p.emplace_back(TransportKind::ucx, 0);  // 2x2 contiguous
  p.emplace_back(TransportKind::ucx, 3);  // 2x3 interleaved
  return p;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Hierarchical, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return to_string(std::get<0>(p.param)) + "_" + kLayouts[std::get<1>(p.param)].name;
                         });

// ---------------------------------------------------------------------------
// The selection over a real node map
// ---------------------------------------------------------------------------
TEST(HierarchicalSelection, AutoFromTheThresholdOnSeveralEqualNodesOnly) {
  const std::size_t threshold_floats = coll::kHierarchicalMinBytes / 4;
  expect_all_ok(run_on_nodes(kLayouts[0], TransportKind::inproc, AllreduceAlgo::automatic, [&](Communicator& comm) {
    const auto n = static_cast<std::size_t>(comm.size());
    // ReduceScatter and AllGather count each rank's whole vector (all blocks), Broadcast its payload.
    expect_selected(comm, Kind::reduce_scatter, threshold_floats / n, DataType::f32, Algo::hierarchical);
    expect_selected(comm, Kind::reduce_scatter, threshold_floats / n - 1, DataType::f32, Algo::ring);
    expect_selected(comm, Kind::allgather, threshold_floats / n, DataType::f32, Algo::hierarchical);
    expect_selected(comm, Kind::allgather, threshold_floats / n - 1, DataType::f32, Algo::ring);
    expect_selected(comm, Kind::allgatherv, threshold_floats, DataType::f32, Algo::hierarchical);
    expect_selected(comm, Kind::broadcast, threshold_floats, DataType::f32, Algo::hierarchical);
    expect_selected(comm, Kind::broadcast, threshold_floats - 1, DataType::f32, Algo::chain);
    // And the large calls run it correctly.
    const std::size_t count = threshold_floats / n;
    std::vector<float> send(n * count), recv(count);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>((i % 11) + comm.rank());
    comm.reduce_scatter(send.data(), recv.data(), count, DataType::f32, ReduceOp::sum);
    const auto r = static_cast<std::size_t>(comm.rank());
    for (std::size_t j = 0; j < count; ++j) {
      const float want = static_cast<float>(n * ((r * count + j) % 11) + 6);  // ranks 0..3 add 0+1+2+3
      if (recv[j] != want) throw std::runtime_error(cat("reduce_scatter element ", j, " is ", recv[j]));
    }
    std::vector<float> payload(threshold_floats, comm.rank() == 2 ? 7.5f : 0.0f);
    comm.broadcast(payload.data(), payload.data(), payload.size(), DataType::f32, 2);
    for (float v : payload)
      if (v != 7.5f) throw std::runtime_error(cat("broadcast element is ", v));
  }));
  // One node, nodes of unequal size, one rank per node: the flat algorithms.
  for (int index : {4, 5, 6}) {
    expect_all_ok(run_on_nodes(kLayouts[index], TransportKind::inproc, AllreduceAlgo::automatic, [&](Communicator& comm) {
      expect_selected(comm, Kind::reduce_scatter, threshold_floats, DataType::f32, Algo::ring);
      expect_selected(comm, Kind::allgather, threshold_floats, DataType::f32, Algo::ring);
      expect_selected(comm, Kind::broadcast, threshold_floats, DataType::f32, Algo::chain);
    }));
  }
  // ANTDT_ALGO=ring: the flat algorithms on any layout.
  expect_all_ok(run_on_nodes(kLayouts[0], TransportKind::inproc, AllreduceAlgo::ring, [&](Communicator& comm) {
    expect_selected(comm, Kind::reduce_scatter, threshold_floats, DataType::f32, Algo::ring);
    expect_selected(comm, Kind::broadcast, threshold_floats, DataType::f32, Algo::chain);
  }));
}

// ---------------------------------------------------------------------------
// Mismatches, timeouts, aborts
// ---------------------------------------------------------------------------
void expect_every_rank_failed_with_mismatch(const Outcomes& outcomes, const std::string& what) {
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_TRUE(failed_with<MismatchError>(outcomes, static_cast<int>(r)))
        << what << ": rank " << r << ": " << failure_of(outcomes, static_cast<int>(r));
}

TEST(HierarchicalErrors, MismatchedCountsAndRootsAreErrorsOnEveryRank) {
  for (int index : {0, 3}) {
    const Layout& layout = kLayouts[index];
    auto count_of = [](const Communicator& c) { return std::size_t{c.rank() == 1 ? 9u : 8u}; };
    expect_every_rank_failed_with_mismatch(
        run_on_nodes(layout, TransportKind::inproc, AllreduceAlgo::hierarchical, [&](Communicator& comm) {
          std::vector<float> s(64 * 8, 1.0f), o(64 * 8);
          comm.reduce_scatter(s.data(), o.data(), count_of(comm), DataType::f32, ReduceOp::sum);
        }), cat(layout.name, " reduce_scatter count"));
    expect_every_rank_failed_with_mismatch(
        run_on_nodes(layout, TransportKind::inproc, AllreduceAlgo::hierarchical, [&](Communicator& comm) {
          std::vector<float> s(64 * 8, 1.0f), o(64 * 8);
          comm.allgather(s.data(), o.data(), count_of(comm), DataType::f32);
        }), cat(layout.name, " allgather count"));
    expect_every_rank_failed_with_mismatch(
        run_on_nodes(layout, TransportKind::inproc, AllreduceAlgo::hierarchical, [&](Communicator& comm) {
          std::vector<float> s(64, 1.0f);
          comm.broadcast(s.data(), s.data(), count_of(comm), DataType::f32, 0);
        }), cat(layout.name, " broadcast count"));
    expect_every_rank_failed_with_mismatch(
        run_on_nodes(layout, TransportKind::inproc, AllreduceAlgo::hierarchical, [&](Communicator& comm) {
          std::vector<float> s(64, 1.0f);
          comm.broadcast(s.data(), s.data(), s.size(), DataType::f32, comm.rank() == 2 ? 1 : 0);
        }), cat(layout.name, " broadcast root"));
    expect_every_rank_failed_with_mismatch(
        run_on_nodes(layout, TransportKind::inproc, AllreduceAlgo::hierarchical, [&](Communicator& comm) {
          std::vector<std::int32_t> s(64 * 8, 1), o(64 * 8);
          comm.reduce_scatter(s.data(), o.data(), 8, comm.rank() == 0 ? DataType::u32 : DataType::i32,
                              ReduceOp::sum);
        }), cat(layout.name, " reduce_scatter dtype"));
  }
}

TEST(HierarchicalErrors, RanksThatChooseDifferentAlgorithmsFailWithMismatchEverywhere) {
  // Rank 1 forces the flat algorithms, the others the hierarchy: the
  // algorithm is part of the signature, so the first message between ranks
  // that disagree is a mismatch, and the abort makes it one on every rank.
  for (int index : {0, 1}) {
    const Layout& layout = kLayouts[index];
    auto config_of = [](int rank) { return config_with(rank == 1 ? AllreduceAlgo::ring : AllreduceAlgo::hierarchical); };
    expect_every_rank_failed_with_mismatch(run_on_nodes(layout, TransportKind::inproc, config_of, [](Communicator& comm) {
      std::vector<float> s(4 * 300, 1.0f), o(300);
      comm.reduce_scatter(s.data(), o.data(), 300, DataType::f32, ReduceOp::sum);
    }), cat(layout.name, " reduce_scatter"));
    expect_every_rank_failed_with_mismatch(run_on_nodes(layout, TransportKind::inproc, config_of, [](Communicator& comm) {
      std::vector<float> s(300, 1.0f), o(4 * 300);
      comm.allgather(s.data(), o.data(), 300, DataType::f32);
    }), cat(layout.name, " allgather"));
    expect_every_rank_failed_with_mismatch(run_on_nodes(layout, TransportKind::inproc, config_of, [](Communicator& comm) {
      std::vector<float> s(300, 1.0f);
      comm.broadcast(s.data(), s.data(), s.size(), DataType::f32, 0);
      comm.barrier();  // the root only sends: it learns of the mismatch at its next call
    }), cat(layout.name, " broadcast"));
  }
}

TEST(HierarchicalErrors, AMissingRankIsATimeoutNotAHang) {
  Config cfg = config_with(AllreduceAlgo::hierarchical);
  cfg.timeout = std::chrono::milliseconds(800);
  const auto started = std::chrono::steady_clock::now();
  auto outcomes = run_on_nodes(kLayouts[0], TransportKind::inproc, [&](int) { return cfg; }, [](Communicator& comm) {
    if (comm.rank() == 3) {
      std::this_thread::sleep_for(std::chrono::seconds(3));  // never calls; alive past the others' timeout
      return;
    }
    std::vector<float> s(4 * 1000, 1.0f), o(1000);
    comm.reduce_scatter(s.data(), o.data(), 1000, DataType::f32, ReduceOp::sum);
  });
  const auto took = std::chrono::steady_clock::now() - started;
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(failed_with<TimeoutError>(outcomes, r) || failed_with<RemoteAbortError>(outcomes, r))
        << "rank " << r << ": " << failure_of(outcomes, r);
  EXPECT_TRUE(failed_with<TimeoutError>(outcomes, 0) || failed_with<TimeoutError>(outcomes, 1) ||
              failed_with<TimeoutError>(outcomes, 2))
      << "nobody timed out";
  EXPECT_LT(took, std::chrono::seconds(20));
}

TEST(HierarchicalErrors, AbortFromOneRankStopsTheOthersInTheHierarchy) {
  Config cfg = config_with(AllreduceAlgo::hierarchical);
  cfg.timeout = std::chrono::seconds(30);  // far beyond the test's bound: the abort must end it
  const auto started = std::chrono::steady_clock::now();
  auto outcomes = run_on_nodes(kLayouts[3], TransportKind::inproc, [&](int) { return cfg; }, [](Communicator& comm) {
    std::vector<float> s(4000, 1.0f);
    if (comm.rank() == 0) {  // the root: never broadcasts, aborts instead
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      comm.abort("test abort");
      return;
    }
    comm.broadcast(s.data(), s.data(), s.size(), DataType::f32, 0);
  });
  const auto took = std::chrono::steady_clock::now() - started;
  for (int r = 1; r < 6; ++r)
    EXPECT_TRUE(failed_with<RemoteAbortError>(outcomes, r) || failed_with<AbortedError>(outcomes, r))
        << "rank " << r << ": " << failure_of(outcomes, r);
  EXPECT_LT(took, std::chrono::seconds(10));
}

// ---------------------------------------------------------------------------
// Partial AllReduce: a step's contributors as their own hierarchy
// ---------------------------------------------------------------------------
Config partial_config(AllreduceAlgo algo) {
  Config cfg = config_with(algo);
  cfg.partial_warmup = 2;
  cfg.partial_grace_ms = 2;
  cfg.result_cache = 8;
  return cfg;
}

// 2 nodes x 3 ranks; ranks 2 and 5 (the last of each node) contribute
// nothing, so the step's contributors are 2 nodes x 2 ranks.
TEST(HierarchicalPartial, ContributorsOnEqualNodesReduceHierarchically) {
  const Layout layout = contiguous("2x3", 2, 3);
  ScopedEnv level("ANTDT_DEBUG", "TRACE");
  reload_config();
  for (const bool weighted : {false, true}) {
    for (AllreduceAlgo algo : {AllreduceAlgo::hierarchical, AllreduceAlgo::automatic}) {
      const std::size_t count = algo == AllreduceAlgo::automatic ? coll::kHierarchicalMinBytes / 8 : 1003;
      StderrCapture capture;
      expect_all_ok(run_on_nodes(layout, TransportKind::inproc, [&](int) { return partial_config(algo); },
                                 [&](Communicator& comm) {
        const int r = comm.rank();
        const bool contributes = r != 2 && r != 5;
        // weighted: avg with weights 1 and 2 (ranks 0, 3 weigh 1; 1, 4 weigh 2); else a sum.
        const double weight = !contributes ? 0.0 : weighted && (r == 1 || r == 4) ? 2.0 : 1.0;
        std::vector<double> grad(count), result(count, -1.0);
        for (std::size_t i = 0; i < count; ++i) grad[i] = static_cast<double>((i % 13) + 10 * r);
        auto got = comm.partial_allreduce(contributes ? grad.data() : nullptr, result.data(), count, DataType::f64,
                                          weighted ? ReduceOp::avg : ReduceOp::sum,
                                          PartialOptions{LatePolicy::wait, weight, 1, 0});
        if (got.participants != 4) throw std::runtime_error(cat("participants ", got.participants));
        for (std::size_t i = 0; i < count; ++i) {
          const double base = static_cast<double>(i % 13);
          // Contributors 0, 1, 3, 4: sum 4 base + 80; weighted (1, 2, 1, 2): (6 base + 10*(0+2+3+8)) / 6.
          const double want = weighted ? (6 * base + 130) / 6 : 4 * base + 80;
          if (std::fabs(result[i] - want) > 1e-9)
            throw std::runtime_error(cat("element ", i, " is ", result[i], ", expected ", want));
        }
        comm.partial_finish();
      }));
      // The step's selection line names the contributors' hierarchical row.
      const std::string out = capture.finish();
      bool hierarchical = false;
      std::istringstream lines(out);
      for (std::string line; std::getline(lines, line);)
        hierarchical |= line.find("partial_allreduce of " + std::to_string(count) + " x f64") != std::string::npos &&
                        line.find(": hierarchical (row") != std::string::npos;
      EXPECT_TRUE(hierarchical) << (weighted ? "weighted " : "") << "partial step, ANTDT_ALGO "
                                << (algo == AllreduceAlgo::automatic ? "auto" : "hierarchical")
                                << ": no selection of the hierarchy among its contributors in\n" << out.substr(0, 4000);
    }
  }
}

}  // namespace
}  // namespace antdt::test
