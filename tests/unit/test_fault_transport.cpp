// The fault-injecting transport (transport/fault): delayed and bandwidth-capped
// sends still arrive intact and in order, never before their delay, aborts and
// cancels still work, blocked waits sleep between releases, and collectives run
// unchanged over it. Ranks are threads over inproc (and UCX for ordering).
#include "collectives/api/make_communicator.hpp"
#include "transport_fixtures.hpp"

#include "collectives/communicator.hpp"
#include "core/inject.hpp"
#include "transport/fault/fault_transport.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace antdt::transport_test {
namespace {

using transport::FaultPlan;
using transport::make_fault_transport;
using transport::State;

using Wrap = std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport> inner, int rank)>;

// Like run_group, with each rank's transport wrapped by `wrap`.
// `device_copy`: as for run_group (device payloads accepted).
Outcomes run_wrapped(Kind kind, int n, const Wrap& wrap, const std::function<void(Transport&)>& body,
                     const Config& cfg = transport_config(),
                     const transport::InprocFabric::DeviceCopy& device_copy = {}) {
  if (kind == Kind::ucx) prepare_ucx_environment();
  auto fabric = std::make_shared<transport::InprocFabric>(n, device_copy);
  auto rendezvous = std::make_shared<InprocRendezvous>(n, std::chrono::milliseconds(kTestWait));
  ThreadBarrier all_done(n);
  Outcomes outcomes(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      log::set_thread_rank(r);
      try {
        std::unique_ptr<Transport> inner;
        if (kind == Kind::inproc) {
          inner = transport::make_inproc_transport(fabric, r, cfg);
        } else {
          InprocBootstrap boot(rendezvous, r);
          inner = transport::make_ucx_transport(
              boot, cfg, transport::UcxOptions{.device_payloads_in_host_memory = static_cast<bool>(device_copy)});
        }
        std::unique_ptr<Transport> t = wrap(std::move(inner), r);
        try {
          body(*t);
        } catch (...) {
          outcomes[static_cast<std::size_t>(r)] = std::current_exception();
        }
        all_done.arrive_and_wait();
      } catch (...) {
        if (!outcomes[static_cast<std::size_t>(r)]) outcomes[static_cast<std::size_t>(r)] = std::current_exception();
      }
      log::set_thread_rank(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

// Rank `slow` gets `plan`; the others get a plan that injects nothing.
Wrap plan_for(int slow, const FaultPlan& plan) {
  return [slow, plan](std::unique_ptr<Transport> inner, int rank) {
    return make_fault_transport(std::move(inner), rank == slow ? plan : FaultPlan{});
  };
}

FaultPlan delay_of(std::chrono::microseconds delay) {
  FaultPlan plan;
  plan.send_delay = delay;
  return plan;
}

// Forwards everything and counts the blocking waits that reach it, so a test
// can tell a wait that sleeps until the next release from one that polls.
class CountingTransport final : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, std::atomic<int>& waits)
      : inner_(std::move(inner)), waits_(waits) {}
  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  std::string_view name() const noexcept override { return inner_->name(); }
  void post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) override {
    inner_->post_send(peer, tag, payload, done);
  }
  void post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) override {
    inner_->post_recv(peer, tag, payload, done);
  }
  WaitResult wait(std::span<Completion* const> ops, Deadline deadline) override {
    waits_.fetch_add(1);
    return inner_->wait(ops, deadline);
  }
  void progress() override { inner_->progress(); }
  void cancel(Completion& op) override { inner_->cancel(op); }
  void abort(int status, std::string_view reason) noexcept override { inner_->abort(status, reason); }
  std::optional<transport::AbortInfo> abort_info() const override { return inner_->abort_info(); }

 private:
  std::unique_ptr<Transport> inner_;
  std::atomic<int>& waits_;
};

std::string state_text(const Completion& op) {
  switch (op.state.load()) {
    case State::pending: return "pending";
    case State::done: return "done";
    case State::failed: return "failed: " + op.error;
    case State::cancelled: return "cancelled";
  }
  return "?";
}

