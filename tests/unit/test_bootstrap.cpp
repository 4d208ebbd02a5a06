// Bootstrap: the wire format rejects garbage, unique ids round-trip, the TCP
// rendezvous gathers every rank's bytes, and refuses peers without the secret.
#include "core/bootstrap.hpp"
#include "core/bootstrap_admission.hpp"
#include "core/bootstrap_wire.hpp"
#include "core/error.hpp"
#include "core/net.hpp"

#include <gtest/gtest.h>

#include <random>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>

namespace antdt {
namespace {

using Clock = std::chrono::steady_clock;

Bytes bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

TEST(BootstrapWire, RoundTripsEveryMessage) {
  wire::Challenge c;
  c.nonce[3] = std::byte{7};
  EXPECT_EQ(wire::decode_challenge(wire::encode(c)).nonce, c.nonce);
  wire::Hello h{5, 9, {}};
  h.mac[31] = std::byte{1};
  auto back = wire::decode_hello(wire::encode(h));
  EXPECT_EQ(back.rank, 5u);
  EXPECT_EQ(back.size, 9u);
  EXPECT_EQ(back.mac, h.mac);
  auto verdict = wire::encode(wire::Verdict{false, "because"});
  auto [accepted, len] = wire::decode_verdict_head(std::span(verdict).first(wire::kVerdictHeadBytes));
  EXPECT_FALSE(accepted);
  EXPECT_EQ(len, 7u);
  std::vector<Bytes> parts{bytes_of("a"), {}, bytes_of("xyz")};
  EXPECT_EQ(wire::decode_gathered(wire::encode_gathered(parts), 3), parts);
}

TEST(BootstrapWire, RejectsGarbageWithClearErrors) {
  auto hello = wire::encode(wire::Hello{1, 2, {}});
  auto bad_magic = hello;
  bad_magic[0] = std::byte{0};
  EXPECT_THROW(wire::decode_hello(bad_magic), BootstrapError);
  auto bad_version = hello;
  bad_version[4] = std::byte{99};
  try {
    wire::decode_hello(bad_version);
    FAIL() << "bad version accepted";
  } catch (const BootstrapError& e) {
    EXPECT_NE(std::string(e.what()).find("version"), std::string::npos) << e.what();
  }
  EXPECT_THROW(wire::decode_hello(std::span(hello).first(10)), BootstrapError);
  EXPECT_THROW(wire::decode_challenge(hello), BootstrapError);  // wrong kind
  auto huge = wire::encode_frame_head(wire::Kind::contribution, wire::kMaxFrameBytes + 1);
  EXPECT_THROW(wire::decode_frame_head(wire::Kind::contribution, huge), BootstrapError);
  auto gathered = wire::encode_gathered({bytes_of("abc")});
  gathered[0] = std::byte{200};  // length overruns the frame
  EXPECT_THROW(wire::decode_gathered(gathered, 1), BootstrapError);
  EXPECT_THROW(wire::decode_gathered(wire::encode_gathered({bytes_of("a")}), 2), BootstrapError);
}

TEST(BootstrapWire, RandomBytesNeverCrashTheParsers) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 20000; ++i) {
    Bytes junk(rng() % 80);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    if (!junk.empty() && rng() % 2) {  // often start with a valid prefix to reach deeper checks
      auto valid = wire::encode(wire::Hello{1, 2, {}});
      std::copy_n(valid.begin(), std::min(junk.size(), std::size_t{6}), junk.begin());
    }
    try { wire::decode_hello(junk); } catch (const BootstrapError&) {}
    try { wire::decode_challenge(junk); } catch (const BootstrapError&) {}
    try { wire::decode_verdict_head(junk); } catch (const BootstrapError&) {}
    try { wire::decode_frame_head(wire::Kind::gathered, junk); } catch (const BootstrapError&) {}
    try { wire::decode_gathered(junk, rng() % 4); } catch (const BootstrapError&) {}
  }
}

