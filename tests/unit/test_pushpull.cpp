// Push-pull (parameter-server mode) with ranks as threads: the partition map (range
// partitioning), push/pull against an independent reference in every mode
// (dedicated servers, every rank serving; 1..5 ranks; keys crossing partition
// boundaries, odd and zero counts; f32/f64/bf16/i32; weights), mismatched
// tables, bad arguments, the C API, and partial push (issue 4): wait equals the
// plain round bit for bit, weighted averages, and every contribution included
// exactly once or reported dropped with a slow rank behind a fault transport.
#include "collectives/api/make_communicator.hpp"
#include "comm_fixture.hpp"

#include <antdt/pushpull.h>
#include <antdt/pushpull.hpp>

#include "collectives/pushpull/partition_map.hpp"
#include "collectives/api/c_api.hpp"
#include "core/dtype.hpp"
#include "transport/fault/fault_transport.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

namespace antdt::test {
namespace {

using coll::pushpull::PartitionMap;

Config partial_test_config() {
  Config cfg = test_config();
  cfg.partial_warmup = 2;
  cfg.partial_grace_ms = 2;
  cfg.result_cache = 8;
  return cfg;
}

// ---------------------------------------------------------------------------
// Partition map
// ---------------------------------------------------------------------------
TEST(PushPullPartitionMap, SplitCoversTheTensorInEqualElementAlignedParts) {
  EXPECT_TRUE(coll::pushpull::split(0, 4, 4096).empty());
  auto one = coll::pushpull::split(1, 8, 4096);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], std::make_pair(std::size_t{0}, std::size_t{1}));
  for (std::size_t count : {1023u, 1024u, 1025u, 3001u, 10000u}) {
    auto parts = coll::pushpull::split(count, 4, 4096);
    const std::size_t expected_parts = (count * 4 + 4095) / 4096;
    ASSERT_EQ(parts.size(), expected_parts) << count;
    std::size_t next = 0, smallest = count, largest = 0;
    for (auto [first, n] : parts) {
      EXPECT_EQ(first, next);
      EXPECT_LE(n * 4, 4096u);
      next += n;
      smallest = std::min(smallest, n);
      largest = std::max(largest, n);
    }
    EXPECT_EQ(next, count);
    EXPECT_LE(largest - smallest, 1u) << count;
  }
}

