// The collective suite with ranks as threads, over every transport and 1..5
// ranks: reduce-scatter, allgather(v), reduce, alltoall, send/recv, group
// calls, non-blocking requests and both allreduce algorithms, for every dtype
// (and op where it applies), counts from 0, odd counts, in place and out of
// place, against independent references (reference.hpp); mismatched calls of
// each kind, bad arguments, and the algorithm choice.
#include "collectives/api/make_communicator.hpp"
#include "collective_checks.hpp"
#include "comm_fixture.hpp"
#include "reference.hpp"

#include "collectives/collectives.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <antdt/comm.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace antdt::test {
namespace {

const std::size_t kCounts[] = {0, 1, 7, 1003};

// The forced ANTDT_ALGO a loop runs under, for its failure messages.
const char* algo_label(AllreduceAlgo algo) {
  switch (algo) {
    case AllreduceAlgo::automatic: return "auto";
    case AllreduceAlgo::ring: return "ring";
    case AllreduceAlgo::recursive_doubling: return "recursive doubling";
    case AllreduceAlgo::shm: return "shm";
    case AllreduceAlgo::hierarchical: return "hierarchical";
    case AllreduceAlgo::rabenseifner: return "rabenseifner";
  }
  return "?";
}

// Like run_ranks, with a configuration per rank (to force disagreeing settings).
Outcomes run_ranks_configured(int n, TransportKind kind, const std::function<Config(int)>& config_of,
                              const std::function<void(Communicator&)>& fn) {
  return run_ranks(n, kind, RankSetup{.config_of = config_of}, fn);
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const E&) {
    return;
  }
  throw std::runtime_error(what + " was accepted");
}

using Param = std::tuple<TransportKind, int>;

class CollectiveSuite : public ::testing::TestWithParam<Param> {
 protected:
  TransportKind kind() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
  // Every rank must fail with MismatchError.
  void expect_mismatch_everywhere(const std::function<void(Communicator&)>& fn) {
    const int n = ranks();
    auto outcomes = run_ranks(n, kind(), fn);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << "rank " << r << ": " << failure_of(outcomes, r);
  }
};

// ---------------------------------------------------------------------------
// AllReduce: both algorithms, forced
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, AllreduceEveryAlgorithmDtypeOpCountAndPlacement) {
  const int n = ranks();
  for (AllreduceAlgo algo : {AllreduceAlgo::recursive_doubling, AllreduceAlgo::ring, AllreduceAlgo::rabenseifner}) {
    auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
      for (DataType t : kAllTypes) {
        const std::size_t es = dtype_size(t);
        for (ReduceOp op : kAllOps) {
          for (std::size_t count : kCounts) {
            for (bool in_place : {false, true}) {
              std::vector<std::byte> send(count * es + 1), recv(count * es + 1, std::byte{0x5a});
              for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, input(t, op, comm.rank(), i));
              if (in_place) recv = send;
              comm.allreduce(in_place ? recv.data() : send.data(), recv.data(), count, t, op);
              const std::string what = where("allreduce", t, op, count, in_place);
              for (std::size_t i = 0; i < count; ++i)
                expect_element(what, i, load(t, recv.data(), i), expected(t, op, n, i), t, op);
              if (!in_place && recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
            }
          }
        }
      }
    }, config_with(algo));
    ASSERT_NO_THROW(expect_all_ok(outcomes)) << algo_label(algo);
  }
}

TEST_P(CollectiveSuite, RecursiveDoublingAndRabenseifnerGiveEveryRankTheSameBits) {
  // Sums of values that round differently depending on the order: every rank
  // must still hold exactly the same result. 257 elements: blocks of unequal
  // length for every power of two.
  const int n = ranks();
  for (AllreduceAlgo algo : {AllreduceAlgo::recursive_doubling, AllreduceAlgo::rabenseifner}) {
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
    auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
      std::vector<float> v(257);
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = 1.0f / static_cast<float>(3 + i + 7 * static_cast<std::size_t>(comm.rank()));
      comm.allreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum);
      results[static_cast<std::size_t>(comm.rank())] = v;
    }, config_with(algo));
    expect_all_ok(outcomes);
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(), 257 * sizeof(float)), 0)
          << "rank " << r << " (" << algo_label(algo) << ")";
  }
}

// ---------------------------------------------------------------------------
// ReduceScatter, Reduce, AllGather(v), AlltoAll
// ---------------------------------------------------------------------------
// ANTDT_ALGO=rabenseifner: recursive halving (ReduceScatter) and doubling
// (AllGather) at power-of-two rank counts, the rings at the others.
TEST_P(CollectiveSuite, ReduceScatterEveryAlgorithmDtypeOpCountAndPlacement) {
  const int n = ranks();
  for (AllreduceAlgo algo : {AllreduceAlgo::automatic, AllreduceAlgo::rabenseifner}) {
    auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          for (std::size_t count : kCounts) {
            for (bool in_place : {false, true}) check_reduce_scatter(comm, t, op, count, in_place);
          }
        }
      }
    }, config_with(algo));
    ASSERT_NO_THROW(expect_all_ok(outcomes)) << algo_label(algo);
  }
}

