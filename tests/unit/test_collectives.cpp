// Collectives with ranks as threads, over every transport: results against an
// independent reference for every dtype x op, counts from 0, odd counts,
// in place and out of place, 1..5 ranks; mismatched calls, timeouts and aborts.
#include "comm_fixture.hpp"
#include "reference.hpp"

#include "core/dtype.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>

namespace antdt::test {
namespace {

using Param = std::tuple<TransportKind, int>;

class Collectives : public ::testing::TestWithParam<Param> {
 protected:
  TransportKind kind() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
};

TEST_P(Collectives, AllreduceEveryDtypeOpCountAndPlacement) {
  const int n = ranks();
  const std::size_t counts[] = {0, 1, 7, 1003, 5000};
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    for (DataType t : kAllTypes) {
      const std::size_t es = dtype_size(t);
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : counts) {
          for (bool in_place : {false, true}) {
            std::vector<std::byte> send(count * es + 1), recv(count * es + 1, std::byte{0x5a});
            for (std::size_t i = 0; i < count; ++i) store(t, send.data(), i, input(t, op, comm.rank(), i));
            if (in_place) recv = send;
            comm.allreduce(in_place ? recv.data() : send.data(), recv.data(), count, t, op);
            for (std::size_t i = 0; i < count; ++i) {
              double got = load(t, recv.data(), i), want = expected(t, op, n, i);
              if (!close_enough(t, op, got, want))
                throw std::runtime_error(cat("allreduce ", dtype_name(t), " ", op_name(op), " count ", count,
                                             in_place ? " in place" : " out of place", ": element ", i, " is ", got,
                                             ", expected ", want));
            }
            // The byte after the buffer is never written.
            if (!in_place && recv[count * es] != std::byte{0x5a})
              throw std::runtime_error(cat("allreduce wrote past the end of recv, count ", count));
          }
        }
      }
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(Collectives, BroadcastFromEveryRootSmallAndPipelined) {
  const int n = ranks();
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    for (int root = 0; root < n; ++root) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1003}, std::size_t{40000}}) {
        for (bool in_place : {false, true}) {
          std::vector<std::int32_t> send(count), recv(count, -1);
          for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<std::int32_t>(i * 31 + static_cast<std::size_t>(root));
          if (in_place && comm.rank() == root) recv = send;
          comm.broadcast(in_place ? recv.data() : send.data(), recv.data(), count, DataType::i32, root);
          for (std::size_t i = 0; i < count; ++i)
            if (recv[i] != static_cast<std::int32_t>(i * 31 + static_cast<std::size_t>(root)))
              throw std::runtime_error(cat("broadcast root ", root, " count ", count, ": element ", i, " is ", recv[i]));
        }
      }
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(Collectives, BarrierLetsNobodyLeaveEarly) {
  const int n = ranks();
  std::atomic<int> arrived[20] = {};
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    for (int round = 0; round < 20; ++round) {
      if ((round + comm.rank()) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived[round].fetch_add(1);
      comm.barrier();
      if (arrived[round].load() != n)
        throw std::runtime_error(cat("left barrier ", round, " when only ", arrived[round].load(), " of ", n,
                                     " ranks had arrived"));
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(Collectives, MismatchedCountIsAnErrorOnEveryRank) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    std::vector<float> buf(2000, 1.0f);
    std::size_t count = comm.rank() == 1 ? 1500 : 1000;
    comm.allreduce(buf.data(), buf.data(), count, DataType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << "rank " << r << ": " << failure_of(outcomes, r);
}

TEST_P(Collectives, MismatchedDtypeOrOpIsAnErrorOnEveryRank) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  for (bool vary_op : {false, true}) {
    auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
      std::vector<std::int32_t> buf(100, 1);
      bool odd = comm.rank() == n - 1;
      DataType t = (!vary_op && odd) ? DataType::u32 : DataType::i32;
      ReduceOp op = (vary_op && odd) ? ReduceOp::max : ReduceOp::sum;
      comm.allreduce(buf.data(), buf.data(), buf.size(), t, op);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(failed_with<MismatchError>(outcomes, r))
          << (vary_op ? "op" : "dtype") << " rank " << r << ": " << failure_of(outcomes, r);
  }
}

TEST_P(Collectives, MissingRankTimesOutAndPoisonsTheCommunicator) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer that does not call";
  Config cfg = test_config();
  cfg.timeout = std::chrono::milliseconds(400);
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    if (comm.rank() == n - 1) {
      // Arrive long after everybody gave up: the call must fail, not hang.
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
    }
    try {
      comm.allreduce(buf.data(), buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
    } catch (const Error&) {
      // Later calls fail at once with the same cause.
      try {
        comm.barrier();
      } catch (const Error&) {
        throw;
      }
      throw std::runtime_error("barrier after a failed collective succeeded");
    }
  }, cfg);
  for (int r = 0; r < n; ++r) {
    std::string why = failure_of(outcomes, r);
    EXPECT_FALSE(why.empty()) << "rank " << r << " succeeded";
    EXPECT_EQ(why.find("succeeded"), std::string::npos) << why;
  }
  // Somebody timed out; the others learnt it from that rank's abort or their own timeout.
  bool any_timeout = false;
  for (int r = 0; r < n; ++r) any_timeout |= failed_with<TimeoutError>(outcomes, r) || failure_of(outcomes, r).find("timed out") != std::string::npos;
  EXPECT_TRUE(any_timeout);
}