TEST(PushPullPartitionMap, PartitionsAreSpreadByRangeOverTheServers) {
  std::vector<PushPullKey> keys = {{30, 5000, DataType::f32}, {10, 3001, DataType::f64}, {20, 0, DataType::bf16},
                                   {40, 1, DataType::i32}};
  auto l = PartitionMap::make(keys, {}, 3, 4096, 4096);
  ASSERT_EQ(l.servers, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(l.workers, (std::vector<int>{0, 1, 2}));
  // Keys sorted by id; server ranks never decrease along the table.
  for (std::size_t i = 1; i < l.keys.size(); ++i) EXPECT_LT(l.keys[i - 1].spec.key, l.keys[i].spec.key);
  std::map<int, std::size_t> bytes_per_server;
  int previous = 0;
  for (const auto& p : l.partitions) {
    EXPECT_GE(p.server, previous);
    previous = p.server;
    bytes_per_server[p.server] += p.count * l.keys[p.key_index].esize;
  }
  ASSERT_EQ(bytes_per_server.size(), 3u);
  // 24008 + 20000 + 4 bytes over 3 servers, in partitions of at most 4 KiB: within a partition of even.
  const double even = (3001.0 * 8 + 5000.0 * 4 + 4) / 3;
  for (auto [server, bytes] : bytes_per_server) EXPECT_NEAR(static_cast<double>(bytes), even, 4096.0) << server;
  EXPECT_EQ(l.partitions_of(l.key_index(20)).size(), 0u);
  EXPECT_EQ(l.partitions_of(l.key_index(40)).size(), 1u);
}

TEST(PushPullPartitionMap, PartitionsTravelInPiecesOfTheChunkSize) {
  std::vector<PushPullKey> keys = {{1, 10000, DataType::f64}, {2, 3, DataType::f32}};
  auto l = PartitionMap::make(keys, {}, 2, 16384, 4096);  // 80000 B: 5 partitions of 2000 elements, 4 pieces each
  ASSERT_EQ(l.partitions_of(0).size(), 5u);
  const auto pieces = l.pieces_of(0);
  ASSERT_EQ(pieces.size(), 20u);
  std::size_t next = 0;
  for (const auto& piece : pieces) {
    EXPECT_EQ(piece.first, next);
    EXPECT_LE(piece.count * 8, 4096u);
    const auto& part = l.partitions[piece.partition];
    EXPECT_GE(piece.first, part.first);
    EXPECT_LE(piece.first + piece.count, part.first + part.count);
    EXPECT_EQ(piece.server, part.server);
    next += piece.count;
  }
  EXPECT_EQ(next, 10000u);
  ASSERT_EQ(l.pieces_of(1).size(), 1u);
  EXPECT_EQ(l.pieces_of(1)[0].count, 3u);
}

TEST(PushPullPartitionMap, DedicatedServersHoldEveryPartition) {
  std::vector<PushPullKey> keys = {{1, 100000, DataType::f32}};
  std::vector<int> servers = {3, 1};
  auto l = PartitionMap::make(keys, servers, 5, 4096, 4096);
  EXPECT_EQ(l.servers, (std::vector<int>{1, 3}));
  EXPECT_EQ(l.workers, (std::vector<int>{0, 2, 4}));
  std::size_t on1 = 0, on3 = 0;
  for (const auto& p : l.partitions) {
    ASSERT_TRUE(p.server == 1 || p.server == 3);
    (p.server == 1 ? on1 : on3) += p.count;
  }
  EXPECT_EQ(on1 + on3, 100000u);
  EXPECT_NEAR(static_cast<double>(on1), 50000.0, 1024.0);
}

TEST(PushPullPartitionMap, BadTablesAndOptionsAreRefused) {
  std::vector<PushPullKey> dup = {{1, 4, DataType::f32}, {1, 8, DataType::f32}};
  EXPECT_THROW(PartitionMap::make(dup, {}, 2, 4096, 4096), InvalidArgument);
  std::vector<PushPullKey> keys = {{1, 4, DataType::f32}};
  std::vector<int> out_of_range = {2}, twice = {1, 1}, all = {0, 1};
  EXPECT_THROW(PartitionMap::make(keys, out_of_range, 2, 4096, 4096), InvalidArgument);
  EXPECT_THROW(PartitionMap::make(keys, twice, 3, 4096, 4096), InvalidArgument);
  EXPECT_THROW(PartitionMap::make(keys, all, 2, 4096, 4096), InvalidArgument);
  EXPECT_THROW(PartitionMap::make(keys, {}, 2, 4095, 4096), InvalidArgument);
  std::vector<PushPullKey> bad_dtype = {{1, 4, static_cast<DataType>(99)}};
  EXPECT_THROW(PartitionMap::make(bad_dtype, {}, 2, 4096, 4096), InvalidArgument);
  // The hash sees every field.
  auto a = PartitionMap::make(keys, {}, 2, 4096, 4096).hash();
  std::vector<PushPullKey> other_count = {{1, 5, DataType::f32}}, other_dtype = {{1, 4, DataType::i32}};
  EXPECT_NE(a, PartitionMap::make(other_count, {}, 2, 4096, 4096).hash());
  EXPECT_NE(a, PartitionMap::make(other_dtype, {}, 2, 4096, 4096).hash());
  EXPECT_NE(a, PartitionMap::make(keys, {}, 2, 8192, 4096).hash());
  EXPECT_NE(a, PartitionMap::make(keys, {}, 2, 4096, 8192).hash());
  std::vector<int> one = {1};
  EXPECT_NE(a, PartitionMap::make(keys, one, 2, 4096, 4096).hash());
}

TEST(PushPullConfig, PartitionBytesComeFromTheEnvironment) {
  auto parse = [](std::optional<std::string> value) {
    return Config::from_env([value](std::string_view name) -> std::optional<std::string> {
      if (name == "ANTDT_PS_PARTITION_BYTES") return value;
      return std::nullopt;
    });
  };
  EXPECT_EQ(parse(std::nullopt).ps_partition_bytes, std::size_t{4} << 20);
  EXPECT_EQ(parse("8M").ps_partition_bytes, std::size_t{8} << 20);
  EXPECT_EQ(parse("65536").ps_partition_bytes, 65536u);
  for (const char* bad : {"1K", "2G", "lots", "-4M"}) {
    try {
      parse(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("ANTDT_PS_PARTITION_BYTES"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------
// push / pull against a reference
// ---------------------------------------------------------------------------
// Inputs are small integers and weights multiples of 0.5, so every sum is exact
// in f32, f64 and bf16 (at most 100 in steps of 0.5: 8 significant bits) and
// the reference does not depend on the order of additions.
double input_value(int rank, std::uint64_t key, int round, int push, std::size_t i) {
  return static_cast<double>(static_cast<long long>((i * 7 + key * 3 + rank * 5 + round * 11 + push * 13) % 9) - 4);
}

double weight_of(int rank, DataType t, int round) {
  if (t == DataType::i32) return static_cast<double>(rank % 3 + 1);
  return 0.5 * ((rank + round) % 5 + 1);  // 0.5 .. 2.5
}

void store(DataType t, double v, std::byte* out) {
  switch (t) {
    case DataType::f32: { float f = static_cast<float>(v); std::memcpy(out, &f, 4); return; }
    case DataType::f64: std::memcpy(out, &v, 8); return;
    case DataType::bf16: { auto b = float_to_bf16(static_cast<float>(v)); std::memcpy(out, &b, 2); return; }
    case DataType::i32: { auto x = static_cast<std::int32_t>(v); std::memcpy(out, &x, 4); return; }
    default: FAIL() << "dtype not used here";
  }
}

double load(DataType t, const std::byte* in) {
  switch (t) {
    case DataType::f32: { float f; std::memcpy(&f, in, 4); return f; }
    case DataType::f64: { double d; std::memcpy(&d, in, 8); return d; }
    case DataType::bf16: { std::uint16_t b; std::memcpy(&b, in, 2); return bf16_to_float(b); }
    case DataType::i32: { std::int32_t x; std::memcpy(&x, in, 4); return x; }
    default: return NAN;
  }
}

const std::vector<PushPullKey> kTable = {
    {11, 3001, DataType::f32},  // 3 partitions of 4 KiB
    {3, 1, DataType::f64},
    {7, 0, DataType::f32},
    {5, 4099, DataType::bf16},  // odd, 3 partitions
    {9, 1025, DataType::i32},   // one element over a partition
    {2, 2500, DataType::f64},   // 5 partitions
};

struct ModeCase {
  int ranks;
  bool dedicated;
  bool shm;  // through the shared-memory push-pull area (4 KiB blocks: keys span several), else messages
};
void PrintTo(const ModeCase& c, std::ostream* os) {
  *os << c.ranks << " ranks, " << (c.dedicated ? "dedicated servers" : "every rank serving")
      << (c.shm ? ", shared memory" : ", messages");
}
std::string case_name(const ::testing::TestParamInfo<ModeCase>& info) {
  return cat(info.param.ranks, "ranks_", info.param.dedicated ? "dedicated" : "allserve",
             info.param.shm ? "_shm" : "_messages");
}

std::vector<int> servers_for(const ModeCase& c) {
  if (!c.dedicated) return {};
  if (c.ranks >= 4) return {0, c.ranks - 1};
  return {c.ranks - 1};
}

class PushPullModes : public ::testing::TestWithParam<ModeCase> {};

// Two rounds: round 0 one push per worker, round 1 two pushes (they add up).
// Each worker pulls the sum and, for float keys, the average; both against a
// reference computed in double from the same inputs.
TEST_P(PushPullModes, RoundsMatchTheReference) {
  const ModeCase mode = GetParam();
  const auto servers = servers_for(mode);
  std::vector<int> workers;
  for (int r = 0; r < mode.ranks; ++r)
    if (std::find(servers.begin(), servers.end(), r) == servers.end()) workers.push_back(r);
  std::mutex mu;
  std::vector<std::string> failures;
  Config cfg = test_config();
  cfg.shm_bulk_bytes = mode.shm ? 4096 : 0;
  auto outcomes = run_ranks(mode.ranks, TransportKind::inproc, [&](Communicator& comm) {
    PushPullOptions opts;
    opts.servers = servers;
    opts.partition_bytes = 8192;  // partitions of 2 pieces (the test's chunk size is 4096)
    PushPull pp(comm, kTable, opts);
    const bool worker = pp.is_worker();
    if (worker != (std::find(workers.begin(), workers.end(), comm.rank()) != workers.end()))
      throw std::runtime_error("is_worker disagrees with the options");
    for (int round = 0; round < 2; ++round) {
      const int pushes = round + 1;
      for (int push = 0; push < pushes; ++push) {
        for (const auto& k : kTable) {
          std::vector<std::byte> data(k.count * dtype_size(k.dtype));
          for (std::size_t i = 0; i < k.count; ++i)
            store(k.dtype, input_value(comm.rank(), k.key, round, push, i), data.data() + i * dtype_size(k.dtype));
          pp.push(k.key, worker ? data.data() : nullptr, weight_of(comm.rank(), k.dtype, round));
        }
      }
      for (const auto& k : kTable) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          if (op == ReduceOp::avg && k.dtype == DataType::i32) continue;
          const std::size_t es = dtype_size(k.dtype);
          std::vector<std::byte> out(k.count * es, std::byte{0x7f});
          pp.pull(k.key, worker ? out.data() : nullptr, op);
          if (!worker) continue;
          double total_weight = 0;
          for (int w : workers) total_weight += pushes * weight_of(w, k.dtype, round);
          for (std::size_t i = 0; i < k.count; ++i) {
            double sum = 0;
            for (int w : workers)
              for (int push = 0; push < pushes; ++push)
                sum += weight_of(w, k.dtype, round) * input_value(w, k.key, round, push, i);
            const double got = load(k.dtype, out.data() + i * es);
            const double want = op == ReduceOp::sum ? sum : sum / total_weight;
            const double tolerance = op == ReduceOp::sum ? 0.0
                                     : k.dtype == DataType::bf16 ? std::abs(want) / 128
                                     : k.dtype == DataType::f32  ? std::abs(want) * 1e-6
                                                                 : std::abs(want) * 1e-14;
            if (!(std::abs(got - want) <= tolerance)) {
              std::lock_guard lock(mu);
              failures.push_back(cat("rank ", comm.rank(), " round ", round, " key ", k.key, " ", op_name(op),
                                     " element ", i, ": got ", got, ", expected ", want));
              break;
            }
          }
        }
      }
    }
    const bool through_shm = comm.impl().shm(detail::ShmArea::pushpull) != nullptr;
    if (through_shm != (mode.shm && mode.ranks > 1))
      throw std::runtime_error(cat("the push-pull shared-memory area was ", through_shm ? "" : "not ", "used"));
  }, cfg);
  expect_all_ok(outcomes);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Ranks, PushPullModes,
                         ::testing::Values(ModeCase{1, false, false}, ModeCase{2, false, false},
                                           ModeCase{3, false, false}, ModeCase{4, false, false},
                                           ModeCase{5, false, false}, ModeCase{2, true, false},
                                           ModeCase{3, true, false}, ModeCase{4, true, false},
                                           ModeCase{5, true, false}, ModeCase{1, false, true},
                                           ModeCase{2, false, true}, ModeCase{3, false, true},
                                           ModeCase{4, false, true}, ModeCase{5, false, true},
                                           ModeCase{2, true, true}, ModeCase{3, true, true},
                                           ModeCase{4, true, true}, ModeCase{5, true, true}),
                         case_name);

// Over UCX too (shared memory between threads), one mode.
TEST(PushPull, UcxTransportMatchesTheReference) {
  const int n = 3;
  const std::vector<PushPullKey> keys = {{1, 70000, DataType::f32}};
  std::vector<std::vector<float>> got(n);
  auto outcomes = run_ranks(n, TransportKind::ucx, [&](Communicator& comm) {
    PushPull pp(comm, keys, PushPullOptions{{}, 65536});
    std::vector<float> data(70000), out(70000);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((i + comm.rank()) % 17);
    pp.push(1, data.data(), comm.rank() + 1.0);
    pp.pull(1, out.data());
    got[comm.rank()] = out;
  });
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < 70000; i += 997) {
      double want = 0;
      for (int w = 0; w < n; ++w) want += (w + 1.0) * static_cast<double>((i + w) % 17);
      ASSERT_EQ(got[r][i], static_cast<float>(want)) << "rank " << r << " element " << i;
    }
}

// Non-blocking push/pull give the blocking results; pulls without a push in
// between return the same aggregate; the next push starts a new round.
TEST(PushPull, NonBlockingAndRoundBoundaries) {
  const int n = 3;
  const std::vector<PushPullKey> keys = {{4, 2000, DataType::f64}};
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    PushPull pp(comm, keys, PushPullOptions{{}, 4096});
    std::vector<double> data(2000, comm.rank() + 1.0), a(2000), b(2000);
    Request push = pp.ipush(4, data.data(), 2.0);
    Request pull = pp.ipull(4, a.data(), ReduceOp::sum);
    pull.wait();
    push.wait();
    pp.pull(4, b.data(), ReduceOp::avg);
    for (std::size_t i = 0; i < 2000; ++i) {
      if (a[i] != 12.0) throw std::runtime_error(cat("ipull sum ", a[i], " at ", i));
      if (b[i] != 2.0) throw std::runtime_error(cat("second pull avg ", b[i], " at ", i));
    }
    pp.push(4, data.data(), 1.0);  // a new round: the old aggregate is gone
    pp.pull(4, a.data());
    if (a[1999] != 6.0) throw std::runtime_error(cat("new round sum ", a[1999]));
  });
  expect_all_ok(outcomes);
}

// Inside a group, push and pull record themselves and run at group_end(), in
// order with the group's other collectives, even when the PushPull is gone by
// then. A PushPull cannot be created inside a group (its table check is a collective).
TEST(PushPull, GroupedCallsRunAtGroupEnd) {
  const int n = 3;
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    const std::vector<PushPullKey> keys = {{6, 5000, DataType::f32}};
    std::vector<float> data(5000, comm.rank() + 1.0f), out(5000, -1.0f), sum(1, 0.0f), one(1, 1.0f);
    comm.group_start();
    bool refused = false;
    try {
      PushPull inside(comm, keys);
    } catch (const InvalidArgument&) {
      refused = true;
    }
    comm.group_end();
    if (!refused) throw std::runtime_error("a PushPull was created inside a group");
    {
      PushPull pp(comm, keys, PushPullOptions{{}, 8192});
      comm.group_start();
      pp.push(6, data.data(), 0.5);
      pp.pull(6, out.data(), ReduceOp::sum);
      comm.allreduce(one.data(), sum.data(), 1, DataType::f32, ReduceOp::sum);
      if (out[0] != -1.0f) throw std::runtime_error("a grouped pull ran before group_end");
    }
    comm.group_end();
    if (out[0] != 3.0f || out[4999] != 3.0f || sum[0] != 3.0f)
      throw std::runtime_error(cat("after group_end: ", out[0], " ", out[4999], " ", sum[0]));
  });
  expect_all_ok(outcomes);
}