class FaultTransportTest : public ::testing::TestWithParam<Kind> {
 protected:
  Kind kind() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Both, FaultTransportTest, ::testing::Values(Kind::inproc, Kind::ucx),
                         [](const ::testing::TestParamInfo<Kind>& param) { return kind_name(param.param); });

// ---------------------------------------------------------------------------
// Delivery
// ---------------------------------------------------------------------------

// Both ranks delayed (and rank 0 bandwidth-capped): messages of mixed sizes on
// one tag, and on several tags, arrive intact and in their send order.
TEST_P(FaultTransportTest, DelayedMessagesArriveIntactAndInOrder) {
  constexpr int kMessages = 60;
  constexpr int kTags = 3;
  const auto size_of = [](int i) { return static_cast<std::size_t>((i * 7919) % 20000 + (i % 5 == 0 ? 0 : 1)); };
  const Wrap wrap = [](std::unique_ptr<Transport> inner, int rank) {
    FaultPlan plan = delay_of(std::chrono::microseconds(rank == 0 ? 3000 : 1000));
    if (rank == 0) plan.send_bytes_per_second = 200e6;
    return make_fault_transport(std::move(inner), plan);
  };
  auto outcomes = run_wrapped(kind(), 2, wrap, [&](Transport& t) {
    EXPECT_EQ(t.name(), kind_name(kind()) + "+fault");
    const int peer = 1 - t.rank();
    std::vector<std::vector<std::byte>> out(kMessages), in(kMessages);
    std::vector<Completion> sends(kMessages), recvs(kMessages);
    std::vector<Completion*> all;
    for (int i = 0; i < kMessages; ++i) {
      out[i] = pattern(size_of(i), 1000 * static_cast<std::uint64_t>(t.rank()) + static_cast<std::uint64_t>(i));
      in[i].assign(size_of(i) + 8, std::byte{0x5a});
      sends[i].header = header_for(static_cast<std::uint64_t>(i), out[i].size());
      all.push_back(&sends[i]);
      all.push_back(&recvs[i]);
    }
    // Receives posted in an order unrelated to the sends within a tag's stream.
    for (int i = 0; i < kMessages; ++i) t.post_send(peer, static_cast<std::uint64_t>(i % kTags), out[i], sends[i]);
    for (int tag = kTags - 1; tag >= 0; --tag) {
      for (int i = tag; i < kMessages; i += kTags) t.post_recv(peer, static_cast<std::uint64_t>(tag), in[i], recvs[i]);
    }
    ASSERT_EQ(t.wait(all, Clock::now() + kTestWait), WaitResult::done);
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_EQ(sends[i].state.load(), State::done) << state_text(sends[i]);
      ASSERT_EQ(recvs[i].state.load(), State::done) << state_text(recvs[i]);
      EXPECT_EQ(recvs[i].header.seq, static_cast<std::uint64_t>(i)) << "message " << i << " out of order";
      const auto want = pattern(size_of(i), 1000 * static_cast<std::uint64_t>(peer) + static_cast<std::uint64_t>(i));
      ASSERT_EQ(recvs[i].received_bytes, want.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), in[i].begin())) << "payload of message " << i;
    }
  });
  EXPECT_EQ(failures(outcomes), "");
}