TEST_P(CollectiveSuite, ReduceToEveryRootTreeAndChain) {
  const int n = ranks();
  // 70001 elements is above the tree's 64 KiB for every dtype: the pipelined chain.
  const std::size_t counts[] = {0, 1, 7, 1003, 70001};
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    int round = 0;
    for (DataType t : kAllTypes) {
      const std::size_t es = dtype_size(t);
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : counts) {
          if (count > 1003 && op != ReduceOp::sum && op != ReduceOp::avg) continue;  // keep the large case brief
          for (bool in_place : {false, true}) {
            const int root = round++ % n;
            const bool is_root = comm.rank() == root;
            std::vector<std::byte> send(count * es + 1), recv(count * es + 1, std::byte{0x5a});
            for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, input(t, op, comm.rank(), i));
            const std::vector<std::byte> original = send;
            std::byte* out = in_place && is_root ? send.data() : recv.data();
            comm.reduce(send.data(), is_root || comm.rank() % 2 == 0 ? out : nullptr, count, t, op, root);
            const std::string what = cat(where("reduce", t, op, count, in_place), " root ", root);
            if (is_root)
              for (std::size_t i = 0; i < count; ++i)
                expect_element(what, i, load(t, out, i), expected(t, op, n, i), t, op);
            if (!(in_place && is_root) && send != original) throw std::runtime_error(what + ": the send buffer changed");
            if (recv[count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
            if (!is_root && std::any_of(recv.begin(), recv.end(), [](std::byte x) { return x != std::byte{0x5a}; }))
              throw std::runtime_error(what + ": a non-root's recv buffer was written");
          }
        }
      }
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(CollectiveSuite, AllgatherEveryAlgorithmDtypeCountAndPlacement) {
  const int n = ranks();
  for (AllreduceAlgo algo : {AllreduceAlgo::automatic, AllreduceAlgo::rabenseifner}) {
    auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
      for (DataType t : kAllTypes) {
        for (std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1003}, std::size_t{3001}}) {
          for (bool in_place : {false, true}) check_allgather(comm, t, count, in_place);
        }
      }
    }, config_with(algo));
    ASSERT_NO_THROW(expect_all_ok(outcomes)) << algo_label(algo);
  }
}