// A rank whose key table differs makes every rank fail with MismatchError.
TEST(PushPull, DifferentKeyTablesFailEveryRankWithMismatch) {
  const int n = 3;
  for (int variant = 0; variant < 3; ++variant) {
    auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
      std::vector<PushPullKey> keys = {{1, 100, DataType::f32}, {2, 10, DataType::f64}};
      PushPullOptions opts;
      if (comm.rank() == 1) {
        if (variant == 0) keys[0].count = 101;
        if (variant == 1) keys[1].dtype = DataType::f32;
        if (variant == 2) opts.servers = {0};
      }
      PushPull pp(comm, keys, opts);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(failed_with<MismatchError>(outcomes, r)) << "variant " << variant << " rank " << r << ": "
                                                           << failure_of(outcomes, r);
  }
}

// Ranks that call different keys (or push where others pull) fail, never hang:
// MismatchError where their messages meet, else TimeoutError within ANTDT_TIMEOUT_MS.
TEST(PushPull, DifferentCallsFailEveryRankInsteadOfHanging) {
  const int n = 3;
  Config cfg = test_config();
  cfg.timeout = std::chrono::milliseconds(2000);
  for (int variant = 0; variant < 2; ++variant) {
    auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
      const std::vector<PushPullKey> keys = {{1, 3000, DataType::f32}, {2, 3000, DataType::f32}};
      PushPull pp(comm, keys, PushPullOptions{{}, 4096});
      std::vector<float> data(3000, 1.0f), out(3000);
      if (comm.rank() == 1 && variant == 0)
        pp.push(2, data.data());
      else if (comm.rank() == 1)
        pp.pull(1, out.data());
      else
        pp.push(1, data.data());
      pp.pull(1, out.data());
    }, cfg);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(failed_with<MismatchError>(outcomes, r) || failed_with<TimeoutError>(outcomes, r) ||
                  failed_with<RemoteAbortError>(outcomes, r))
          << "variant " << variant << " rank " << r << ": " << failure_of(outcomes, r);
    // Different keys on one tag: the headers meet and disagree. (A pull where
    // the others push travels on another tag: no message meets, so it times out.)
    if (variant == 0) {
      EXPECT_TRUE(failed_with<MismatchError>(outcomes, 0) || failed_with<MismatchError>(outcomes, 1) ||
                  failed_with<MismatchError>(outcomes, 2))
          << "no rank saw the mismatch (" << failure_of(outcomes, 0) << ")";
    }
  }
}