// The delayed rank's send is held (pending, not visible to the receiver) until
// its delay has passed; the receive completes no earlier than that.
TEST_P(FaultTransportTest, ADelayedSendArrivesNoEarlierThanItsDelay) {
  constexpr auto kDelay = std::chrono::milliseconds(80);
  ThreadBarrier posted(2);
  std::atomic<Clock::rep> sent_at{0};
  auto outcomes = run_wrapped(kind(), 2, plan_for(0, delay_of(kDelay)), [&](Transport& t) {
    std::uint64_t value = 0;
    Completion op;
    if (t.rank() == 0) {
      value = 0xfeedface;
      op.header = header_for(1, sizeof value);
      sent_at = Clock::now().time_since_epoch().count();
      t.post_send(1, 9, std::as_bytes(std::span(&value, 1)), op);
      // Held, not handed on: the caller was not blocked and nothing moved yet.
      EXPECT_TRUE(op.pending());
      posted.arrive_and_wait();
      ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
      EXPECT_EQ(op.state.load(), State::done) << state_text(op);
    } else {
      t.post_recv(0, 9, std::as_writable_bytes(std::span(&value, 1)), op);
      posted.arrive_and_wait();
      ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
      const Clock::time_point arrived = Clock::now();
      ASSERT_EQ(op.state.load(), State::done) << state_text(op);
      EXPECT_EQ(value, 0xfeedfaceu);
      const Clock::time_point sent{Clock::duration(sent_at.load())};
      EXPECT_GE(arrived - sent, kDelay) << "arrived "
                                        << std::chrono::duration<double, std::milli>(arrived - sent).count()
                                        << " ms after the send was posted";
    }
  });
  EXPECT_EQ(failures(outcomes), "");
}

// Device payloads (the direct GPU path) are delayed like any send, and reach
// the inner transport still as device payloads (bare, through its device copy).
TEST_P(FaultTransportTest, ADelayedDeviceSendIsHeldThenHandedOnAsADeviceSend) {
  constexpr auto kDelay = std::chrono::milliseconds(60);
  std::atomic<int> device_copies{0};
  const auto copy = [&](void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
    ++device_copies;
  };
  auto outcomes = run_wrapped(
      kind(), 2, plan_for(0, delay_of(kDelay)),
      [&](Transport& t) {
        ASSERT_TRUE(t.device_payloads());
        std::uint64_t value = 0;
        Completion op;
        const Clock::time_point start = Clock::now();
        if (t.rank() == 0) {
          value = 0xd00dfeed;
          t.post_send_device(1, 9, std::as_bytes(std::span(&value, 1)), op);
          EXPECT_TRUE(op.pending());
          ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
          EXPECT_EQ(op.state.load(), State::done) << state_text(op);
        } else {
          t.post_recv_device(0, 9, std::as_writable_bytes(std::span(&value, 1)), op);
          ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
          ASSERT_EQ(op.state.load(), State::done) << state_text(op);
          EXPECT_EQ(value, 0xd00dfeedu);
          EXPECT_EQ(op.received_bytes, sizeof value);
          EXPECT_GE(Clock::now() - start, kDelay / 2);
        }
      },
      transport_config(), copy);
  EXPECT_EQ(failures(outcomes), "");
  if (kind() == Kind::inproc) {
    EXPECT_EQ(device_copies.load(), 1);
  }
}

// A bandwidth cap serialises a rank's sends: the last of several messages
// cannot arrive before their total size has crossed the capped link.
TEST(FaultTransport, BandwidthCapSerialisesSends) {
  constexpr int kMessages = 4;
  constexpr std::size_t kBytes = 64 << 10;
  constexpr double kBytesPerSecond = 2e6;  // 4 x 64 KiB take >= 131 ms
  FaultPlan plan;
  plan.send_bytes_per_second = kBytesPerSecond;
  ThreadBarrier posted(2);
  std::atomic<Clock::rep> first_post{0};
  auto outcomes = run_wrapped(Kind::inproc, 2, plan_for(0, plan), [&](Transport& t) {
    std::vector<std::vector<std::byte>> bufs(kMessages);
    std::vector<Completion> ops(kMessages);
    std::vector<Completion*> all;
    for (int i = 0; i < kMessages; ++i) {
      bufs[i] = t.rank() == 0 ? pattern(kBytes, static_cast<std::uint64_t>(i)) : std::vector<std::byte>(kBytes);
      ops[i].header = header_for(static_cast<std::uint64_t>(i), kBytes);
      all.push_back(&ops[i]);
    }
    if (t.rank() == 0) first_post = Clock::now().time_since_epoch().count();
    for (int i = 0; i < kMessages; ++i) {
      if (t.rank() == 0) t.post_send(1, 4, bufs[i], ops[i]);
      else t.post_recv(0, 4, bufs[i], ops[i]);
    }
    posted.arrive_and_wait();
    ASSERT_EQ(t.wait(all, Clock::now() + kTestWait), WaitResult::done);
    if (t.rank() == 1) {
      const double seconds =
          std::chrono::duration<double>(Clock::now() - Clock::time_point{Clock::duration(first_post.load())}).count();
      const double minimum = kMessages * static_cast<double>(kBytes + sizeof(transport::MessageHeader)) /
                             kBytesPerSecond;
      EXPECT_GE(seconds, minimum);
      for (int i = 0; i < kMessages; ++i) {
        EXPECT_EQ(ops[i].header.seq, static_cast<std::uint64_t>(i));
        EXPECT_EQ(bufs[i], pattern(kBytes, static_cast<std::uint64_t>(i))) << "message " << i;
      }
    }
  });
  EXPECT_EQ(failures(outcomes), "");
}