TEST_P(CollectiveSuite, AllgathervWithZeroLengthMembersGapsAndInPlace) {
  const int n = ranks();
  const auto un = static_cast<std::size_t>(n);
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    for (DataType t : kAllTypes) {
      const std::size_t es = dtype_size(t);
      for (int pattern = 0; pattern < 3; ++pattern) {
        // Pattern 0: every other rank gives nothing; 1: only the last rank gives
        // data; 2: everybody gives data, spanning several chunks for some.
        std::vector<std::size_t> counts(un);
        for (std::size_t b = 0; b < un; ++b)
          counts[b] = pattern == 0 ? (b % 2 == 0 ? 0 : 5 + b) : pattern == 1 ? (b + 1 == un ? 9 : 0) : 700 * b + 3;
        for (bool packed : {true, false}) {
          for (bool in_place : {false, true}) {
            // Gapped layout: blocks in reverse rank order with 2 elements between them.
            std::vector<std::size_t> displs(un);
            std::size_t extent = 0;
            if (packed) {
              std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
              extent = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
            } else {
              for (std::size_t k = un; k-- > 0;) {
                displs[k] = extent + 2;
                extent = displs[k] + counts[k];
              }
            }
            std::vector<std::byte> send(counts[r] * es), recv(extent * es + 1, std::byte{0x5a});
            for (std::size_t i = 0; i < counts[r]; ++i) store(t, send.data(), i, tag_value(t, r, 1, i));
            const std::byte* from = send.data();
            if (in_place) {
              if (counts[r] > 0) std::memcpy(recv.data() + displs[r] * es, send.data(), counts[r] * es);
              from = recv.data() + displs[r] * es;
            }
            comm.allgatherv(from, recv.data(), counts, packed ? std::span<const std::size_t>() : displs, t);
            const std::string what = cat("allgatherv ", dtype_name(t), " pattern ", pattern, packed ? " packed" : " gapped",
                                         in_place ? " in place" : "");
            for (std::size_t b = 0; b < un; ++b)
              for (std::size_t i = 0; i < counts[b]; ++i)
                expect_element(cat(what, " block ", b), i, load(t, recv.data(), displs[b] + i), tag_value(t, b, 1, i),
                               t, ReduceOp::sum);
            if (!packed)
              for (std::size_t b = 0; b < un; ++b)
                if (recv[(displs[b] - 1) * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote into a gap");
            if (recv[extent * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
          }
        }
      }
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(CollectiveSuite, AlltoallEveryDtypeCountAndPlacement) {
  const int n = ranks();
  const auto un = static_cast<std::size_t>(n);
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    for (DataType t : kAllTypes) {
      const std::size_t es = dtype_size(t);
      for (std::size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          // Block j of rank r's send is tagged (r, j); rank r must receive (j, r) in block j.
          std::vector<std::byte> send(un * count * es), recv(un * count * es + 1, std::byte{0x5a});
          for (std::size_t j = 0; j < un; ++j)
            for (std::size_t i = 0; i < count; ++i) store(t, send.data(), j * count + i, tag_value(t, r, j, i));
          if (in_place) std::copy(send.begin(), send.end(), recv.begin());
          comm.alltoall(in_place ? recv.data() : send.data(), recv.data(), count, t);
          const std::string what = where("alltoall", t, ReduceOp::sum, count, in_place);
          for (std::size_t j = 0; j < un; ++j)
            for (std::size_t i = 0; i < count; ++i)
              expect_element(cat(what, " block ", j), i, load(t, recv.data(), j * count + i), tag_value(t, j, r, i), t,
                             ReduceOp::sum);
          if (recv[un * count * es] != std::byte{0x5a}) throw std::runtime_error(what + ": wrote past the end");
        }
      }
    }
  });
  expect_all_ok(outcomes);
}

// ---------------------------------------------------------------------------
// Send/recv
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, SendRecvMatchInOrderAndDoNotMeetCollectives) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "send/recv needs a peer";
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const int right = (comm.rank() + 1) % n, left = (comm.rank() + n - 1) % n;
    // Messages of one size, distinguishable only by content and order.
    constexpr int kMessages = 6;
    std::vector<std::vector<std::int64_t>> out(kMessages, std::vector<std::int64_t>(300)), in = out;
    for (int m = 0; m < kMessages; ++m)
      for (std::size_t i = 0; i < 300; ++i) out[static_cast<std::size_t>(m)][i] = comm.rank() * 1000000 + m * 1000 + static_cast<std::int64_t>(i);
    auto check = [&](const char* how) {
      for (int m = 0; m < kMessages; ++m)
        for (std::size_t i = 0; i < 300; ++i)
          if (in[static_cast<std::size_t>(m)][i] != left * 1000000 + m * 1000 + static_cast<std::int64_t>(i))
            throw std::runtime_error(cat(how, ": message ", m, " element ", i, " is ", in[static_cast<std::size_t>(m)][i]));
    };
    // 1. A ring exchange in a group: every rank sends before it receives.
    comm.group_start();
    for (int m = 0; m < kMessages; ++m) comm.send(out[static_cast<std::size_t>(m)].data(), 300, DataType::i64, right);
    for (int m = 0; m < kMessages; ++m) comm.recv(in[static_cast<std::size_t>(m)].data(), 300, DataType::i64, left);
    comm.group_end();
    check("group");
    // 2. isend/irecv, waited for in reverse order, with collectives between
    //    the posts and the waits: tags keep the two streams apart.
    for (auto& v : in) std::fill(v.begin(), v.end(), -1);
    std::vector<Request> requests;
    for (int m = 0; m < kMessages; ++m) requests.push_back(comm.irecv(in[static_cast<std::size_t>(m)].data(), 300, DataType::i64, left));
    for (int m = 0; m < kMessages; ++m) requests.push_back(comm.isend(out[static_cast<std::size_t>(m)].data(), 300, DataType::i64, right));
    std::int32_t one = 1;
    comm.allreduce(&one, &one, 1, DataType::i32, ReduceOp::sum);
    if (one != n) throw std::runtime_error("allreduce between posted transfers is wrong");
    comm.barrier();
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) it->wait();
    check("isend/irecv");
    // 3. Blocking, alternating by parity so that nobody waits on a send whose receive is not posted.
    for (auto& v : in) std::fill(v.begin(), v.end(), -1);
    for (int m = 0; m < kMessages; ++m) {
      auto& o = out[static_cast<std::size_t>(m)];
      auto& i = in[static_cast<std::size_t>(m)];
      if (comm.rank() % 2 == 0) {
        comm.send(std::span<const std::int64_t>(o), right);
        comm.recv(std::span<std::int64_t>(i), left);
      } else {
        Request r = comm.irecv(i.data(), i.size(), DataType::i64, left);
        comm.send(std::span<const std::int64_t>(o), right);
        r.wait();
      }
    }
    check("blocking");
  });
  expect_all_ok(outcomes);
}