TEST(PushPull, BadArgumentsAreRefusedBeforeAnyMessage) {
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    const std::vector<PushPullKey> keys = {{1, 4, DataType::i32}, {2, 4, DataType::f32}};
    PushPull pp(comm, keys);
    std::int32_t ints[4] = {};
    float floats[4] = {};
    auto expect_invalid = [](auto&& call, const char* what) {
      try {
        call();
      } catch (const InvalidArgument&) {
        return;
      }
      throw std::runtime_error(cat(what, " was accepted"));
    };
    expect_invalid([&] { pp.push(3, floats); }, "unknown key");
    expect_invalid([&] { pp.push(1, ints, 0.5); }, "fractional weight for i32");
    expect_invalid([&] { pp.push(2, floats, -1.0); }, "negative weight");
    expect_invalid([&] { pp.push(2, floats, NAN); }, "NaN weight");
    expect_invalid([&] { pp.push(2, nullptr); }, "null data");
    expect_invalid([&] { pp.pull(1, ints, ReduceOp::avg); }, "avg of i32");
    expect_invalid([&] { pp.pull(2, floats, ReduceOp::max); }, "max");
    expect_invalid([&] { pp.pull(2, nullptr); }, "null out");
    // Still usable: nothing was sent.
    pp.push(1, ints, 3.0);
    pp.pull(1, ints);
  });
  expect_all_ok(outcomes);
}

