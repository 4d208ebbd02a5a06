// The partial collectives' arbiter outside the ranks (docs/partial.md#where-the-arbiter-runs):
// the link's hello (collectives/partial/arbiter_link.hpp), the host that groups links and runs
// the arbiters (arbiter_host.hpp), and partial steps through an antdt-coordinator service.
#include "collectives/partial/arbiter_host.hpp"
#include "collectives/partial/arbiter_link.hpp"
#include "collectives/partial/partial_protocol.hpp"
#include "comm_fixture.hpp"
#include "core/control.hpp"
#include "scheduler/coordinator/service.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace antdt {
namespace {

namespace p = coll::partial;
using namespace test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

const std::vector<std::byte> kSecret = bytes_of("0123456789abcdef");
const std::vector<std::byte> kChallenge = bytes_of("a challenge frame, as the coordinator sent it");

p::ArbiterHello hello_for(int rank, int size = 4) {
  p::ArbiterConfig cfg;
  cfg.ranks = size;
  cfg.result_cache = 8;
  cfg.quorum = 0.75;
  cfg.grace_s = 0.002;
  cfg.warmup_steps = 1;
  auto h = p::make_arbiter_hello(p::group_key_of(bytes_of("the communicator's unique id")), rank, size, cfg);
  h.mac = p::prove_arbiter_hello(kSecret, kChallenge, h);
  return h;
}

TEST(ArbiterLink, HelloRoundTripsWithTheRanksSettings) {
  const auto h = hello_for(2);
  const auto back = p::decode_arbiter_hello(p::encode(h));
  EXPECT_EQ(back.key, h.key);
  EXPECT_EQ(back.rank, 2u);
  EXPECT_EQ(back.size, 4u);
  EXPECT_NE(back.who.find("pid "), std::string::npos) << back.who;
  EXPECT_EQ(back.mac, h.mac);
  const auto cfg = back.config();
  EXPECT_EQ(cfg.ranks, 4);
  EXPECT_EQ(cfg.result_cache, 8u);
  EXPECT_EQ(cfg.quorum, 0.75);
  EXPECT_EQ(cfg.grace_s, 0.002);
  EXPECT_EQ(cfg.warmup_steps, 1);
  EXPECT_TRUE(p::is_arbiter_hello(p::encode(h)));
  const auto refusal = p::decode_arbiter_answer(p::encode(p::ArbiterAnswer{false, "a reason"}));
  EXPECT_FALSE(refusal.accepted);
  EXPECT_EQ(refusal.reason, "a reason");
  EXPECT_TRUE(p::decode_arbiter_answer(p::encode(p::ArbiterAnswer{true, {}})).accepted);
}

TEST(ArbiterLink, KeysDifferPerUniqueId) {
  EXPECT_EQ(p::group_key_of(bytes_of("id one")), p::group_key_of(bytes_of("id one")));
  EXPECT_NE(p::group_key_of(bytes_of("id one")), p::group_key_of(bytes_of("id two")));
}

TEST(ArbiterLink, GarbageHellosAreRefusedByName) {
  const auto good = p::encode(hello_for(1));
  for (std::size_t cut = 0; cut < good.size(); ++cut)
    EXPECT_THROW(p::decode_arbiter_hello(std::span(good).first(cut)), BootstrapError) << "cut at " << cut;
  auto trailing = good;
  trailing.push_back(std::byte{0});
  EXPECT_THROW(p::decode_arbiter_hello(trailing), BootstrapError);

  auto refused = [](p::ArbiterHello h, const std::string& what) {
    try {
      p::decode_arbiter_hello(p::encode(h));
      ADD_FAILURE() << "accepted a hello with bad " << what;
    } catch (const BootstrapError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto h = hello_for(1);
  h.rank = 4;
  refused(h, "rank 4 is out of range");
  h = hello_for(1);
  h.size = 0;
  refused(h, "size");
  h = hello_for(1);
  h.quorum = std::numeric_limits<double>::quiet_NaN();
  refused(h, "quorum");
  h = hello_for(1);
  h.result_cache = 1;
  refused(h, "result cache");
  h = hello_for(1);
  h.monitor_window = std::uint64_t{1} << 40;  // would allocate per rank
  refused(h, "monitor window");
}

TEST(ArbiterLink, TheMacBindsSecretChallengeAndFields) {
  const auto h = hello_for(3);
  EXPECT_TRUE(p::verify_arbiter_hello(kSecret, kChallenge, h));
  EXPECT_FALSE(p::verify_arbiter_hello(bytes_of("another secret!!"), kChallenge, h));
  EXPECT_FALSE(p::verify_arbiter_hello(kSecret, bytes_of("an older challenge"), h));
  auto moved = h;
  moved.rank = 1;  // a proof for rank 3 does not make rank 1
  EXPECT_FALSE(p::verify_arbiter_hello(kSecret, kChallenge, moved));
}

// ---------------------------------------------------------------------------
// ArbiterHost on socketpairs
// ---------------------------------------------------------------------------
struct RankEnd {
  control::Link link;
  p::ArbiterAnswer answer() {
    auto frame = link.receive(Clock::now() + 5s);
    if (!frame) throw std::runtime_error("no answer from the host");
    return p::decode_arbiter_answer(*frame);
  }
};

RankEnd join(p::ArbiterHost& host, const p::ArbiterHello& h) {
  auto [host_end, rank_end] = control::socket_pair();
  host.adopt(h, std::move(host_end));
  return RankEnd{control::Link(std::move(rank_end))};
}

TEST(ArbiterHost, StartsTheArbiterOnceEveryRankJoinedAndItDecides) {
  p::ArbiterHost host(10s, 5s);
  std::vector<RankEnd> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(join(host, hello_for(r)));
    EXPECT_TRUE(ranks.back().answer().accepted);
    EXPECT_EQ(host.running(), r == 3 ? 1u : 0u) << "after rank " << r;
    EXPECT_EQ(host.forming(), r == 3 ? 0u : 1u) << "after rank " << r;
  }
  // The hosted arbiter closes step 1 (BSP: warm-up) once all four arrived.
  for (int r = 0; r < 4; ++r) {
    p::Arrival a;
    a.rank = r;
    a.step = 1;
    a.weight = 1;
    a.signature = 99;
    a.policy = LatePolicy::defer;
    ranks[static_cast<std::size_t>(r)].link.send(p::encode(a), Clock::now() + 5s);
  }
  for (int r = 0; r < 4; ++r) {
    auto frame = ranks[static_cast<std::size_t>(r)].link.receive(Clock::now() + 5s);
    ASSERT_TRUE(frame) << "rank " << r << " got no decision";
    const auto message = p::decode_from_arbiter(*frame, 4);
    const auto* d = std::get_if<p::Decision>(&message);
    ASSERT_NE(d, nullptr) << "rank " << r;
    EXPECT_EQ(d->step, 1u);
    EXPECT_EQ(d->contributors.size(), 4u);
  }
  // Every rank leaves: the arbiter ends and tidy() lets it go.
  ranks.clear();
  const auto until = Clock::now() + 5s;
  while (host.running() > 0 && Clock::now() < until) {
    host.tidy(Clock::now());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(host.running(), 0u);
}

TEST(ArbiterHost, RefusesASecondLinkOfARankAndOtherSettings) {
  p::ArbiterHost host(10s, 5s);
  auto first = join(host, hello_for(0));
  EXPECT_TRUE(first.answer().accepted);
  auto again = join(host, hello_for(0));
  const auto twice = again.answer();
  EXPECT_FALSE(twice.accepted);
  EXPECT_NE(twice.reason.find("connected already"), std::string::npos) << twice.reason;
  auto other = hello_for(1);
  other.quorum = 0.5;
  auto differing = join(host, other);
  const auto answer = differing.answer();
  EXPECT_FALSE(answer.accepted);
  EXPECT_NE(answer.reason.find("differ"), std::string::npos) << answer.reason;
  EXPECT_EQ(host.forming(), 1u);
}

TEST(ArbiterHost, AGroupThatDoesNotFormInTimeClosesItsLinks) {
  p::ArbiterHost host(50ms, 5s);
  auto lone = join(host, hello_for(2));
  EXPECT_TRUE(lone.answer().accepted);
  std::this_thread::sleep_for(60ms);
  host.tidy(Clock::now());
  EXPECT_EQ(host.forming(), 0u);
  EXPECT_THROW(lone.link.receive(Clock::now() + 5s), TransportError);  // closed: the rank's call fails
}

// ---------------------------------------------------------------------------
// Partial steps with the arbiter in an antdt-coordinator service
// ---------------------------------------------------------------------------
class ExternalArbiter : public ::testing::TestWithParam<TransportKind> {};

std::string secret_hex() { return "00112233445566778899aabbccddeeff"; }

Config external_config(const sched::coord::CoordinatorService& service) {
  Config cfg = test_config();
  cfg.partial_warmup = 2;
  cfg.partial_grace_ms = 2;
  cfg.result_cache = 8;
  cfg.coordinator = service.address().to_string();
  cfg.secret = secret_hex();
  return cfg;
}

std::unique_ptr<sched::coord::CoordinatorService> start_service(int world) {
  sched::coord::CoordinatorOptions options;
  options.world_size = world;
  Config cfg;
  cfg.secret = secret_hex();
  return std::make_unique<sched::coord::CoordinatorService>(options, net::Endpoint{"127.0.0.1", 0},
                                                            cfg.secret_bytes("the test"), 5s);
}

TEST_P(ExternalArbiter, PartialStepsRunWithTheArbiterInTheCoordinator) {
  const int n = 4;
  const std::size_t count = 1000;
  auto service = start_service(n);
  RankSetup setup{.cfg = external_config(*service)};
  setup.unique_id = bytes_of("unique id of this test's communicator");
  ASSERT_TRUE(setup.cfg.external_arbiter());
  std::vector<std::vector<float>> last(n);
  auto outcomes = run_ranks(n, GetParam(), setup, [&](Communicator& comm) {
    std::vector<float> grad(count, static_cast<float>(comm.rank() + 1)), out(count);
    for (int step = 1; step <= 8; ++step) {
      auto r = comm.partial_allreduce(grad.data(), out.data(), count, DataType::f32, ReduceOp::sum,
                                      PartialOptions{LatePolicy::wait, 1.0, 1, 0});
      if (r.step != static_cast<std::uint64_t>(step) || r.participants != n)
        throw std::runtime_error(cat("step ", step, ": got step ", r.step, ", participants ", r.participants));
    }
    comm.partial_finish();
    last[static_cast<std::size_t>(comm.rank())] = out;
  });
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r) EXPECT_EQ(last[static_cast<std::size_t>(r)], std::vector<float>(count, 10.0f));
}

TEST_P(ExternalArbiter, ACoordinatorGoneIsAnErrorNamingIt) {
  const int n = 2;
  auto service = start_service(n);
  RankSetup setup{.cfg = external_config(*service)};
  setup.unique_id = bytes_of("another communicator");
  const std::string address = setup.cfg.coordinator;
  std::barrier stepped(n + 1), stopped(n + 1);
  std::vector<std::string> errors(n);
  std::thread stopper([&] {
    stepped.arrive_and_wait();
    service.reset();  // the coordinator ends: its arbiters with it
    stopped.arrive_and_wait();
  });
  auto outcomes = run_ranks(n, GetParam(), setup, [&](Communicator& comm) {
    float x = 1, y = 0;
    comm.partial_allreduce(&x, &y, 1, DataType::f32, ReduceOp::sum, PartialOptions{LatePolicy::wait, 1.0, 1, 0});
    stepped.arrive_and_wait();
    stopped.arrive_and_wait();
    try {
      comm.partial_allreduce(&x, &y, 1, DataType::f32, ReduceOp::sum, PartialOptions{LatePolicy::wait, 1.0, 1, 0});
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
      if (e.status() != Status::peer_lost) throw;
    }
  });
  stopper.join();
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("lost its arbiter at antdt-coordinator " + address),
              std::string::npos)
        << "rank " << r << ": '" << errors[static_cast<std::size_t>(r)] << "'";
  }
}