TEST_P(CollectiveSuite, TransfersOfEveryDtypeAndEmptyOnes) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "send/recv needs a peer";
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const int right = (comm.rank() + 1) % n, left = (comm.rank() + n - 1) % n;
    for (DataType t : kAllTypes) {
      const std::size_t es = dtype_size(t);
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}}) {
        std::vector<std::byte> out(count * es), in(count * es + 1, std::byte{0x5a});
        for (std::size_t i = 0; i < count; ++i) store(t, out.data(), i, tag_value(t, r, 2, i));
        Request q = comm.irecv(in.data(), count, t, left);
        Request s = comm.isend(out.data(), count, t, right);
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!q.test()) {
          if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("irecv never completed");
          std::this_thread::yield();  // oversubscribed: let the peers run
        }
        s.wait();
        for (std::size_t i = 0; i < count; ++i)
          expect_element(cat("transfer ", dtype_name(t), " count ", count), i, load(t, in.data(), i),
                         tag_value(t, static_cast<std::size_t>(left), 2, i), t, ReduceOp::sum);
        if (in[count * es] != std::byte{0x5a}) throw std::runtime_error("recv wrote past the end");
      }
    }
  });
  expect_all_ok(outcomes);
}

// ---------------------------------------------------------------------------
// Group calls
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, GroupFusionEqualsSeparateCalls) {
  const int n = ranks();
  struct Item {
    DataType t;
    ReduceOp op;
    std::size_t count;
    bool in_place;
  };
  // Interleaved keys, empty members, in place and out of place.
  const Item items[] = {{DataType::f32, ReduceOp::sum, 13, false}, {DataType::i32, ReduceOp::max, 5, true},
                        {DataType::f32, ReduceOp::sum, 0, true},   {DataType::f32, ReduceOp::sum, 1003, true},
                        {DataType::bf16, ReduceOp::avg, 33, false}, {DataType::i32, ReduceOp::max, 1, false},
                        {DataType::u8, ReduceOp::prod, 9, false},   {DataType::f32, ReduceOp::sum, 2, false}};
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    std::vector<std::vector<std::byte>> sends, grouped, separate;
    for (const Item& it : items) {
      std::vector<std::byte> v(it.count * dtype_size(it.t));
      for (std::size_t i = 0; i < it.count; ++i) store(it.t, v.data(), i, input(it.t, it.op, comm.rank(), i + 11));
      sends.push_back(v);
      grouped.emplace_back(v.size(), std::byte{0x5a});
      separate.emplace_back(v.size(), std::byte{0x5a});
    }
    auto issue = [&](std::vector<std::vector<std::byte>>& out) {
      for (std::size_t k = 0; k < std::size(items); ++k) {
        const Item& it = items[k];
        if (it.in_place) out[k] = sends[k];
        comm.allreduce(it.in_place ? out[k].data() : sends[k].data(), out[k].data(), it.count, it.t, it.op);
      }
    };
    std::int64_t token = comm.rank() == 0 ? 77 : 0;
    comm.group_start();
    comm.group_start();  // nested: only the outer group_end runs the group
    issue(grouped);
    comm.group_end();
    comm.broadcast(&token, &token, 1, DataType::i64, 0);  // a non-allreduce member, run in order
    for (const auto& g : grouped)
      if (!g.empty() && g[0] != std::byte{0x5a} && !items[&g - grouped.data()].in_place)
        throw std::runtime_error("a grouped allreduce ran before group_end");
    comm.group_end();
    if (token != 77) throw std::runtime_error("broadcast in the group did not run");
    issue(separate);
    for (std::size_t k = 0; k < std::size(items); ++k) {
      const Item& it = items[k];
      if (grouped[k] != separate[k]) throw std::runtime_error(cat("grouped allreduce ", k, " differs from the separate call"));
      for (std::size_t i = 0; i < it.count; ++i)
        expect_element(cat("grouped allreduce ", k), i, load(it.t, grouped[k].data(), i),
                       expected(it.t, it.op, n, i + 11), it.t, it.op);
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(CollectiveSuite, GroupEndWithoutStartAndNonBlockingInsideAreRefused) {
  auto outcomes = run_ranks(ranks(), kind(), [&](Communicator& comm) {
    expect_error<InvalidArgument>([&] { comm.group_end(); }, "group_end without group_start");
    float x = 1;
    comm.group_start();
    expect_error<InvalidArgument>([&] { comm.iallreduce(&x, &x, 1, DataType::f32, ReduceOp::sum); },
                                  "iallreduce inside a group");
    comm.allreduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    comm.group_end();
    if (x != static_cast<float>(comm.size())) throw std::runtime_error(cat("grouped allreduce gave ", x));
  });
  expect_all_ok(outcomes);
}

// ---------------------------------------------------------------------------
// Non-blocking collectives
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, NonBlockingCollectivesCompleteInIssueOrder) {
  const int n = ranks();
  const auto un = static_cast<std::size_t>(n);
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const DataType t = DataType::i32;
    const std::size_t count = 301;
    std::vector<std::int32_t> ar_in(count), ar_out(count), rs_in(un * count), rs_out(count), ag_out(un * count),
        red_out(count), a2a_in(un * count), a2a_out(un * count), bc(count);
    std::vector<std::size_t> v_counts(un);
    for (std::size_t b = 0; b < un; ++b) v_counts[b] = b % 2 == 0 ? 3 : 0;
    std::vector<std::int32_t> agv_out(std::accumulate(v_counts.begin(), v_counts.end(), std::size_t{0}));
    for (std::size_t i = 0; i < count; ++i) {
      ar_in[i] = static_cast<std::int32_t>(r + i);
      bc[i] = r == 0 ? static_cast<std::int32_t>(i * 5) : -1;
    }
    for (std::size_t i = 0; i < un * count; ++i) {
      rs_in[i] = static_cast<std::int32_t>(i + r);
      a2a_in[i] = static_cast<std::int32_t>(r * 100000 + i);
    }
    const std::int32_t mine[3] = {static_cast<std::int32_t>(r), 7, 8};
    std::vector<Request> reqs;
    reqs.push_back(comm.iallreduce(ar_in.data(), ar_out.data(), count, t, ReduceOp::sum));
    reqs.push_back(comm.ireduce_scatter(rs_in.data(), rs_out.data(), count, t, ReduceOp::sum));
    reqs.push_back(comm.iallgather(ar_in.data(), ag_out.data(), count, t));
    reqs.push_back(comm.iallgatherv(mine, agv_out.data(), v_counts, {}, t));
    reqs.push_back(comm.ireduce(ar_in.data(), red_out.data(), count, t, ReduceOp::max, n - 1));
    reqs.push_back(comm.ialltoall(a2a_in.data(), a2a_out.data(), count, t));
    reqs.push_back(comm.ibroadcast(bc.data(), bc.data(), count, t, 0));
    reqs.push_back(comm.ibarrier());
    // Waited for out of order: each wait runs everything issued before it first.
    reqs[4].wait();
    if (!reqs[1].test()) throw std::runtime_error("test() of a request that already ran is false");
    for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) it->wait();
    reqs[0].wait();  // waiting twice is fine
    const auto sum_r = static_cast<std::int32_t>(un * (un - 1) / 2);
    for (std::size_t i = 0; i < count; ++i) {
      const auto ii = static_cast<std::int32_t>(i);
      if (ar_out[i] != sum_r + n * ii) throw std::runtime_error(cat("iallreduce element ", i, " is ", ar_out[i]));
      if (rs_out[i] != n * static_cast<std::int32_t>(r * count + i) + sum_r)
        throw std::runtime_error(cat("ireduce_scatter element ", i, " is ", rs_out[i]));
      if (bc[i] != ii * 5) throw std::runtime_error(cat("ibroadcast element ", i, " is ", bc[i]));
      if (comm.rank() == n - 1 && red_out[i] != n - 1 + ii)
        throw std::runtime_error(cat("ireduce element ", i, " is ", red_out[i]));
      for (std::size_t b = 0; b < un; ++b) {
        if (ag_out[b * count + i] != static_cast<std::int32_t>(b + i))
          throw std::runtime_error(cat("iallgather block ", b, " element ", i));
        if (a2a_out[b * count + i] != static_cast<std::int32_t>(b * 100000 + r * count + i))
          throw std::runtime_error(cat("ialltoall block ", b, " element ", i));
      }
    }
    std::size_t at = 0;
    for (std::size_t b = 0; b < un; ++b)
      for (std::size_t i = 0; i < v_counts[b]; ++i, ++at)
        if (agv_out[at] != (i == 0 ? static_cast<std::int32_t>(b) : static_cast<std::int32_t>(6 + i)))
          throw std::runtime_error(cat("iallgatherv block ", b, " element ", i));

    // A request dropped without a wait still runs, in order, before the next blocking collective.
    std::int32_t dropped = 1, after = 2;
    { Request ignored = comm.iallreduce(&dropped, &dropped, 1, t, ReduceOp::sum); }
    comm.allreduce(&after, &after, 1, t, ReduceOp::sum);
    if (dropped != n || after != 2 * n) throw std::runtime_error(cat("dropped request gave ", dropped, ", then ", after));
    // An empty request is complete.
    Request empty;
    if (!empty.test() || empty.cancel()) throw std::runtime_error("an empty request is not complete");
  });
  expect_all_ok(outcomes);
}