TEST(PushPull, CApi) {
  const int n = 2;
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& thread_comm) {
    antdtComm handle{std::move(thread_comm)};  // the C handle over this thread's communicator
    const int rank = handle.comm.rank();
    antdtPushPullKey keys[] = {{8, 5000, ANTDT_F32}, {9, 3, ANTDT_I32}};
    antdtPushPull_t pp = nullptr;
    auto expect = [](antdtStatus_t got, antdtStatus_t want, const char* what) {
      if (got != want) throw std::runtime_error(cat(what, ": status ", got, " (", antdtLastError(), ")"));
    };
    antdtPushPullOptions bad{};
    bad.struct_size = 1;
    expect(antdtPushPullCreate(&pp, &handle, keys, 2, &bad), ANTDT_ERR_INVALID_ARGUMENT, "short struct_size");
    expect(antdtPushPullCreate(&pp, nullptr, keys, 2, nullptr), ANTDT_ERR_INVALID_ARGUMENT, "null communicator");
    expect(antdtPush(nullptr, 8, nullptr, 1.0), ANTDT_ERR_INVALID_ARGUMENT, "null handle");
    antdtPushPullOptions opts{};
    opts.struct_size = sizeof opts;
    opts.partition_bytes = 4096;
    expect(antdtPushPullCreate(&pp, &handle, keys, 2, &opts), ANTDT_OK, "create");
    std::vector<float> data(5000, static_cast<float>(rank + 1)), out(5000);
    std::int32_t ints[3] = {rank, rank, rank}, int_out[3];
    expect(antdtPush(pp, 8, data.data(), 2.0), ANTDT_OK, "push");
    expect(antdtPush(pp, 9, ints, 3.0), ANTDT_OK, "push ints");
    expect(antdtPull(pp, 8, out.data(), ANTDT_AVG), ANTDT_OK, "pull avg");
    expect(antdtPull(pp, 9, int_out, ANTDT_SUM), ANTDT_OK, "pull ints");
    expect(antdtPull(pp, 9, int_out, ANTDT_AVG), ANTDT_ERR_INVALID_ARGUMENT, "avg of ints");
    if (out[0] != 1.5f || out[4999] != 1.5f || int_out[2] != 3)
      throw std::runtime_error(cat("results ", out[0], " ", out[4999], " ", int_out[2]));
    antdtPartialOptions popts{};
    popts.struct_size = sizeof popts;
    popts.policy = ANTDT_LATE_WAIT;
    popts.weight = rank + 1.0;
    antdtPartialResult info{};
    info.struct_size = sizeof info;
    expect(antdtPartialPush(pp, 8, data.data(), out.data(), ANTDT_SUM, &popts, &info), ANTDT_OK, "partial push");
    if (info.fate != ANTDT_FATE_INCLUDED || info.participants != n || info.total_weight != 3.0 || out[7] != 5.0f)
      throw std::runtime_error(cat("partial push: fate ", info.fate, " total weight ", info.total_weight, " out ", out[7]));
    expect(antdtPartialFinish(&handle, nullptr), ANTDT_OK, "partial finish");
    expect(antdtPushPullDestroy(pp), ANTDT_OK, "destroy");
  }, partial_test_config());
  expect_all_ok(outcomes);
}