// A plan that injects nothing forwards every call: a send is handed on at once.
TEST(FaultTransport, AnEmptyPlanForwardsAtOnce) {
  auto outcomes = run_wrapped(Kind::inproc, 2, plan_for(-1, FaultPlan{}), [&](Transport& t) {
    std::uint32_t value = t.rank() == 0 ? 77u : 0u;
    Completion op;
    if (t.rank() == 0) {
      op.header = header_for(3, sizeof value);
      t.post_send(1, 1, std::as_bytes(std::span(&value, 1)), op);
    } else {
      t.post_recv(0, 1, std::as_writable_bytes(std::span(&value, 1)), op);
    }
    ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
    EXPECT_EQ(value, 77u);
  });
  EXPECT_EQ(failures(outcomes), "");
}

// ---------------------------------------------------------------------------
// Waiting, aborts, cancel, teardown
// ---------------------------------------------------------------------------

// A wait on a held send blocks in the inner transport until the release time
// and is woken once to hand it on: a handful of blocking waits, not a poll loop.
TEST(FaultTransport, AWaitSleepsUntilTheNextReleaseInsteadOfPolling) {
  constexpr auto kDelay = std::chrono::milliseconds(200);
  std::atomic<int> inner_waits{0};
  const Wrap wrap = [&](std::unique_ptr<Transport> inner, int rank) -> std::unique_ptr<Transport> {
    if (rank != 0) return inner;
    return make_fault_transport(std::make_unique<CountingTransport>(std::move(inner), inner_waits), delay_of(kDelay));
  };
  auto outcomes = run_wrapped(
      Kind::inproc, 2, wrap,
      [&](Transport& t) {
        std::uint64_t value = 5;
        Completion op;
        if (t.rank() == 0) {
          op.header = header_for(1, sizeof value);
          t.post_send(1, 2, std::as_bytes(std::span(&value, 1)), op);
          rusage before{}, after{};
          getrusage(RUSAGE_THREAD, &before);
          ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
          getrusage(RUSAGE_THREAD, &after);
          const auto cpu_us = [](const rusage& u) {
            return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
          };
          std::printf("[ fault    ] a %lld ms delayed send: %d blocking waits, %.2f ms CPU\n",
                      static_cast<long long>(kDelay.count()), inner_waits.load(),
                      (cpu_us(after) - cpu_us(before)) / 1e3);
          // One slice until the release, one after handing the send on (spurious wake-ups add a few).
          EXPECT_LE(inner_waits.load(), 5);
        } else {
          t.post_recv(0, 2, std::as_writable_bytes(std::span(&value, 1)), op);
          ASSERT_EQ(wait_for(t, {&op}), WaitResult::done);
          EXPECT_EQ(value, 5u);
        }
      },
      transport_config(ProgressMode::wake));
  EXPECT_EQ(failures(outcomes), "");
}

