// Background progress of non-blocking collectives (ANTDT_ASYNC_PROGRESS,
// docs/collectives.md#requests), ranks as threads, over both transports and
// both modes: a queued collective completes with nothing but test() on the
// issuing rank; many mixed requests run in issue order with the right results;
// blocking collectives, transfers and destruction after i-calls; a failed or
// too slow peer makes wait() throw instead of hanging.
#include "comm_fixture.hpp"

#include "core/config.hpp"
#include "core/error.hpp"
#include "transport/fault/fault_transport.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace antdt::test {
namespace {


// Polls test() only, sleeping between polls, until the request reports
// completion or the bound passes (then the test fails: nothing hangs).
bool completes_by_polling(Request& request, std::chrono::seconds bound = std::chrono::seconds(30)) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < until) {
    if (request.test()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void expect_equal(const std::string& what, std::size_t i, double got, double want) {
  if (got != want) throw std::runtime_error(cat(what, ": element ", i, " is ", got, ", expected ", want));
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const E&) {
    return;
  } catch (const std::exception& e) {
    throw std::runtime_error(cat(what, " threw the wrong error: ", e.what()));
  }
  throw std::runtime_error(what + " did not throw");
}

using Param = std::tuple<TransportKind, bool /*progress thread*/, int /*ranks*/>;

class Progress : public ::testing::TestWithParam<Param> {
 protected:
  TransportKind kind() const { return std::get<0>(GetParam()); }
  bool threaded() const { return std::get<1>(GetParam()); }
  int ranks() const { return std::get<2>(GetParam()); }
  Config config() const {
    Config cfg = test_config();
    cfg.progress_thread = threaded();
    return cfg;
  }
  Outcomes run(const std::function<void(Communicator&)>& fn) const { return run_ranks(ranks(), kind(), fn, config()); }
};

TEST_P(Progress, QueuedAllreduceCompletesWhileTheCallerOnlyPolls) {
  const int n = ranks();
  auto outcomes = run([&](Communicator& comm) {
    const std::size_t count = 70000;  // 560 KB: the shared-memory bulk area, two blocks
    std::vector<std::int64_t> in(count), out(count, -1);
    for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<std::int64_t>(i) * (comm.rank() + 1);
    Request req = comm.iallreduce(in.data(), out.data(), count, DataType::i64, ReduceOp::sum);
    // With the progress thread nothing but test() runs on this rank: it completes in the background.
    if (!completes_by_polling(req)) throw std::runtime_error("iallreduce did not complete while polled");
    const std::int64_t factor = static_cast<std::int64_t>(n) * (n + 1) / 2;
    for (std::size_t i = 0; i < count; ++i)
      expect_equal("iallreduce", i, static_cast<double>(out[i]), static_cast<double>(static_cast<std::int64_t>(i) * factor));
    req.wait();  // after test() said done, wait() returns the same outcome
  });
  expect_all_ok(outcomes);
}

TEST_P(Progress, ManyMixedRequestsRunInIssueOrderWithTheRightResults) {
  const int n = ranks();
  const auto un = static_cast<std::size_t>(n);
  auto outcomes = run([&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const int right = (comm.rank() + 1) % n, left = (comm.rank() + n - 1) % n;
    const std::size_t count = 513;
    constexpr int kRounds = 6;
    // Each round's collectives read what the previous one wrote (in place), so
    // any reordering changes the numbers.
    std::vector<double> chain(count);
    for (std::size_t i = 0; i < count; ++i) chain[i] = static_cast<double>(r + i % 7);
    std::vector<std::vector<double>> gathered(kRounds, std::vector<double>(un * count));
    std::vector<std::vector<double>> scattered(kRounds, std::vector<double>(count));
    std::vector<std::vector<double>> exchanged(kRounds, std::vector<double>(un * count));
    std::vector<std::vector<double>> received(kRounds, std::vector<double>(count, -1));
    std::vector<std::vector<double>> sent(kRounds, std::vector<double>(count));
    std::vector<double> a2a_in(un * count);
    for (std::size_t i = 0; i < un * count; ++i) a2a_in[i] = static_cast<double>(r * 1000 + i);
    std::vector<Request> reqs;
    for (int round = 0; round < kRounds; ++round) {
      const auto ur = static_cast<std::size_t>(round);
      reqs.push_back(comm.iallreduce(chain.data(), chain.data(), count, DataType::f64, ReduceOp::sum));
      reqs.push_back(comm.iallgather(chain.data(), gathered[ur].data(), count, DataType::f64));
      reqs.push_back(comm.ibroadcast(chain.data(), chain.data(), count, DataType::f64, round % n));
      reqs.push_back(comm.ireduce_scatter(gathered[ur].data(), scattered[ur].data(), count, DataType::f64,
                                          ReduceOp::max));
      reqs.push_back(comm.ialltoall(a2a_in.data(), exchanged[ur].data(), count, DataType::f64));
      if (n > 1) {
        for (std::size_t i = 0; i < count; ++i) sent[ur][i] = static_cast<double>(r * 100 + ur * 10 + i);
        reqs.push_back(comm.irecv(received[ur].data(), count, DataType::f64, left));
        reqs.push_back(comm.isend(sent[ur].data(), count, DataType::f64, right));
      }
      reqs.push_back(comm.ibarrier());
    }
    // Waited for from the last: each request's outcome is its own.
    for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) it->wait();

    // Reference: the same chain computed locally from every rank's start values.
    std::vector<double> want(count);
    for (std::size_t i = 0; i < count; ++i) {
      double v = 0;
      for (std::size_t b = 0; b < un; ++b) v += static_cast<double>(b + i % 7);
      want[i] = v;
    }
    for (int round = 0; round < kRounds; ++round) {
      const auto ur = static_cast<std::size_t>(round);
      if (round > 0)
        for (std::size_t i = 0; i < count; ++i) want[i] *= static_cast<double>(n);  // allreduce of equal values
      for (std::size_t b = 0; b < un; ++b)
        for (std::size_t i = 0; i < count; ++i)
          expect_equal(cat("round ", round, " iallgather block ", b), i, gathered[ur][b * count + i], want[i]);
      for (std::size_t i = 0; i < count; ++i) {
        expect_equal(cat("round ", round, " ireduce_scatter"), i, scattered[ur][i], want[i]);
        if (n > 1)
          expect_equal(cat("round ", round, " irecv"), i, received[ur][i],
                       static_cast<double>(static_cast<std::size_t>(left) * 100 + ur * 10 + i));
      }
      for (std::size_t b = 0; b < un; ++b)
        for (std::size_t i = 0; i < count; ++i)
          expect_equal(cat("round ", round, " ialltoall block ", b), i, exchanged[ur][b * count + i],
                       static_cast<double>(b * 1000 + r * count + i));
    }
    for (std::size_t i = 0; i < count; ++i) expect_equal("chain after the last round", i, chain[i], want[i]);
  });
  expect_all_ok(outcomes);
}