// ---------------------------------------------------------------------------
// Partial push (issue 4)
// ---------------------------------------------------------------------------
Config partial_config() { return partial_test_config(); }

std::uint64_t hash_bytes(const void* data, std::size_t bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// With `wait` every round equals the plain push + pull, bit for bit (random
// data, unequal weights, dtypes the kernels round differently). A run of
// partial steps (up to partial_finish) is for one key and one op.
TEST(PartialPush, WaitEqualsPlainPushPullBitForBit) {
  const int n = 4;
  const std::vector<PushPullKey> keys = {{1, 3001, DataType::f32}, {2, 2049, DataType::bf16}, {3, 999, DataType::f64}};
  std::vector<std::vector<std::uint64_t>> partial_hashes(n), plain_hashes(n);
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    PushPull pp(comm, keys, PushPullOptions{{}, 4096});
    std::mt19937 rng(static_cast<unsigned>(comm.rank() * 31 + 7));
    std::uniform_real_distribution<float> dist(-1, 1);
    for (const auto& k : keys) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        for (int step = 1; step <= 3; ++step) {
          const std::size_t es = dtype_size(k.dtype);
          std::vector<std::byte> data(k.count * es), a(k.count * es), b(k.count * es);
          for (std::size_t i = 0; i < k.count; ++i) store(k.dtype, dist(rng), data.data() + i * es);
          const double w = 0.25 + comm.rank() * 0.7 + step;
          auto r = pp.partial_push(k.key, data.data(), a.data(), op, PartialOptions{LatePolicy::wait, w, 1, 0});
          if (r.fate != Fate::included || r.participants != n)
            throw std::runtime_error(cat("step ", step, ": fate ", static_cast<int>(r.fate), " participants ",
                                         r.participants));
          pp.push(k.key, data.data(), w);
          pp.pull(k.key, b.data(), op);
          partial_hashes[comm.rank()].push_back(hash_bytes(a.data(), a.size()));
          plain_hashes[comm.rank()].push_back(hash_bytes(b.data(), b.size()));
        }
        comm.partial_finish();
      }
    }
  }, partial_config());
  expect_all_ok(outcomes);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(partial_hashes[r].size(), 18u);
    EXPECT_EQ(partial_hashes[r], plain_hashes[r]) << "rank " << r;
    EXPECT_EQ(partial_hashes[r], partial_hashes[0]) << "rank " << r;
  }
}