// An abort from the delayed rank (with a send still held) reaches every rank,
// and a held send can then be cancelled.
TEST_P(FaultTransportTest, AbortsStillPropagate) {
  constexpr int kRanks = 3;
  const int code = static_cast<int>(Status::internal);
  ThreadBarrier posted(kRanks);
  auto outcomes = run_wrapped(kind(), kRanks, plan_for(1, delay_of(std::chrono::seconds(20))), [&](Transport& t) {
    std::byte b{};
    Completion never;
    t.post_recv((t.rank() + 1) % kRanks, 21, std::span(&b, 1), never);
    std::byte out{};
    Completion held;
    if (t.rank() == 1) {
      held.header = header_for(1, 1);
      t.post_send(0, 22, std::span<const std::byte>(&out, 1), held);
    }
    posted.arrive_and_wait();
    if (t.rank() == 1) t.abort(code, "rank 1 gives up");
    EXPECT_EQ(wait_for(t, {&never}), WaitResult::aborted);
    const auto info = t.abort_info();
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->origin_rank, 1);
    EXPECT_EQ(info->status, code);
    EXPECT_EQ(info->reason, "rank 1 gives up");
    if (t.rank() == 1) {
      EXPECT_EQ(wait_for(t, {&held}, std::chrono::seconds(1)), WaitResult::aborted);
      t.cancel(held);
      EXPECT_EQ(held.state.load(), State::cancelled);
    }
    t.cancel(never);
    EXPECT_EQ(never.state.load(), State::cancelled);
  });
  EXPECT_EQ(failures(outcomes), "");
}

// A cancelled held send never reaches the peer, and the next send on the same
// tag is the one the peer receives.
TEST(FaultTransport, ACancelledHeldSendIsNeverDelivered) {
  ThreadBarrier cancelled(2);
  auto outcomes =
      run_wrapped(Kind::inproc, 2, plan_for(0, delay_of(std::chrono::milliseconds(30))), [&](Transport& t) {
        std::uint64_t first = 1, second = 2, got = 0;
        Completion a, b, r;
        if (t.rank() == 0) {
          a.header = header_for(1, sizeof first);
          b.header = header_for(2, sizeof second);
          t.post_send(1, 6, std::as_bytes(std::span(&first, 1)), a);
          t.cancel(a);
          EXPECT_EQ(a.state.load(), State::cancelled);
          cancelled.arrive_and_wait();
          t.post_send(1, 6, std::as_bytes(std::span(&second, 1)), b);
          ASSERT_EQ(wait_for(t, {&b}), WaitResult::done);
          EXPECT_EQ(b.state.load(), State::done) << state_text(b);
        } else {
          cancelled.arrive_and_wait();
          t.post_recv(0, 6, std::as_writable_bytes(std::span(&got, 1)), r);
          ASSERT_EQ(wait_for(t, {&r}), WaitResult::done);
          EXPECT_EQ(got, 2u);
          EXPECT_EQ(r.header.seq, 2u);
        }
      });
  EXPECT_EQ(failures(outcomes), "");
}

// Destroying the transport with a send still held ends that send cancelled.
TEST(FaultTransport, ClosingEndsHeldSendsCancelled) {
  auto fabric = std::make_shared<transport::InprocFabric>(2);
  auto peer = transport::make_inproc_transport(fabric, 1, transport_config());
  std::uint64_t value = 3;
  Completion op;
  {
    auto t = make_fault_transport(transport::make_inproc_transport(fabric, 0, transport_config()),
                                  delay_of(std::chrono::seconds(30)));
    op.header = header_for(1, sizeof value);
    t->post_send(1, 1, std::as_bytes(std::span(&value, 1)), op);
    EXPECT_TRUE(op.pending());
  }
  EXPECT_EQ(op.state.load(), State::cancelled);
}