TEST(BootstrapWire, ProofDependsOnSecretNonceRankAndSize) {
  std::array<std::byte, 16> secret{}, other{};
  other[0] = std::byte{1};
  wire::Challenge c;
  wire::Hello h{1, 4, wire::prove(secret, c, 1, 4)};
  EXPECT_TRUE(wire::verify(secret, c, h));
  EXPECT_FALSE(wire::verify(other, c, h));
  h.rank = 2;
  EXPECT_FALSE(wire::verify(secret, c, h));
  h.rank = 1;
  c.nonce[0] = std::byte{9};
  EXPECT_FALSE(wire::verify(secret, c, h));
}

TEST(UniqueIdTest, RoundTripsThroughHexAndDecodes) {
  UniqueId id = UniqueId::create();
  EXPECT_EQ(UniqueId::from_string(id.to_string()).bytes, id.bytes);
  auto root = decode_unique_id(id);
  EXPECT_NE(root.port, 0);
  EXPECT_FALSE(root.host.empty());
  EXPECT_THROW(decode_unique_id(UniqueId{}), BootstrapError);
  EXPECT_THROW(UniqueId::from_string("abc"), InvalidArgument);
  EXPECT_THROW(UniqueId::from_string(std::string(256, 'z')), InvalidArgument);
  // Two ids never share a secret.
  EXPECT_NE(decode_unique_id(UniqueId::create()).secret, root.secret);
}