// A coordinator killed while a rank's link to its arbiter is being made
// (challenge sent, connection gone before the answer): the communicator's
// arbiter is lost, the same PeerLostError as for a link lost later, so that
// the Agent moves the job to a new generation. Before, a broken send there
// escaped as a BootstrapError and ended the trainer.
TEST_P(ExternalArbiter, ACoordinatorThatDiesDuringTheHandshakeIsALostArbiter) {
  const int n = 2;
  net::Endpoint bound;
  net::Fd listener = net::listen_on("127.0.0.1", 0, &bound);
  std::atomic<bool> done{false};
  std::thread dying_coordinator([&] {
    while (!done) {
      net::Fd fd = net::accept_until(listener.get(), Clock::now() + 100ms, nullptr);
      if (!fd) continue;  // nobody yet
      control::Link link(std::move(fd));
      const std::vector<std::byte> challenge(32, std::byte{7});
      try {
        link.send(challenge, Clock::now() + 1s);
      } catch (const Error&) {
      }
    }  // closed at once: the process died
  });
  RankSetup setup;
  setup.cfg = test_config();
  setup.cfg.coordinator = bound.to_string();
  setup.cfg.secret = secret_hex();
  setup.unique_id = bytes_of("a communicator whose coordinator dies");
  std::vector<Status> statuses(n, Status::ok);
  std::vector<std::string> errors(n);
  auto outcomes = run_ranks(n, GetParam(), setup, [&](Communicator& comm) {
    float x = 1, y = 0;
    try {
      comm.partial_allreduce(&x, &y, 1, DataType::f32, ReduceOp::sum, PartialOptions{LatePolicy::wait, 1.0, 1, 0});
    } catch (const Error& e) {
      statuses[static_cast<std::size_t>(comm.rank())] = e.status();
      errors[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  done = true;
  dying_coordinator.join();
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(statuses[static_cast<std::size_t>(r)], Status::peer_lost) << errors[static_cast<std::size_t>(r)];
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("lost its arbiter at antdt-coordinator " + bound.to_string()),
              std::string::npos)
        << "rank " << r << ": '" << errors[static_cast<std::size_t>(r)] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ExternalArbiter, ::testing::Values(TransportKind::inproc, TransportKind::ucx),
                         [](const auto& param_info) { return to_string(param_info.param); });

}  // namespace
}  // namespace antdt