TEST(FaultTransport, BadArgumentsAreInvalidArguments) {
  EXPECT_THROW(make_fault_transport(nullptr, FaultPlan{}), InvalidArgument);
  auto fabric = std::make_shared<transport::InprocFabric>(2);
  FaultPlan negative;
  negative.send_delay = std::chrono::microseconds(-1);
  EXPECT_THROW(make_fault_transport(transport::make_inproc_transport(fabric, 0, transport_config()), negative),
               InvalidArgument);
  auto t = make_fault_transport(transport::make_inproc_transport(fabric, 1, transport_config()),
                                delay_of(std::chrono::milliseconds(1)));
  std::byte b{};
  Completion op;
  // Reported at post time, not when the held send would be handed on.
  EXPECT_THROW(t->post_send(5, 1, std::span<const std::byte>(&b, 1), op), InvalidArgument);
  EXPECT_THROW(t->post_send(0, transport::kMaxTag + 1, std::span<const std::byte>(&b, 1), op), InvalidArgument);
}

// ---------------------------------------------------------------------------
// ANTDT_INJECT and collectives
// ---------------------------------------------------------------------------
TEST(FaultTransport, PlanComesFromTheInjectorOfEachRank) {
  const InjectSpec spec = parse_inject("rank=2:slow=3;rank=1:delay_us=1500;rank=*:delay_us=500");
  const Injector rank0(spec, 0, 4), rank1(spec, 1, 4), rank2(spec, 2, 4);
  EXPECT_EQ(transport::fault_plan_from(rank1).send_delay, std::chrono::microseconds(2000));
  EXPECT_EQ(transport::fault_plan_from(rank0).send_delay, std::chrono::microseconds(500));
  EXPECT_TRUE(transport::has_transport_faults(rank1));
  EXPECT_EQ(transport::fault_plan_from(rank1).send_bytes_per_second, 0);
  // Bandwidth caps: the lowest of the clauses naming the rank wins.
  const InjectSpec capped = parse_inject("rank=*:bw_mbps=100;rank=3:bw_mbps=2.5;rank=3:bw_mbps=40");
  EXPECT_EQ(transport::fault_plan_from(Injector(capped, 3, 4)).send_bytes_per_second, 2.5e6);
  EXPECT_EQ(transport::fault_plan_from(Injector(capped, 0, 4)).send_bytes_per_second, 100e6);
  EXPECT_TRUE(transport::has_transport_faults(Injector(capped, 0, 4)));
  EXPECT_THROW(parse_inject("rank=1:bw_mbps=0"), ConfigError);
  EXPECT_THROW(parse_inject("rank=1:bw_mbps=-3"), ConfigError);
  EXPECT_THROW(parse_inject("rank=1:bw_mbps=5,bw_mbps=6"), ConfigError);
  const Injector compute_only(parse_inject("rank=2:slow=3"), 2, 4);
  EXPECT_FALSE(transport::has_transport_faults(compute_only));
  EXPECT_FALSE(transport::has_transport_faults(Injector()));
}

// An allreduce over four ranks, one of them with delayed sends, gives the
// exact sum on every rank, several times in a row.
TEST(FaultTransport, CollectivesRunUnchangedOverIt) {
  constexpr int kRanks = 4;
  constexpr std::size_t kCount = 10000;
  const InjectSpec spec = parse_inject("rank=2:delay_us=2000");
  auto fabric = std::make_shared<transport::InprocFabric>(kRanks);
  Config cfg = transport_config();
  cfg.chunk_bytes = 4096;
  Outcomes outcomes(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto t = make_fault_transport(transport::make_inproc_transport(fabric, r, cfg), Injector(spec, r, kRanks));
        Communicator comm = detail::make_communicator(std::move(t), 9, cfg);
        for (int round = 0; round < 3; ++round) {
          std::vector<std::int64_t> data(kCount);
          for (std::size_t i = 0; i < kCount; ++i) data[i] = static_cast<std::int64_t>(i) * (r + 1) + round;
          comm.allreduce(std::span(data), ReduceOp::sum);
          for (std::size_t i = 0; i < kCount; ++i) {
            const std::int64_t want = static_cast<std::int64_t>(i) * (kRanks * (kRanks + 1) / 2) + kRanks * round;
            if (data[i] != want) throw std::runtime_error("element " + std::to_string(i) + " is wrong");
          }
        }
      } catch (...) {
        outcomes[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures(outcomes), "");
}

}  // namespace
}  // namespace antdt::transport_test