TEST_P(Progress, BlockingCollectiveAndGroupAfterNonBlockingOnesSeeTheirResults) {
  const int n = ranks();
  auto outcomes = run([&](Communicator& comm) {
    std::vector<std::int32_t> x(1000, comm.rank() + 1);
    std::vector<Request> reqs;
    for (int i = 0; i < 3; ++i) reqs.push_back(comm.iallreduce(x.data(), x.data(), x.size(), DataType::i32, ReduceOp::sum));
    // Not waited for: the blocking call runs after them, on the values they left.
    comm.allreduce(x.data(), x.data(), x.size(), DataType::i32, ReduceOp::max);
    std::int64_t want = static_cast<std::int64_t>(n) * (n + 1) / 2;
    for (int i = 0; i < 2; ++i) want *= n;
    for (std::size_t i = 0; i < x.size(); ++i) expect_equal("allreduce after iallreduces", i, x[i], static_cast<double>(want));
    for (auto& req : reqs)
      if (!req.test()) throw std::runtime_error("a request issued before a blocking collective is not complete after it");
    // The same for group_end and a barrier.
    std::int32_t y = comm.rank();
    Request later = comm.iallreduce(&y, &y, 1, DataType::i32, ReduceOp::sum);
    std::int32_t z = -1;  // y is not read here: the progress thread may be writing it
    comm.group_start();
    comm.allreduce(&y, &z, 1, DataType::i32, ReduceOp::sum);
    comm.group_end();
    expect_equal("group after iallreduce", 0, z, static_cast<double>(n) * n * (n - 1) / 2);
    later.wait();
    comm.barrier();
  });
  expect_all_ok(outcomes);
}

TEST_P(Progress, TransfersAreServedWhileABackgroundCollectiveWaits) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  auto outcomes = run([&](Communicator& comm) {
    // Rank 0 issues the allreduce first, then sends; rank 1 receives (blocking)
    // before it joins the allreduce. The send must get through while rank 0's
    // allreduce waits for rank 1.
    std::vector<float> data(5000, 1.0f), msg(3000, -1.0f);
    if (comm.rank() == 0) {
      Request ar = comm.iallreduce(data.data(), data.data(), data.size(), DataType::f32, ReduceOp::sum);
      for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<float>(i);
      Request s = comm.isend(msg.data(), msg.size(), DataType::f32, 1);
      s.wait();
      ar.wait();
    } else {
      if (comm.rank() == 1) {
        comm.recv(msg.data(), msg.size(), DataType::f32, 0);
        for (std::size_t i = 0; i < msg.size(); ++i) expect_equal("received", i, msg[i], static_cast<double>(i));
      }
      Request ar = comm.iallreduce(data.data(), data.data(), data.size(), DataType::f32, ReduceOp::sum);
      ar.wait();
    }
    for (std::size_t i = 0; i < data.size(); ++i) expect_equal("iallreduce", i, data[i], static_cast<double>(n));
  });
  expect_all_ok(outcomes);
}