TEST(TcpBootstrap, FourRanksGatherEveryContributionTwice) {
  const int n = 4;
  UniqueId id = UniqueId::create();
  std::vector<std::vector<Bytes>> results(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto boot = make_tcp_bootstrap(id, r, n, std::chrono::seconds(20));
        boot->allgather(bytes_of("first-" + std::to_string(r)));
        results[r] = boot->allgather(bytes_of(std::string(static_cast<std::size_t>(r) * 1000, 'x')));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(results[r].size(), static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_EQ(results[r][p].size(), static_cast<std::size_t>(p) * 1000);
  }
}

TEST(TcpBootstrap, PeerWithoutTheSecretIsRefusedAndGarbageIgnored) {
  UniqueId id = UniqueId::create();
  RootAddress forged = decode_unique_id(id);
  forged.secret[0] ^= std::byte{0xff};
  UniqueId wrong = encode_unique_id(forged);

  std::string root_error, impostor_error, legit_error;
  std::thread root([&] {
    try {
      auto boot = make_tcp_bootstrap(id, 0, 2, std::chrono::seconds(20));
      boot->barrier();
    } catch (const std::exception& e) {
      root_error = e.what();
    }
  });
  // A connection that speaks garbage, then one with the wrong secret: both refused.
  {
    auto addr = decode_unique_id(id);
    auto fd = net::connect_to(net::Endpoint{addr.host, addr.port},
                              std::chrono::steady_clock::now() + std::chrono::seconds(5));
    Bytes junk(48, std::byte{0x41});
    net::send_all(fd.get(), junk, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  try {
    make_tcp_bootstrap(wrong, 1, 2, std::chrono::seconds(5));
  } catch (const BootstrapError& e) {
    impostor_error = e.what();
  }
  EXPECT_NE(impostor_error.find("secret"), std::string::npos) << impostor_error;
  // The real rank still gets in.
  try {
    auto boot = make_tcp_bootstrap(id, 1, 2, std::chrono::seconds(20));
    boot->barrier();
  } catch (const std::exception& e) {
    legit_error = e.what();
  }
  root.join();
  EXPECT_EQ(root_error, "");
  EXPECT_EQ(legit_error, "");
}

// A unique id naming a free port on the loopback address (UniqueId::create
// names this host's first interface). The port is free once this returns.
UniqueId loopback_id() {
  net::Endpoint bound;
  { net::Fd probe = net::listen_on("127.0.0.1", 0, &bound); }
  RootAddress root;
  root.host = "127.0.0.1";
  root.port = bound.port;
  std::mt19937 rng(std::random_device{}());
  for (auto& b : root.secret) b = static_cast<std::byte>(rng());
  return encode_unique_id(root);
}

// Connections that need no secret to open: idle ones, ones that stop in the
// middle of a hello, ones that send a hello with a wrong MAC and never read.
struct HostileConnections {
  std::vector<net::Fd> fds;

  void open(const UniqueId& id, int idle, int partial, int wrong_mac) {
    const auto addr = decode_unique_id(id);
    // connect_to retries until rank 0 listens.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (int i = 0; i < idle + partial + wrong_mac; ++i) {
      auto fd = net::connect_to(net::Endpoint{addr.host, addr.port}, deadline);
      if (i >= idle) {
        auto hello = wire::encode(wire::Hello{1, 2, {}});
        const std::size_t bytes = i < idle + partial ? hello.size() / 2 : hello.size();
        net::send_all(fd.get(), std::span(hello).first(bytes), deadline);
      }
      fds.push_back(std::move(fd));
    }
  }
};

// Runs an n-rank bootstrap and one allgather. Rank 0 starts first; `meanwhile`
// runs once it is up, before the other ranks start.
template <class Meanwhile>
void expect_bootstrap_completes(const UniqueId& id, int n, std::chrono::milliseconds timeout, Meanwhile meanwhile) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  auto rank = [&](int r) {
    try {
      auto boot = make_tcp_bootstrap(id, r, n, timeout);
      auto all = boot->allgather(bytes_of("rank-" + std::to_string(r)));
      for (int p = 0; p < n; ++p)
        if (all[static_cast<std::size_t>(p)] != bytes_of("rank-" + std::to_string(p)))
          errors[static_cast<std::size_t>(r)] = "wrong contribution of rank " + std::to_string(p);
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(rank, 0);
  meanwhile();
  for (int r = 1; r < n; ++r) threads.emplace_back(rank, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST(TcpBootstrap, IdleAndPartialConnectionsDoNotDelayTheRanks) {
  // Handshaking one connection after another, each of these held the root for
  // its 5 s handshake timeout: 16 of them outlast the 30 s this job has.
  UniqueId id = loopback_id();
  HostileConnections hostile;
  Clock::time_point start;
  expect_bootstrap_completes(id, 4, std::chrono::seconds(30), [&] {
    hostile.open(id, /*idle=*/12, /*partial=*/3, /*wrong_mac=*/1);
    start = Clock::now();
  });
  // The ranks never waited for a hostile connection's deadline (5 s).
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
}

TEST(BootstrapAdmission, MoreIdleConnectionsThanTheCapDropTheOldest) {
  // More connections than handshakes may be in progress (64 here;
  // kDefaultMaxPending by default): the oldest are dropped, the rank that
  // comes last still gets in.
  UniqueId id = loopback_id();
  const auto addr = decode_unique_id(id);
  net::Fd own = net::listen_on("127.0.0.1", addr.port, nullptr);
  HostileConnections hostile;
  hostile.open(id, /*idle=*/100, /*partial=*/8, /*wrong_mac=*/0);
  const auto start = Clock::now();
  std::string root_error;
  std::thread root([&] {
    try {
      AdmissionLimits limits;
      limits.max_pending = 64;
      admit_ranks(own.get(), addr.secret, 2, Clock::now() + std::chrono::seconds(20), std::chrono::seconds(20),
                  limits);
    } catch (const std::exception& e) {
      root_error = e.what();
    }
  });
  std::string rank1_error;
  try {
    make_tcp_bootstrap(id, 1, 2, std::chrono::seconds(20));  // joins: its verdict came
  } catch (const std::exception& e) {
    rank1_error = e.what();
  }
  root.join();
  EXPECT_EQ(root_error, "");
  EXPECT_EQ(rank1_error, "");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  // The first idle connection was closed by the root (after its challenge), not at its 5 s deadline.
  std::array<std::byte, wire::kChallengeBytes + 1> more{};
  EXPECT_THROW(net::recv_all(hostile.fds.front().get(), more, start + std::chrono::seconds(4)), BootstrapError);
}

TEST(BootstrapAdmission, DefaultCapLeavesRoomForAThousandConnections) {
  // Room for the 1 000 connections of the flood beside every rank: the
  // soft descriptor limit is raised for them where the hard limit allows.
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  const std::size_t cap = AdmissionLimits::for_size(4).max_pending;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < 2000 + 256) {
    EXPECT_GE(cap, 16u);  // what fits
    return;
  }
  EXPECT_EQ(cap, kDefaultMaxPending);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_TRUE(lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= kDefaultMaxPending + 256);
  EXPECT_EQ(AdmissionLimits::for_size(2000).max_pending, 2000u);
}

TEST(BootstrapAdmission, SlowHandshakeGetsItsOwnDeadline) {
  // A connection that never finishes its hello is closed at its own deadline,
  // while the overall deadline is still far away.
  UniqueId id = loopback_id();
  const auto addr = decode_unique_id(id);
  net::Endpoint bound;
  net::Fd own = net::listen_on("127.0.0.1", 0, &bound);
  std::string root_error;
  std::thread root([&] {
    try {
      AdmissionLimits limits;
      limits.handshake = std::chrono::milliseconds(200);
      admit_ranks(own.get(), addr.secret, 2, std::chrono::steady_clock::now() + std::chrono::seconds(20),
                  std::chrono::seconds(20), limits);
    } catch (const std::exception& e) {
      root_error = e.what();
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto slow = net::connect_to(bound, deadline);
  std::array<std::byte, wire::kChallengeBytes> challenge{};
  net::recv_all(slow.get(), challenge, deadline);
  auto hello = wire::encode(wire::Hello{1, 2, {}});
  net::send_all(slow.get(), std::span(hello).first(10), deadline);
  // The root closes it: the read sees the end, long before the 10 s here.
  std::array<std::byte, 1> more{};
  EXPECT_THROW(net::recv_all(slow.get(), more, deadline), BootstrapError);
  EXPECT_LT(std::chrono::steady_clock::now() + std::chrono::seconds(5), deadline);
  // The real rank 1, so that the root returns.
  auto rank1 = net::connect_to(bound, deadline);
  net::recv_all(rank1.get(), challenge, deadline);
  wire::Hello real{1, 2, wire::prove(addr.secret, wire::decode_challenge(challenge), 1, 2)};
  net::send_all(rank1.get(), wire::encode(real), deadline);
  std::array<std::byte, wire::kVerdictHeadBytes> head{};
  net::recv_all(rank1.get(), head, deadline);
  EXPECT_TRUE(wire::decode_verdict_head(head).first);
  root.join();
  EXPECT_EQ(root_error, "");
}

// A rank whose connection the root closes before the verdict (the root drops
// the oldest handshake when a flood of connections fills its cap) connects
// again instead of failing: here a stand-in listener on the root's port takes
// the rank's first connection and closes it, then the real root starts there.
TEST(TcpBootstrap, RankWhoseHandshakeTheRootDroppedConnectsAgain) {
  UniqueId id = loopback_id();
  const auto addr = decode_unique_id(id);
  auto stand_in = std::make_unique<net::Fd>(net::listen_on("127.0.0.1", addr.port, nullptr));
  std::string rank1_error;
  std::thread rank1([&] {
    try {
      auto boot = make_tcp_bootstrap(id, 1, 2, std::chrono::seconds(20));
      boot->barrier();
    } catch (const std::exception& e) {
      rank1_error = e.what();
    }
  });
  {
    net::Fd first = net::accept_until(stand_in->get(), Clock::now() + std::chrono::seconds(10), nullptr);
    ASSERT_TRUE(static_cast<bool>(first));
  }  // closed before any challenge: to rank 1, the root dropped it
  stand_in.reset();
  std::string root_error;
  try {
    auto boot = make_tcp_bootstrap(id, 0, 2, std::chrono::seconds(20));
    boot->barrier();
  } catch (const std::exception& e) {
    root_error = e.what();
  }
  rank1.join();
  EXPECT_EQ(root_error, "");
  EXPECT_EQ(rank1_error, "");
}

// A refusal is final: no second attempt (the impostor fails at once).
TEST(TcpBootstrap, RefusedRankDoesNotTryAgain) {
  UniqueId id = loopback_id();
  RootAddress forged = decode_unique_id(id);
  forged.secret[0] ^= std::byte{0xff};
  const UniqueId wrong = encode_unique_id(forged);
  std::thread root([&] {
    try {
      make_tcp_bootstrap(id, 0, 2, std::chrono::seconds(1))->barrier();
    } catch (const std::exception&) {
      // Times out: rank 1 never proves the secret.
    }
  });
  const auto start = Clock::now();
  std::string error;
  try {
    make_tcp_bootstrap(wrong, 1, 2, std::chrono::seconds(20))->barrier();
  } catch (const BootstrapError& e) {
    error = e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(error.find("refused rank 1"), std::string::npos) << error;
  root.join();
}

TEST(TcpBootstrap, MissingRankIsATimeoutNamingIt) {
  UniqueId id = UniqueId::create();
  auto start = std::chrono::steady_clock::now();
  try {
    make_tcp_bootstrap(id, 0, 3, std::chrono::milliseconds(300));
    FAIL() << "bootstrap without peers succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("missing ranks 1,2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(InprocBootstrapTest, GathersAcrossGenerations) {
  const int n = 3;
  auto rendezvous = std::make_shared<InprocRendezvous>(n, std::chrono::seconds(10));
  std::vector<std::thread> threads;
  std::vector<int> bad(n, 0);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      InprocBootstrap boot(rendezvous, r);
      for (int round = 0; round < 50; ++round) {
        auto all = boot.allgather(bytes_of(std::to_string(round * 10 + r)));
        for (int p = 0; p < n; ++p)
          if (all[p] != bytes_of(std::to_string(round * 10 + p))) ++bad[r];
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(bad[r], 0);
}

// Rank 0 killed after it made the unique id (its listener open since then):
// the other ranks learn it from the refused connection at once, instead of
// trying to connect until the timeout (issue 16: a dead rank 0 during a
// communicator's creation cost every other rank ANTDT_TIMEOUT_MS).
TEST(TcpBootstrap, ARootGoneAfterMakingTheIdIsAPeerLostErrorAtOnce) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const UniqueId made = UniqueId::create();  // rank 0's process: listens from here on
    const bool ok = ::write(fds[1], made.bytes.data(), made.bytes.size()) == static_cast<ssize_t>(made.bytes.size());
    ::_exit(ok ? 0 : 3);  // and dies before it creates its communicator
  }
  ::close(fds[1]);
  UniqueId id;
  ASSERT_EQ(::read(fds[0], id.bytes.data(), id.bytes.size()), static_cast<ssize_t>(id.bytes.size()));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(decode_unique_id(id).listening);
  const auto start = Clock::now();
  try {
    auto boot = make_tcp_bootstrap(id, 1, 2, std::chrono::milliseconds(20000));
    FAIL() << "joined a root that is gone";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  // An id whose root binds only when its communicator is created (ANTDT_ROOT)
  // does not say it listens: a refusal there is still retried.
  EXPECT_FALSE(decode_unique_id(loopback_id()).listening);
}

// A root that accepted this rank's connection and then died (listener and
// connection closed mid-handshake): once reached, a refusal is final too.
TEST(TcpBootstrap, ARootThatWasReachedAndThenDiedIsAPeerLostError) {
  const UniqueId id = loopback_id();
  const RootAddress root = decode_unique_id(id);
  std::thread fake_root([&] {
    net::Fd listener = net::listen_on(root.host, root.port, nullptr);
    std::string peer;
    net::Fd conn = net::accept_until(listener.get(), Clock::now() + std::chrono::seconds(10), &peer);
  });  // both closed here: the process "died"
  const auto start = Clock::now();
  try {
    auto boot = make_tcp_bootstrap(id, 1, 2, std::chrono::milliseconds(20000));
    FAIL() << "joined a root that is gone";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("reached it before"), std::string::npos) << e.what();
  }
  fake_root.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace antdt