// Invariant 3: avg = sum(w_i g_i) / sum(w_i), and the reported total weight.
TEST(PartialPush, WeightedAverageIsExact) {
  const int n = 3;
  std::vector<std::vector<double>> got(n);
  auto outcomes = run_ranks(n, TransportKind::inproc, [&](Communicator& comm) {
    const std::vector<PushPullKey> keys = {{5, 700, DataType::f64}};
    PushPull pp(comm, keys, PushPullOptions{{}, 4096});
    const double w = comm.rank() + 1.0;  // 1, 2, 3
    std::vector<double> grad(700, comm.rank() * 10.0), out(700);
    auto r = pp.partial_push(5, grad.data(), out.data(), ReduceOp::avg, PartialOptions{LatePolicy::wait, w, 1, 0});
    if (r.total_weight != 6.0 || r.participants != n) throw std::runtime_error(cat("total weight ", r.total_weight));
    got[comm.rank()] = out;
    comm.partial_finish();
  }, partial_config());
  expect_all_ok(outcomes);
  const double want = (1 * 0.0 + 2 * 10.0 + 3 * 20.0) / 6.0;
  for (int r = 0; r < n; ++r)
    for (double v : got[r]) ASSERT_EQ(v, want) << "rank " << r;
}

TEST(PartialPush, DedicatedServersAreRefused) {
  auto outcomes = run_ranks(2, TransportKind::inproc, [&](Communicator& comm) {
    const std::vector<PushPullKey> keys = {{5, 7, DataType::f32}};
    PushPull pp(comm, keys, PushPullOptions{{1}, 0});
    float data[7] = {}, out[7];
    pp.partial_push(5, data, out);
  }, partial_config());
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(failed_with<UnsupportedError>(outcomes, r)) << failure_of(outcomes, r);
}