TEST_P(Progress, DestructionWithOutstandingRequests) {
  const int n = ranks();
  auto outcomes = run([&](Communicator& comm) {
    std::vector<std::int32_t> x(2000, 1);
    Request a = comm.iallreduce(x.data(), x.data(), x.size(), DataType::i32, ReduceOp::sum);
    Request b = comm.ibarrier();
    { Communicator gone = std::move(comm); }
    if (threaded()) {
      // Everything issued ran before the communicator went.
      a.wait();
      b.wait();
      for (std::size_t i = 0; i < x.size(); ++i) expect_equal("iallreduce before destruction", i, x[i], n);
    } else {
      // Caller mode: queued collectives never ran; the requests say why.
      expect_error<InvalidArgument>([&] { a.wait(); }, "waiting for a request of a destroyed communicator");
      expect_error<InvalidArgument>([&] { b.wait(); }, "waiting for a request of a destroyed communicator");
    }
  });
  expect_all_ok(outcomes);
}

TEST_P(Progress, AbortedPeerMakesWaitThrowAndFailsTheCommunicator) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  auto outcomes = run([&](Communicator& comm) {
    float x = 1;
    if (comm.rank() == n - 1) {
      comm.abort("test: this rank gives up");
      return;
    }
    Request req = comm.iallreduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    Request after = comm.ibarrier();
    expect_error<Error>([&] { req.wait(); }, "wait() for an allreduce whose peer aborted");
    expect_error<Error>([&] { after.wait(); }, "wait() for a collective issued after the failed one");
    expect_error<Error>([&] { comm.allreduce(&x, &x, 1, DataType::f32, ReduceOp::sum); },
                        "a blocking collective after the failure");
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failure_of(outcomes, r), "") << "rank " << r;
}

TEST_P(Progress, PeerSlowerThanTheTimeoutMakesWaitThrow) {
  const int n = ranks();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  Config cfg = config();
  cfg.timeout = std::chrono::milliseconds(300);
  transport::FaultPlan slow;
  slow.send_delay = std::chrono::milliseconds(1500);
  auto outcomes = run_ranks(
      n, kind(),
      [&](Communicator& comm) {
        std::vector<float> x(100, 1.0f);
        Request req = comm.iallreduce(x.data(), x.data(), x.size(), DataType::f32, ReduceOp::sum);
        if (comm.rank() == 0) {
          // Rank 0 times out, or learns first that a rank between it and the slow one did.
          try {
            req.wait();
            throw std::runtime_error("wait() for an allreduce with a peer slower than the timeout returned");
          } catch (const Error& e) {
            if (std::string(e.what()).find("timed out") == std::string::npos)
              throw std::runtime_error(cat("wait() failed for another reason than the timeout: ", e.what()));
          }
          expect_error<Error>([&] { req.wait(); }, "a second wait()");
        } else {
          try {
            req.wait();
          } catch (const Error&) {
          }
        }
      },
      cfg,
      [&](std::unique_ptr<transport::Transport> inner, int rank) {
        return transport::make_fault_transport(std::move(inner), rank == n - 1 ? slow : transport::FaultPlan{});
      });
  EXPECT_EQ(failure_of(outcomes, 0), "");
}

INSTANTIATE_TEST_SUITE_P(Modes, Progress,
                         ::testing::Combine(::testing::Values(TransportKind::inproc, TransportKind::ucx),
                                            ::testing::Values(true, false), ::testing::Values(1, 2, 4)),
                         [](const auto& param_info) {
                           return to_string(std::get<0>(param_info.param)) + "_" +
                                  (std::get<1>(param_info.param) ? "thread" : "caller") + "_" +
                                  std::to_string(std::get<2>(param_info.param)) + "ranks";
                         });

TEST(ProgressConfig, AsyncProgressVariableIsParsedAndValidated) {
  auto with = [](std::optional<std::string> value) {
    return Config::from_env([value](std::string_view name) -> std::optional<std::string> {
      if (name == "ANTDT_ASYNC_PROGRESS") return value;
      return std::nullopt;
    });
  };
  EXPECT_TRUE(with(std::nullopt).progress_thread);
  EXPECT_TRUE(with("thread").progress_thread);
  EXPECT_FALSE(with("caller").progress_thread);
  EXPECT_FALSE(with("CALLER").progress_thread);
  try {
    with("background");
    FAIL() << "ANTDT_ASYNC_PROGRESS=background was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ANTDT_ASYNC_PROGRESS"), std::string::npos) << what;
    EXPECT_NE(what.find("caller"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace antdt::test