TEST_P(CollectiveSuite, CancelledReceiveAndRequestsOutlivingTheCommunicator) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    double never = -1;
    Request q = comm.irecv(&never, 1, DataType::f64, (comm.rank() + 1) % n);  // nobody sends
    if (q.test()) throw std::runtime_error("a receive nobody sent to completed");
    if (!q.cancel() || !q.cancelled()) throw std::runtime_error("cancel of a pending receive did not withdraw it");
    q.wait();  // a withdrawn request is complete
    if (never != -1) throw std::runtime_error("a cancelled receive wrote its buffer");
    float x = 1;
    Request pending = comm.iallreduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    if (pending.cancel()) throw std::runtime_error("a collective was withdrawn");
    pending.wait();
    comm.barrier();
    // A request still held when its communicator is gone reports that, and does not crash.
    Request orphan = comm.irecv(&never, 1, DataType::f64, (comm.rank() + 1) % n);
    {
      Communicator gone = std::move(comm);
    }
    expect_error<InvalidArgument>([&] { orphan.wait(); }, "waiting for a request of a destroyed communicator");
  });
  expect_all_ok(outcomes);
}

// ---------------------------------------------------------------------------
// Mismatched calls: an error on every rank, for each kind
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, MismatchedReduceScatterAllgatherAlltoallCounts) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto count_of = [](const Communicator& c) { return std::size_t{c.rank() == 1 ? 9u : 8u}; };
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<float> s(64 * 8, 1.0f), o(64 * 8);
    comm.reduce_scatter(s.data(), o.data(), count_of(comm), DataType::f32, ReduceOp::sum);
  });
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<float> s(64 * 8, 1.0f), o(64 * 8);
    comm.allgather(s.data(), o.data(), count_of(comm), DataType::f32);
  });
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<float> s(64 * 8, 1.0f), o(64 * 8);
    comm.alltoall(s.data(), o.data(), count_of(comm), DataType::f32);
  });
}