TEST_P(Collectives, AbortFromAnotherThreadWakesEveryRank) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a blocked peer";
  auto outcomes = run_ranks(n, kind(), [&](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    if (comm.rank() == 0) {
      std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        comm.abort("test abort");
      });
      killer.join();
      comm.allreduce(buf.data(), buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      comm.allreduce(buf.data(), buf.data(), buf.size(), DataType::f32, ReduceOp::sum);
    } catch (const RemoteAbortError& e) {
      if (std::string(e.what()).find("test abort") == std::string::npos)
        throw std::runtime_error(cat("abort reason missing: ", e.what()));
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10))
        throw std::runtime_error("abort took longer than 10 s to arrive");
      return;
    }
    throw std::runtime_error("allreduce succeeded although rank 0 aborted");
  });
  EXPECT_TRUE(failed_with<AbortedError>(outcomes, 0)) << failure_of(outcomes, 0);
  for (int r = 1; r < n; ++r) EXPECT_EQ(failure_of(outcomes, r), "") << "rank " << r;
}

TEST_P(Collectives, BadArgumentsAreRejectedBeforeAnyMessage) {
  auto outcomes = run_ranks(ranks(), kind(), [&](Communicator& comm) {
    std::vector<float> buf(16);
    auto expect_invalid = [](auto&& f, const char* what) {
      try {
        f();
      } catch (const InvalidArgument&) {
        return;
      }
      throw std::runtime_error(cat(what, " was accepted"));
    };
    expect_invalid([&] { comm.allreduce(nullptr, buf.data(), 4, DataType::f32, ReduceOp::sum); }, "null send");
    expect_invalid([&] { comm.allreduce(buf.data(), nullptr, 4, DataType::f32, ReduceOp::sum); }, "null recv");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data(), 4, static_cast<DataType>(77), ReduceOp::sum); }, "bad dtype");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data(), 4, DataType::f32, static_cast<ReduceOp>(9)); }, "bad op");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data() + 1, 4, DataType::f32, ReduceOp::sum); }, "partial overlap");
    expect_invalid([&] { comm.broadcast(buf.data(), buf.data(), 4, DataType::f32, comm.size()); }, "root out of range");
    // The communicator is still usable: argument errors are local and send nothing.
    comm.allreduce(buf.data(), buf.data(), 4, DataType::f32, ReduceOp::sum);
  });
  expect_all_ok(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Transports, Collectives,
                         ::testing::Combine(::testing::Values(TransportKind::inproc, TransportKind::ucx),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         [](const auto& param_info) {
                           return to_string(std::get<0>(param_info.param)) + "_" + std::to_string(std::get<1>(param_info.param)) +
                                  "ranks";
                         });

}  // namespace
}  // namespace antdt::test