// Ranks as threads whose transports go through the fault decorator: rank
// `slow`'s sends are delayed by `plan`.
Outcomes run_ranks_with_slow_link(int n, int slow, const transport::FaultPlan& plan,
                                  const std::function<void(Communicator&)>& fn, const Config& cfg) {
  auto fabric = std::make_shared<transport::InprocFabric>(n);
  auto control = control::make_inproc_endpoints(n);
  Outcomes outcomes(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      log::set_thread_rank(r);
      try {
        auto t = transport::make_fault_transport(transport::make_inproc_transport(fabric, r, cfg),
                                                 r == slow ? plan : transport::FaultPlan{});
        Communicator comm =
            detail::make_communicator(std::move(t), 43, cfg, std::move(control[static_cast<std::size_t>(r)]));
        fn(comm);
      } catch (...) {
        outcomes[static_cast<std::size_t>(r)] = std::current_exception();
      }
      log::set_thread_rank(-1);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

struct LoopOutcome {
  std::vector<std::vector<float>> applied;  // results in order
  std::vector<Fate> fate_of_call;
  std::vector<std::uint64_t> contribution_step;
  int calls = 0;
};

// A training loop where rank `slow` computes `factor` times longer and sends
// through a delayed link. Each contribution is one-hot (rank, call) with weight
// 1 and op sum, so the sum of every applied result counts how often each
// contribution was included.
void partial_push_loop(Communicator& comm, LatePolicy policy, int steps, int max_calls, int slow, int factor,
                       LoopOutcome& mine) {
  const int n = comm.size();
  const std::size_t count = static_cast<std::size_t>(n * max_calls);
  const std::vector<PushPullKey> keys = {{77, count, DataType::f32}};
  PushPull pp(comm, keys, PushPullOptions{{}, 4096});
  std::vector<float> grad(count), result(count);
  const auto step_time = std::chrono::milliseconds(comm.rank() == slow ? 4 * factor : 4);
  for (;;) {
    std::this_thread::sleep_for(step_time);
    if (mine.calls >= max_calls) throw std::runtime_error("too many calls");
    std::fill(grad.begin(), grad.end(), 0.0f);
    grad[static_cast<std::size_t>(comm.rank() * max_calls + mine.calls)] = 1.0f;
    auto r = pp.partial_push(77, grad.data(), result.data(), ReduceOp::sum, PartialOptions{policy, 1.0, 1, 1});
    mine.fate_of_call.push_back(r.fate);
    mine.contribution_step.push_back(r.contribution_step);
    ++mine.calls;
    if (r.step == 0) break;  // the run ended while this rank was late
    mine.applied.push_back(result);
    while (r.steps_behind > 0) {  // catch up without computing
      r = pp.partial_push(77, nullptr, result.data(), ReduceOp::sum, PartialOptions{policy, 0.0, 1, 0});
      if (r.fate != Fate::none) throw std::runtime_error("a weight-0 call reported a contribution");
      mine.applied.push_back(result);
    }
    if (static_cast<int>(r.step) >= steps) break;
  }
  auto f = comm.partial_finish();
  while (f.steps_behind > 0) {
    auto r = pp.partial_push(77, nullptr, result.data(), ReduceOp::sum, PartialOptions{policy, 0.0, 1, 0});
    mine.applied.push_back(result);
    f.steps_behind = r.steps_behind;
  }
}

void check_accounting(const std::vector<LoopOutcome>& all, int n, int max_calls) {
  // Every rank applied the same results, bit for bit.
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(all[r].applied.size(), all[0].applied.size()) << "rank " << r;
    for (std::size_t s = 0; s < all[0].applied.size(); ++s)
      ASSERT_EQ(all[r].applied[s], all[0].applied[s]) << "rank " << r << " step " << s + 1;
  }
  // Every contribution is in exactly one result (the one reported), or reported dropped.
  std::vector<double> total(static_cast<std::size_t>(n * max_calls), 0.0);
  for (const auto& res : all[0].applied)
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += res[i];
  int late = 0;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < all[r].calls; ++c) {
      const std::size_t slot = static_cast<std::size_t>(r * max_calls + c);
      const Fate fate = all[r].fate_of_call[static_cast<std::size_t>(c)];
      if (fate == Fate::dropped) {
        EXPECT_EQ(total[slot], 0.0) << "rank " << r << " call " << c << " reported dropped but was included";
        ++late;
        continue;
      }
      EXPECT_EQ(total[slot], 1.0) << "rank " << r << " call " << c << " included " << total[slot] << " times";
      late += fate == Fate::deferred ? 1 : 0;
      const auto step = all[r].contribution_step[static_cast<std::size_t>(c)];
      ASSERT_GE(step, 1u);
      ASSERT_LE(step, all[0].applied.size());
      EXPECT_EQ(all[0].applied[step - 1][slot], 1.0f) << "rank " << r << " call " << c;
    }
  }
  EXPECT_GT(late, 0) << "the slow rank was never late: the test did not exercise skipping";
  // Untouched slots stay zero (no contribution appears from nowhere).
  for (int r = 0; r < n; ++r)
    for (int c = all[r].calls; c < max_calls; ++c)
      EXPECT_EQ(total[static_cast<std::size_t>(r * max_calls + c)], 0.0) << "rank " << r << " call " << c;
}

class PartialPushPolicy : public ::testing::TestWithParam<LatePolicy> {};

TEST_P(PartialPushPolicy, SlowRankBehindAFaultyLinkIsSkippedWithoutLosingAContribution) {
  const int n = 4, steps = 20, max_calls = 64, slow = 2;
  std::vector<LoopOutcome> all(n);
  transport::FaultPlan plan;
  plan.send_delay = std::chrono::milliseconds(2);
  auto outcomes = run_ranks_with_slow_link(n, slow, plan, [&](Communicator& comm) {
    partial_push_loop(comm, GetParam(), steps, max_calls, slow, 3, all[static_cast<std::size_t>(comm.rank())]);
  }, partial_config());
  expect_all_ok(outcomes);
  check_accounting(all, n, max_calls);
  EXPECT_LT(all[slow].calls, all[0].calls) << "the fast ranks waited for the slow one";
}

INSTANTIATE_TEST_SUITE_P(Policies, PartialPushPolicy, ::testing::Values(LatePolicy::drop, LatePolicy::defer),
                         [](const auto& param_info) { return param_info.param == LatePolicy::drop ? "drop" : "defer"; });

}  // namespace
}  // namespace antdt::test