TEST_P(CollectiveSuite, MismatchedAllgathervCountsReduceOpAndDtype) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  expect_mismatch_everywhere([&](Communicator& comm) {
    // Same total, different split: caught by the counts' hash in the signature.
    std::vector<std::size_t> counts(static_cast<std::size_t>(n), 4);
    if (comm.rank() == n - 1) {
      counts[0] = 3;
      counts[1] = 5;
    }
    std::vector<float> s(8, 1.0f), o(64);
    comm.allgatherv(s.data(), o.data(), counts, {}, DataType::f32);
  });
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<float> s(16, 1.0f), o(16);
    comm.reduce(s.data(), o.data(), 16, DataType::f32, comm.rank() == n - 1 ? ReduceOp::max : ReduceOp::sum, 0);
    comm.barrier();  // a leaf only sends: it learns of the mismatch at its next call
  });
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<std::int32_t> s(16, 1), o(16);
    comm.reduce(s.data(), o.data(), 16, comm.rank() == 1 ? DataType::u32 : DataType::i32, ReduceOp::sum, 0);
    comm.barrier();
  });
}

TEST_P(CollectiveSuite, MismatchedTransferAndGroupingAreErrorsOnEveryRank) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  // A receive of a different count than was sent: the receiver finds it, everybody fails.
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<double> v(32, 1.0);
    if (comm.rank() == 0) comm.send(v.data(), 10, DataType::f64, 1);
    if (comm.rank() == 1) comm.recv(v.data(), 12, DataType::f64, 0);
    comm.barrier();
  });
  // One rank fuses two allreduces its peers run one by one.
  expect_mismatch_everywhere([&](Communicator& comm) {
    std::vector<float> a(10, 1.0f), b(10, 1.0f);
    if (comm.rank() == 0) comm.group_start();
    comm.allreduce(a.data(), a.data(), 10, DataType::f32, ReduceOp::sum);
    comm.allreduce(b.data(), b.data(), 10, DataType::f32, ReduceOp::sum);
    if (comm.rank() == 0) comm.group_end();
    comm.barrier();
  });
}

TEST_P(CollectiveSuite, ForcedAllreduceAlgorithmsThatDisagreeAreMismatches) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto outcomes = run_ranks_configured(
      n, kind(),
      [](int rank) { return config_with(rank == 0 ? AllreduceAlgo::ring : AllreduceAlgo::recursive_doubling); },
      [](Communicator& comm) {
        std::vector<float> v(100, 1.0f);
        comm.allreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum);
      });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << "rank " << r << ": " << failure_of(outcomes, r);
}

TEST_P(CollectiveSuite, ReceiveThatNeverArrivesTimesOut) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  Config cfg = test_config();
  cfg.timeout = std::chrono::milliseconds(300);
  std::atomic<bool> rank0_done{false};
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    if (comm.rank() != 0) {
      // Stay alive (a closed peer would fail the receive instead) until rank 0 gave up.
      for (int i = 0; i < 3000 && !rank0_done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return;
    }
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(true); }
    } done{rank0_done};
    double x = 0;
    Request q = comm.irecv(&x, 1, DataType::f64, 1);
    q.wait();
  }, cfg);
  EXPECT_TRUE(failed_with<TimeoutError>(outcomes, 0)) << failure_of(outcomes, 0);
}

// ---------------------------------------------------------------------------
// Bad arguments
// ---------------------------------------------------------------------------
TEST_P(CollectiveSuite, BadArgumentsAreRejectedBeforeAnyMessage) {
  const int n = ranks();
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    const auto un = static_cast<std::size_t>(n);
    std::vector<float> buf(16 * un + 16);
    float* b = buf.data();
    auto invalid = [](auto&& f, const char* what) { expect_error<InvalidArgument>(f, what); };
    invalid([&] { comm.reduce_scatter(nullptr, b, 4, DataType::f32, ReduceOp::sum); }, "reduce_scatter null send");
    invalid([&] { comm.reduce_scatter(b, b + 1, 4, DataType::f32, ReduceOp::sum); }, "reduce_scatter partial overlap");
    invalid([&] { comm.reduce_scatter(b, b + 200, 4, DataType::f32, static_cast<ReduceOp>(9)); }, "reduce_scatter bad op");
    invalid([&] { comm.allgather(b, nullptr, 4, DataType::f32); }, "allgather null recv");
    invalid([&] { comm.allgather(b + 1, b, 4, DataType::f32); }, "allgather partial overlap");
    invalid([&] { comm.allgather(b, b + 100, 4, static_cast<DataType>(77)); }, "allgather bad dtype");
    std::vector<std::size_t> short_counts(un + 1, 1), counts(un, 2), bad_displs(un, 0);
    invalid([&] { comm.allgatherv(b, b + 100, short_counts, {}, DataType::f32); }, "allgatherv counts of the wrong length");
    if (n > 1) invalid([&] { comm.allgatherv(b, b + 100, counts, bad_displs, DataType::f32); }, "allgatherv overlapping blocks");
    invalid([&] { comm.reduce(b, b, 4, DataType::f32, ReduceOp::sum, n); }, "reduce root out of range");
    invalid([&] { comm.reduce(b, b, 4, DataType::f32, ReduceOp::sum, -1); }, "reduce negative root");
    invalid([&] { comm.alltoall(b, b + 1, 4, DataType::f32); }, "alltoall partial overlap");
    invalid([&] { comm.send(b, 4, DataType::f32, comm.rank()); }, "send to self");
    invalid([&] { comm.recv(b, 4, DataType::f32, n); }, "recv from a rank out of range");
    invalid([&] { comm.isend(nullptr, 4, DataType::f32, (comm.rank() + 1) % n); }, "isend of a null buffer");
    // The communicator is still usable: argument errors are local and send nothing.
    float x = 1;
    comm.allreduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    if (x != static_cast<float>(n)) throw std::runtime_error("allreduce after refused calls is wrong");
  });
  expect_all_ok(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectiveSuite,
                         ::testing::Combine(::testing::Values(TransportKind::inproc, TransportKind::ucx),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         [](const auto& param_info) {
                           return to_string(std::get<0>(param_info.param)) + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "ranks";
                         });

// ---------------------------------------------------------------------------
// Algorithm choice (no ranks needed)
// ---------------------------------------------------------------------------
TEST(AllreduceSelection, AutoSwitchesAtTheModelCrossoverAndForcedWins) {
  for (int n = 2; n <= 64; ++n) {
    const std::size_t limit = coll::recursive_doubling_max_bytes(n);
    ASSERT_GT(limit, 0u) << n << " ranks";
    ASSERT_LT(limit, std::size_t{1} << 20) << n << " ranks";
    const std::size_t f32_limit = limit / 4;
    EXPECT_EQ(coll::allreduce_algorithm(f32_limit, DataType::f32, n, AllreduceAlgo::automatic),
              coll::Algo::recursive_doubling) << n;
    EXPECT_EQ(coll::allreduce_algorithm(f32_limit + 1, DataType::f32, n, AllreduceAlgo::automatic), coll::Algo::ring)
        << n;
    EXPECT_EQ(coll::allreduce_algorithm(0, DataType::u8, n, AllreduceAlgo::automatic), coll::Algo::recursive_doubling);
    EXPECT_EQ(coll::allreduce_algorithm(0, DataType::u8, n, AllreduceAlgo::ring), coll::Algo::ring);
    EXPECT_EQ(coll::allreduce_algorithm(std::size_t{1} << 30, DataType::f64, n, AllreduceAlgo::recursive_doubling),
              coll::Algo::recursive_doubling);
  }
  // The table in docs/collectives.md.
  EXPECT_EQ(coll::recursive_doubling_max_bytes(2), 30000u);
  EXPECT_EQ(coll::recursive_doubling_max_bytes(3), 5000u);
  EXPECT_EQ(coll::recursive_doubling_max_bytes(4), 34285u);
  EXPECT_EQ(coll::recursive_doubling_max_bytes(5), 13043u);
  EXPECT_EQ(coll::recursive_doubling_max_bytes(8), 48888u);
}

TEST(AllreduceSelection, AnAlgoVariableNamesRecursiveDoubling) {
  auto parse = [](const char* value) {
    return Config::from_env([&](std::string_view name) -> std::optional<std::string> {
      if (name == "ANTDT_ALGO") return std::string(value);
      return std::nullopt;
    });
  };
  EXPECT_EQ(parse("recursive_doubling").allreduce_algo, AllreduceAlgo::recursive_doubling);
  EXPECT_EQ(parse("ring").allreduce_algo, AllreduceAlgo::ring);
  EXPECT_THROW(parse("halving"), ConfigError);
}

// ---------------------------------------------------------------------------
// The C API of the suite, over the public create() path (UCX, TCP bootstrap)
// ---------------------------------------------------------------------------
TEST(CollectiveSuiteCApi, EveryFunctionWorksAndReportsBadArguments) {
  ::setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
  constexpr int n = 3;
  antdtUniqueId id;
  ASSERT_EQ(antdtGetUniqueId(&id), ANTDT_OK) << antdtLastError();
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const std::string& why) {
        if (failures[static_cast<std::size_t>(r)].empty()) failures[static_cast<std::size_t>(r)] = why + ": " + antdtLastError();
      };
      antdtComm_t comm = nullptr;
      if (antdtCommInitRank(&comm, n, &id, r) != ANTDT_OK) return fail("antdtCommInitRank");
      const auto ur = static_cast<std::size_t>(r);
      std::int32_t send[n * 2], recv[n * 2];
      for (std::size_t i = 0; i < n * 2; ++i) send[i] = static_cast<std::int32_t>(ur * 10 + i);
      if (antdtReduceScatter(send, recv, 2, ANTDT_I32, ANTDT_SUM, comm) != ANTDT_OK) fail("antdtReduceScatter");
      else if (recv[0] != 30 + 3 * static_cast<std::int32_t>(2 * ur) || recv[1] != 30 + 3 * static_cast<std::int32_t>(2 * ur + 1))
        fail("antdtReduceScatter result");
      if (antdtAllGather(send, recv, 2, ANTDT_I32, comm) != ANTDT_OK) fail("antdtAllGather");
      else if (recv[2 * 2] != 20 || recv[2 * 2 + 1] != 21) fail("antdtAllGather result");
      const std::size_t counts[n] = {1, 0, 2};
      if (antdtAllGatherV(send, recv, counts, nullptr, ANTDT_I32, comm) != ANTDT_OK) fail("antdtAllGatherV");
      else if (recv[0] != 0 || recv[1] != 20 || recv[2] != 21) fail("antdtAllGatherV result");
      if (antdtReduce(send, recv, 1, ANTDT_I32, ANTDT_MAX, 2, comm) != ANTDT_OK) fail("antdtReduce");
      else if (r == 2 && recv[0] != 20) fail("antdtReduce result");
      if (antdtAlltoAll(send, recv, 2, ANTDT_I32, comm) != ANTDT_OK) fail("antdtAlltoAll");
      else if (recv[2] != static_cast<std::int32_t>(10 + 2 * ur)) fail("antdtAlltoAll result");
      std::int32_t token = r, got = -1;
      if (antdtGroupStart(comm) != ANTDT_OK) fail("antdtGroupStart");
      if (antdtSend(&token, 1, ANTDT_I32, (r + 1) % n, comm) != ANTDT_OK) fail("antdtSend");
      if (antdtRecv(&got, 1, ANTDT_I32, (r + n - 1) % n, comm) != ANTDT_OK) fail("antdtRecv");
      if (antdtGroupEnd(comm) != ANTDT_OK) fail("antdtGroupEnd");
      else if (got != (r + n - 1) % n) fail("antdtSend/antdtRecv result");
      if (antdtAllGatherV(send, recv, nullptr, nullptr, ANTDT_I32, comm) != ANTDT_ERR_INVALID_ARGUMENT ||
          std::string(antdtLastError()).empty())
        fail("antdtAllGatherV with null counts");
      if (antdtSend(send, 1, ANTDT_I32, r, comm) != ANTDT_ERR_INVALID_ARGUMENT) fail("antdtSend to self");
      if (antdtGroupEnd(comm) != ANTDT_ERR_INVALID_ARGUMENT) fail("antdtGroupEnd without start");
      if (antdtReduce(send, recv, 1, ANTDT_I32, ANTDT_SUM, 0, nullptr) != ANTDT_ERR_INVALID_ARGUMENT) fail("null comm");
      antdtCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[static_cast<std::size_t>(r)], "") << "rank " << r;
}

}  // namespace
}  // namespace antdt::test
