// Stateful Dynamic Data Sharding (scheduler/dds): the per-epoch order, fetch /
// commit / give_back / resplit / rank_failed semantics, the exactly-once
// invariant checked with sample-id bitmaps under randomized interleavings (one
// thread and eight threads) with a checkpoint + restore in the middle, files
// mode, argument errors and malformed checkpoints.
#include "core/config.hpp"
#include "core/error.hpp"
#include "scheduler/dds.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace antdt::sched {
namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "antdt-dds-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A small deterministic generator (the same draws with every standard library).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }

 private:
  std::uint64_t state_;
};

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The checksum rule of docs/dds.md, written independently of dds.cpp: FNV-1a 64
// over the canonical dump of the document without its checksum field.
std::string checksum_of(nlohmann::json doc) {
  doc.erase("checksum");
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : doc.dump()) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---------------------------------------------------------------------------
// Epoch order
// ---------------------------------------------------------------------------

TEST(DdsOrder, EachEpochIsAPermutationDeterministicBySeed) {
  for (const ShuffleMode mode : {ShuffleMode::none, ShuffleMode::samples, ShuffleMode::blocks}) {
    for (const std::uint64_t n : {1ull, 2ull, 7ull, 1000ull, 1025ull, 4097ull}) {
      DdsOptions opt;
      opt.shard_size = 16;
      opt.seed = 42;
      opt.shuffle = mode;
      const Dds a(Dataset::samples(n), opt);
      const Dds b(Dataset::samples(n), opt);
      opt.seed = 43;
      const Dds other_seed(Dataset::samples(n), opt);
      for (std::uint32_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<bool> seen(n, false);
        bool differs_from_seed = false;
        for (std::uint64_t p = 0; p < n; ++p) {
          const std::uint64_t id = a.sample_at(epoch, p);
          ASSERT_LT(id, n);
          ASSERT_FALSE(seen[id]) << "mode " << to_string(mode) << " n " << n << " epoch " << epoch << " id " << id;
          seen[id] = true;
          ASSERT_EQ(id, b.sample_at(epoch, p));  // same seed, same order
          differs_from_seed |= id != other_seed.sample_at(epoch, p);
          if (mode == ShuffleMode::none) {
            ASSERT_EQ(id, p);
          }
          if (mode == ShuffleMode::blocks) {
            // Blocks of 16 consecutive ids stay together, in order.
            if (p % 16 != 0) {
              ASSERT_EQ(id, a.sample_at(epoch, p - 1) + 1);
            } else {
              ASSERT_EQ(id % 16, 0u);
            }
          }
        }
        if (mode == ShuffleMode::samples && n >= 1000) {
          EXPECT_TRUE(differs_from_seed);
        }
      }
      if (mode != ShuffleMode::none && n >= 1000) {
        std::uint64_t same = 0;
        for (std::uint64_t p = 0; p < n; ++p) same += a.sample_at(0, p) == a.sample_at(1, p);
        EXPECT_LT(same, n / 4) << "epochs 0 and 1 should be shuffled differently";
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Single operations
// ---------------------------------------------------------------------------

DdsOptions small_options(int world, std::uint64_t shard, ShuffleMode shuffle = ShuffleMode::samples) {
  DdsOptions opt;
  opt.world_size = world;
  opt.shard_size = shard;
  opt.seed = 7;
  opt.shuffle = shuffle;
  opt.epochs = 1;
  return opt;
}

std::vector<std::uint64_t> order_slice(const Dds& dds, std::uint64_t begin, std::uint64_t end) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t p = begin; p < end; ++p) out.push_back(dds.sample_at(0, p));
  return out;
}

TEST(Dds, FetchWalksTheShardThenTakesTheNext) {
  Dds dds(Dataset::samples(100), small_options(2, 30));
  const Batch a = dds.fetch(0, 20);
  ASSERT_EQ(a.status, FetchStatus::ok);
  EXPECT_EQ(a.samples, order_slice(dds, 0, 20));
  const Batch b = dds.fetch(1, 5);
  EXPECT_EQ(b.samples, order_slice(dds, 30, 35));  // rank 1 takes its own shard
  const Batch c = dds.fetch(0, 20);                 // 10 from shard 0, 10 from the next fresh one
  EXPECT_EQ(c.samples, [&] {
    auto v = order_slice(dds, 20, 30);
    auto w = order_slice(dds, 60, 70);
    v.insert(v.end(), w.begin(), w.end());
    return v;
  }());
  EXPECT_EQ(dds.shards_taken(), (std::vector<std::uint64_t>{2, 1}));
  EXPECT_NE(a.lease, c.lease);
  const DdsProgress p = dds.progress();
  EXPECT_EQ(p.leased, 45u);
  EXPECT_EQ(p.committed, 0u);
  EXPECT_EQ(p.open_leases, 3u);
  EXPECT_TRUE(dds.commit(a.lease));
  EXPECT_FALSE(dds.commit(a.lease));  // settled: no second count
  EXPECT_EQ(dds.progress().committed, 20u);
}

TEST(Dds, FastRanksTakeMoreShardsThanASlowRank) {
  // Rank 0 does one 8-sample step per round, ranks 1..7 four steps each.
  DdsOptions opt = small_options(8, 32);
  Dds dds(Dataset::samples(20000), opt);
  while (!dds.progress().finished) {
    for (int rank = 0; rank < 8; ++rank) {
      for (int step = 0; step < (rank == 0 ? 1 : 4); ++step) {
        const Batch b = dds.fetch(rank, 8);
        if (b.status == FetchStatus::ok) {
          ASSERT_TRUE(dds.commit(b.lease));
        }
      }
    }
  }
  const auto taken = dds.shards_taken();
  for (int rank = 1; rank < 8; ++rank) EXPECT_GT(taken[rank], 3 * taken[0]) << "rank " << rank;
  EXPECT_EQ(std::accumulate(taken.begin(), taken.end(), std::uint64_t{0}), 20000u / 32);
}

TEST(Dds, ResplitHandsTheStragglersTailToAFastRank) {
  Dds dds(Dataset::samples(150), small_options(2, 50));
  const Batch slow = dds.fetch(0, 10);       // shard 0, positions 0..9
  const Batch lost = dds.fetch(1, 5);        // shard 1, positions 50..54
  ASSERT_EQ(dds.rank_failed(1), 50u);        // shard 1 goes back to queued whole
  EXPECT_FALSE(dds.commit(lost.lease));
  EXPECT_EQ(dds.resplit(0, 5), 35u);         // keeps 10..14, the tail 15..49 goes back, ahead of shard 1
  EXPECT_EQ(dds.progress().resplit_samples, 35u);
  const Batch fast = dds.fetch(1, 100);      // the tail, shard 1, then 15 of a fresh shard
  ASSERT_EQ(fast.samples.size(), 100u);
  EXPECT_EQ(std::vector<std::uint64_t>(fast.samples.begin(), fast.samples.begin() + 35), order_slice(dds, 15, 50));
  EXPECT_EQ(std::vector<std::uint64_t>(fast.samples.begin() + 35, fast.samples.begin() + 85),
            order_slice(dds, 50, 100));
  EXPECT_EQ(std::vector<std::uint64_t>(fast.samples.begin() + 85, fast.samples.end()), order_slice(dds, 100, 115));
  const Batch kept = dds.fetch(0, 100);      // the straggler still gets what it kept, nothing more
  EXPECT_EQ(kept.samples, order_slice(dds, 10, 15));
  EXPECT_EQ(dds.fetch(0, 1).status, FetchStatus::wait);
  EXPECT_EQ(dds.resplit(0), 0u);             // nothing left to cut
  const Batch rest = dds.fetch(1, 100);
  EXPECT_EQ(rest.samples, order_slice(dds, 115, 150));
  for (const auto lease : {slow.lease, fast.lease, kept.lease, rest.lease}) EXPECT_TRUE(dds.commit(lease));
  EXPECT_TRUE(dds.progress().finished);
  EXPECT_EQ(dds.fetch(1, 1).status, FetchStatus::finished);
}

TEST(Dds, IdleRanksStealHalfOfTheLargestRemainderWhenEnabled) {
  DdsOptions opt = small_options(3, 100);
  Dds plain(Dataset::samples(100), opt);
  ASSERT_EQ(plain.fetch(0, 10).status, FetchStatus::ok);
  EXPECT_EQ(plain.fetch(1, 20).status, FetchStatus::wait);  // off by default: rank 1 waits on rank 0's shard

  opt.steal_min = 8;
  Dds dds(Dataset::samples(100), opt);
  const Batch owner = dds.fetch(0, 10);   // shard [0, 100), 90 left
  const Batch thief = dds.fetch(1, 20);   // takes [55, 100), the back half
  EXPECT_EQ(thief.samples, order_slice(dds, 55, 75));
  EXPECT_EQ(dds.progress().stolen_samples, 45u);
  // Rank 2 keeps stealing from the largest remainder while half of it reaches 8:
  // rank 0's [10, 55) → [33, 55); rank 1's [75, 100) → [88, 100); rank 0's [10, 33) → [22, 33);
  // then rank 0 has 12 and rank 1 has 13 left, halves below 8.
  const Batch second = dds.fetch(2, 100);
  std::vector<std::uint64_t> want = order_slice(dds, 33, 55);
  for (const auto& part : {order_slice(dds, 88, 100), order_slice(dds, 22, 33)})
    want.insert(want.end(), part.begin(), part.end());
  EXPECT_EQ(second.samples, want);
  EXPECT_EQ(dds.progress().stolen_samples, 45u + 22 + 12 + 11);
  const Batch rest0 = dds.fetch(0, 100);
  EXPECT_EQ(rest0.samples, order_slice(dds, 10, 22));
  const Batch rest1 = dds.fetch(1, 100);
  EXPECT_EQ(rest1.samples, order_slice(dds, 75, 88));
  std::vector<bool> seen(100, false);
  for (const Batch* b : {&owner, &thief, &second, &rest0, &rest1})
    for (const std::uint64_t id : b->samples) {
      ASSERT_FALSE(seen[id]) << "sample " << id << " handed out twice";
      seen[id] = true;
    }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
  for (const Batch* b : {&owner, &thief, &second, &rest0, &rest1}) EXPECT_TRUE(dds.commit(b->lease));
  EXPECT_TRUE(dds.progress().finished);
}

TEST(Dds, GiveBackRewindsTheTailOrMakesANewShard) {
  Dds dds(Dataset::samples(100), small_options(2, 50));
  const Batch a = dds.fetch(0, 10);
  const Batch b = dds.fetch(0, 10);
  ASSERT_TRUE(dds.give_back(b.lease));  // the latest samples: cursor rewinds, rank 0 gets them again
  EXPECT_EQ(dds.fetch(0, 10).samples, b.samples);
  ASSERT_TRUE(dds.give_back(a.lease));  // not the tail: a new queued shard, first in line
  const Batch other = dds.fetch(1, 10);
  EXPECT_EQ(other.samples, a.samples);
  bool found = false;
  for (const Shard& s : dds.shards())
    if (s.owner == 1) {
      found = true;
      EXPECT_EQ(s.begin, 0u);
      EXPECT_EQ(s.end, 10u);
      EXPECT_EQ(s.attempts, 2u);  // the samples' second time out
    }
  EXPECT_TRUE(found);
  EXPECT_FALSE(dds.give_back(a.lease));
  EXPECT_EQ(dds.progress().given_back_samples, 20u);
}

TEST(Dds, SettleFollowsThePartialCollectivesFate) {
  Dds dds(Dataset::samples(40), small_options(1, 40, ShuffleMode::none));
  const Batch included = dds.fetch(0, 10);
  const Batch deferred = dds.fetch(0, 10);
  const Batch dropped = dds.fetch(0, 10);
  EXPECT_TRUE(dds.settle(included.lease, Fate::included));
  EXPECT_TRUE(dds.settle(deferred.lease, Fate::deferred));
  EXPECT_TRUE(dds.settle(dropped.lease, Fate::dropped));
  DdsProgress p = dds.progress();
  EXPECT_EQ(p.committed, 20u);
  EXPECT_EQ(p.given_back_samples, 10u);
  EXPECT_EQ(p.leased, 0u);
  EXPECT_EQ(dds.fetch(0, 10).samples, dropped.samples);  // the dropped samples come back
  EXPECT_FALSE(dds.settle(included.lease, Fate::dropped));  // settled already: no effect
  expect_invalid([&] { dds.settle(dropped.lease, Fate::none); }, "fate 3");
}

TEST(Dds, RankFailureRequeuesLeasesAndDoingShards) {
  Dds dds(Dataset::samples(60), small_options(3, 20, ShuffleMode::none));
  const Batch a = dds.fetch(0, 5);
  const Batch b = dds.fetch(0, 5);
  const Batch c = dds.fetch(1, 5);
  ASSERT_TRUE(dds.commit(a.lease));
  EXPECT_EQ(dds.rank_failed(0), 15u);  // lease b (5) and the untouched 10
  EXPECT_FALSE(dds.commit(b.lease));   // revoked
  const DdsProgress p = dds.progress();
  EXPECT_EQ(p.committed, 5u);
  EXPECT_EQ(p.leased, 5u);
  EXPECT_EQ(p.rank_failures, 1u);
  // Rank 2 picks up rank 0's work: samples 5..19, then the fresh 40..59.
  const Batch d = dds.fetch(2, 100);
  std::vector<std::uint64_t> want(15);
  std::iota(want.begin(), want.end(), 5);
  for (std::uint64_t i = 40; i < 60; ++i) want.push_back(i);
  EXPECT_EQ(d.samples, want);
  EXPECT_TRUE(dds.commit(d.lease));
  EXPECT_TRUE(dds.commit(c.lease));
  const Batch e = dds.fetch(1, 100);
  EXPECT_EQ(e.samples.size(), 15u);
  EXPECT_TRUE(dds.commit(e.lease));
  EXPECT_TRUE(dds.progress().finished);
}

TEST(Dds, FilesModeMapsIdsToFileAndRecord) {
  const Dataset data = Dataset::files({{"a.rec", 3}, {"empty.rec", 0}, {"c.rec", 5}, {"d.rec", 1}});
  ASSERT_EQ(data.size(), 9u);
  const std::vector<std::pair<std::size_t, std::uint64_t>> want = {{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1},
                                                                   {2, 2}, {2, 3}, {2, 4}, {3, 0}};
  for (std::uint64_t id = 0; id < 9; ++id) {
    const SampleLocation loc = data.locate(id);
    EXPECT_EQ(loc.file, want[id].first) << "id " << id;
    EXPECT_EQ(loc.record, want[id].second) << "id " << id;
  }
  // Blocks shuffle: each shard reads consecutive records.
  DdsOptions opt = small_options(1, 3, ShuffleMode::blocks);
  Dds dds(data, opt);
  std::set<std::pair<std::size_t, std::uint64_t>> records;
  for (;;) {
    const Batch b = dds.fetch(0, 3);
    if (b.status != FetchStatus::ok) break;
    for (const std::uint64_t id : b.samples) {
      const SampleLocation loc = dds.dataset().locate(id);
      EXPECT_LT(loc.record, dds.dataset().files()[loc.file].records);
      EXPECT_TRUE(records.insert({loc.file, loc.record}).second);
    }
    ASSERT_TRUE(dds.commit(b.lease));
  }
  EXPECT_EQ(records.size(), 9u);
  EXPECT_EQ(dds.epoch(), 1u);
}

TEST(Dds, BadArgumentsNameTheProblem) {
  expect_invalid([] { Dataset::samples(0); }, "sample count");
  expect_invalid([] { Dataset::files({}); }, "file list is empty");
  expect_invalid([] { Dataset::files({{"a", 0}, {"b", 0}}); }, "hold no records");
  expect_invalid([] { Dataset::files({{"", 3}}); }, "empty name");
  expect_invalid([] { Dataset::files({{"ok", 1}, {"bad\xff", 3}}); }, "file 1 is not valid UTF-8");
  expect_invalid([] { Dataset::files({{"\xc0\xaf", 3}}); }, "not valid UTF-8");  // overlong '/'
  EXPECT_EQ(Dataset::files({{"daten-\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80", 3}}).size(), 3u);
  expect_invalid([] { Dataset::samples(5).locate(0); }, "needs a dataset described by files");
  expect_invalid([] { Dataset::files({{"a", 2}}).locate(2); }, "sample 2 out of range");
  expect_invalid([] { parse_shuffle_mode("random"); }, "none|samples|blocks");
  DdsOptions opt;
  opt.world_size = 0;
  expect_invalid([&] { (void)Dds(Dataset::samples(4), opt); }, "world_size");
  opt.world_size = 2;
  opt.shard_size = 0;
  expect_invalid([&] { (void)Dds(Dataset::samples(4), opt); }, "shard_size");
  opt.shard_size = 2;
  Dds dds(Dataset::samples(4), opt);
  expect_invalid([&] { dds.fetch(2, 1); }, "rank 2 out of range");
  expect_invalid([&] { dds.fetch(-1, 1); }, "rank -1 out of range");
  expect_invalid([&] { dds.fetch(0, 0); }, "max_samples");
  expect_invalid([&] { dds.commit(0); }, "lease 0 was never issued");
  expect_invalid([&] { dds.give_back(77); }, "lease 77 was never issued");
  expect_invalid([&] { dds.resplit(5); }, "resplit: rank 5");
  expect_invalid([&] { dds.rank_failed(-3); }, "rank_failed: rank -3");
  expect_invalid([&] { dds.sample_at(0, 4); }, "position 4 out of range");
  expect_invalid([&] { dds.checkpoint(""); }, "empty path");
}

TEST(Dds, OptionsFromTheEnvironment) {
  const auto lookup_of = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
      const auto it = vars.find(std::string(name));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  const DdsOptions defaults = dds_options_from(Config::from_env(lookup_of({})), 4);
  EXPECT_EQ(defaults.shard_size, 1024u);
  EXPECT_EQ(defaults.seed, 0u);
  EXPECT_EQ(defaults.shuffle, ShuffleMode::samples);
  EXPECT_EQ(defaults.world_size, 4);
  const DdsOptions set = dds_options_from(
      Config::from_env(lookup_of({{"ANTDT_DDS_SHARD_SIZE", "256"}, {"ANTDT_DDS_SEED", "9"}, {"ANTDT_DDS_SHUFFLE", "Blocks"}})),
      2, 5);
  EXPECT_EQ(set.shard_size, 256u);
  EXPECT_EQ(set.seed, 9u);
  EXPECT_EQ(set.shuffle, ShuffleMode::blocks);
  EXPECT_EQ(set.epochs, 5u);
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"ANTDT_DDS_SHARD_SIZE", "0"}, {"ANTDT_DDS_SEED", "-1"}, {"ANTDT_DDS_SHUFFLE", "random"}}) {
    try {
      Config::from_env(lookup_of({{name, value}}));
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------
// Checkpoint
// ---------------------------------------------------------------------------

// Gives back every open lease in decreasing id order: what restore does.
void give_back_all(Dds& dds, std::vector<std::uint64_t> leases) {
  std::sort(leases.rbegin(), leases.rend());
  for (const auto id : leases) ASSERT_TRUE(dds.give_back(id));
}

TEST(DdsCheckpoint, RestoreRebuildsTheStateWithOpenLeasesReturned) {
  TempDir dir;
  const std::string path = dir.file("dds.json");
  Dds dds(Dataset::files({{"x", 70}, {"y", 55}}), small_options(3, 16));
  const Batch a = dds.fetch(0, 10);
  const Batch b = dds.fetch(1, 20);
  const Batch c = dds.fetch(2, 5);
  ASSERT_TRUE(dds.commit(b.lease));
  const Batch d = dds.fetch(1, 7);
  ASSERT_EQ(dds.resplit(2), 11u);
  dds.checkpoint(path);
  dds.checkpoint(path);  // overwriting an existing checkpoint works too
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const auto restored = Dds::load(path);
  give_back_all(dds, {a.lease, c.lease, d.lease});
  EXPECT_EQ(restored->serialize(), dds.serialize());
  EXPECT_EQ(restored->progress().leased, 0u);
  EXPECT_EQ(restored->progress().committed, 20u);
  EXPECT_FALSE(restored->commit(a.lease));  // revoked by the restore, not "never issued"

  // restore() into an object built with the same dataset and options.
  Dds same(Dataset::files({{"x", 70}, {"y", 55}}), small_options(3, 16));
  same.restore(path);
  EXPECT_EQ(same.serialize(), dds.serialize());
  // Mismatches name what differs.
  Dds other_data(Dataset::files({{"x", 70}, {"y", 56}}), small_options(3, 16));
  expect_invalid([&] { other_data.restore(path); }, "different dataset");
  Dds other_seed(Dataset::files({{"x", 70}, {"y", 55}}), [] {
    auto o = small_options(3, 16);
    o.seed = 8;
    return o;
  }());
  expect_invalid([&] { other_seed.restore(path); }, "options.seed");
}

TEST(DdsCheckpoint, FailedWritesNameThePathAndLeaveNoTempFile) {
  TempDir dir;
  Dds dds(Dataset::samples(10), small_options(1, 4));
  expect_invalid([&] { dds.checkpoint(dir.file("no-such-dir/dds.json")); }, "cannot create " + dir.file("no-such-dir"));
  // The target is a non-empty directory: the rename fails, the temp file goes.
  const std::string target = dir.file("occupied");
  std::filesystem::create_directories(target + "/inside");
  expect_invalid([&] { dds.checkpoint(target); }, "rename");
  EXPECT_FALSE(std::filesystem::exists(target + ".tmp"));
  EXPECT_TRUE(std::filesystem::is_directory(target + "/inside"));
}

TEST(DdsCheckpoint, MalformedFilesAreRefusedWithTheReason) {
  TempDir dir;
  const std::string path = dir.file("dds.json");
  Dds dds(Dataset::samples(50), small_options(2, 10));
  const Batch a = dds.fetch(0, 4);
  dds.checkpoint(path);
  const std::string good = read_text(path);
  const std::string before = dds.serialize();
  const std::string bad = dir.file("bad.json");

  expect_invalid([&] { Dds::load(dir.file("missing.json")); }, "cannot open");
  write_text(bad, good.substr(0, good.size() / 2));
  expect_invalid([&] { Dds::load(bad); }, "not valid JSON");
  write_text(bad, "[1,2,3]");
  expect_invalid([&] { Dds::load(bad); }, "top level is not an object");

  // An edited value without a new checksum.
  nlohmann::json doc = nlohmann::json::parse(good);
  doc["state"]["committed"] = 3;
  write_text(bad, doc.dump());
  expect_invalid([&] { Dds::load(bad); }, "checksum mismatch");

  // Consistent checksums, broken content: each names the field.
  const auto check = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    nlohmann::json d = nlohmann::json::parse(good);
    edit(d);
    d["checksum"] = checksum_of(d);
    write_text(bad, d.dump());
    expect_invalid([&] { Dds::load(bad); }, needle);
    expect_invalid([&] { dds.restore(bad); }, needle);
  };
  check([](auto& d) { d["version"] = 2; }, "version 2 is not supported");
  check([](auto& d) { d["format"] = "something"; }, "format is not");
  check([](auto& d) { d["state"].erase("fresh"); }, "missing field state.fresh");
  check([](auto& d) { d["state"]["epoch"] = "one"; }, "state.epoch is not an unsigned integer");
  check([](auto& d) { d["state"]["shards"][0]["cursor"] = 11; }, "state.shards[0]: range");
  check([](auto& d) { d["state"]["shards"][0]["state"] = "maybe"; }, "state.shards[0].state");
  check([](auto& d) { d["state"]["shards"][0]["owner"] = 5; }, "state.shards[0].owner");
  check([](auto& d) { d["state"]["leases"][0]["pieces"][0]["end"] = 9; }, "state.leases[0].pieces[0]");
  check([](auto& d) { d["state"]["committed"] = 3; }, "sample accounting does not add up");
  check([](auto& d) { d["state"]["active"] = nlohmann::json::array({-1}); }, "state.active has 1 entries");
  check([](auto& d) { d["state"]["active"] = nlohmann::json::array({-1, -1}); },
        "DOING shard 0 has samples left but is not rank 0's active shard");
  check([](auto& d) { d["state"]["queued"] = nlohmann::json::array({0}); }, "state.queued names shard 0");
  check([](auto& d) { d["options"]["shuffle"] = "random"; }, "none|samples|blocks");
  check([](auto& d) { d["dataset"] = {{"samples", 0}}; }, "sample count");
  // A failed restore leaves the object as it was.
  EXPECT_EQ(dds.serialize(), before);
  EXPECT_TRUE(dds.commit(a.lease));
}

// ---------------------------------------------------------------------------
// The invariant: every sample committed exactly once per epoch
// ---------------------------------------------------------------------------

struct OpenLease {
  std::uint64_t id;
  int rank;
  std::vector<std::uint64_t> samples;
};

// Independent bookkeeping of the test: which ids are out on a lease and which
// were committed in the current epoch.
class Ledger {
 public:
  explicit Ledger(std::uint64_t n) : n_(n), committed_(n, false), out_(n, false) {}

  void fetched(const Batch& b) {
    ASSERT_EQ(b.epoch, epoch_);
    for (const std::uint64_t id : b.samples) {
      ASSERT_LT(id, n_);
      ASSERT_FALSE(committed_[id]) << "sample " << id << " handed out again after its commit in epoch " << epoch_;
      ASSERT_FALSE(out_[id]) << "sample " << id << " on two open leases at once";
      out_[id] = true;
    }
  }
  void returned(const OpenLease& l) {
    for (const std::uint64_t id : l.samples) out_[id] = false;
  }
  void committed(const OpenLease& l) {
    for (const std::uint64_t id : l.samples) {
      ASSERT_FALSE(committed_[id]) << "sample " << id << " committed twice in epoch " << epoch_;
      committed_[id] = true;
      out_[id] = false;
      ++count_;
    }
  }
  // The Dds moved on: the finished epoch must have every sample exactly once.
  void check_epoch(std::uint32_t dds_epoch) {
    if (dds_epoch == epoch_) return;
    ASSERT_EQ(dds_epoch, epoch_ + 1);
    ASSERT_EQ(count_, n_) << "epoch " << epoch_ << " ended with " << count_ << " of " << n_ << " samples";
    ASSERT_TRUE(std::all_of(committed_.begin(), committed_.end(), [](bool b) { return b; }));
    std::fill(committed_.begin(), committed_.end(), false);
    count_ = 0;
    ++epoch_;
  }
  std::uint64_t count() const { return count_; }
  std::uint32_t epoch() const { return epoch_; }

 private:
  std::uint64_t n_;
  std::vector<bool> committed_, out_;
  std::uint64_t count_ = 0;
  std::uint32_t epoch_ = 0;
};

struct SimStats {
  std::uint64_t resplits = 0, failures = 0, give_backs = 0, restores = 0, stolen = 0;
  std::vector<std::uint64_t> shards_taken;
};

// 8 ranks of speeds 1..8 (rank r acts with probability ∝ r + 1), each with up
// to two open leases (a step in flight and a deferred one); a controller that
// resplits the slow rank and kills ranks now and then; a checkpoint + restore
// into a new Dds in the middle of epoch 1.
SimStats simulate(std::uint64_t seed, const std::string& checkpoint_path, ShuffleMode shuffle,
                  std::uint64_t steal_min) {
  constexpr int kRanks = 8;
  constexpr std::uint64_t kSamples = 3001;
  constexpr std::uint32_t kEpochs = 3;
  DdsOptions opt;
  opt.world_size = kRanks;
  opt.shard_size = 37;
  opt.seed = seed;
  opt.shuffle = shuffle;
  opt.epochs = kEpochs;
  opt.steal_min = steal_min;
  auto dds = std::make_unique<Dds>(Dataset::samples(kSamples), opt);
  Rng rng(seed * 1000003 + 17);
  Ledger ledger(kSamples);
  std::vector<std::vector<OpenLease>> open(kRanks);
  std::vector<std::uint64_t> revoked;
  SimStats stats;
  bool restored = false;
  const auto all_open = [&] {
    std::vector<std::uint64_t> ids;
    for (const auto& leases : open)
      for (const auto& l : leases) ids.push_back(l.id);
    return ids;
  };
  constexpr int kTotalSpeed = kRanks * (kRanks + 1) / 2;
  for (std::uint64_t tick = 0;; ++tick) {
    if (tick > 2'000'000) {
      ADD_FAILURE() << "the simulation did not finish (seed " << seed << ")";
      return stats;
    }
    if (dds->progress().finished) break;
    // Pick a rank with probability proportional to its speed.
    auto draw = static_cast<int>(rng.below(kTotalSpeed));
    int rank = 0;
    while (draw >= rank + 1) draw -= ++rank;
    auto& mine = open[static_cast<std::size_t>(rank)];
    if (mine.size() < 2 && (mine.empty() || rng.chance(0.5))) {
      const Batch b = dds->fetch(rank, 1 + rng.below(40));
      if (b.status == FetchStatus::ok) {
        ledger.fetched(b);
        if (testing::Test::HasFatalFailure()) return stats;
        mine.push_back({b.lease, rank, b.samples});
      } else if (b.status == FetchStatus::finished) {
        ADD_FAILURE() << "finished while progress() said not finished";
        return stats;
      }
    } else if (!mine.empty()) {
      const OpenLease l = mine.front();
      mine.erase(mine.begin());
      if (rng.chance(0.8)) {  // included or deferred
        if (!dds->commit(l.id)) {
          ADD_FAILURE() << "commit of open lease " << l.id << " refused";
          return stats;
        }
        ledger.committed(l);
      } else {  // dropped
        if (!dds->give_back(l.id)) {
          ADD_FAILURE() << "give_back of open lease " << l.id << " refused";
          return stats;
        }
        ledger.returned(l);
        ++stats.give_backs;
      }
      if (testing::Test::HasFatalFailure()) return stats;
      ledger.check_epoch(dds->epoch());
      if (testing::Test::HasFatalFailure()) return stats;
    }
    // The controller.
    if (rng.chance(0.02)) stats.resplits += dds->resplit(0, rng.below(6)) > 0 ? 1 : 0;
    if (rng.chance(0.003)) {
      const auto victim = static_cast<int>(rng.below(kRanks));
      dds->rank_failed(victim);
      for (const auto& l : open[static_cast<std::size_t>(victim)]) {
        ledger.returned(l);
        revoked.push_back(l.id);
      }
      open[static_cast<std::size_t>(victim)].clear();
      ++stats.failures;
    }
    // The coordinator restarts once, in the middle of epoch 1.
    if (!restored && ledger.epoch() == 1 && ledger.count() > kSamples / 2) {
      restored = true;
      dds->checkpoint(checkpoint_path);
      auto next = Dds::load(checkpoint_path);
      const auto ids = all_open();
      give_back_all(*dds, ids);
      if (next->serialize() != dds->serialize()) {
        ADD_FAILURE() << "restored state differs from the state with every open lease given back";
        return stats;
      }
      dds = std::move(next);
      for (auto& leases : open) {
        for (const auto& l : leases) {
          ledger.returned(l);
          revoked.push_back(l.id);
        }
        leases.clear();
      }
      ++stats.restores;
    }
  }
  // Revoked leases stay revoked: no late commit counts.
  for (const auto id : revoked) EXPECT_FALSE(dds->commit(id)) << "revoked lease " << id;
  EXPECT_EQ(ledger.epoch(), kEpochs);  // check_epoch verified each of the kEpochs epochs
  const DdsProgress p = dds->progress();
  EXPECT_TRUE(p.finished);
  EXPECT_EQ(p.epoch, kEpochs);
  EXPECT_EQ(p.epochs_completed, kEpochs);
  EXPECT_EQ(p.total_committed, kSamples * kEpochs);
  stats.shards_taken = dds->shards_taken();
  stats.stolen = p.stolen_samples;
  return stats;
}

TEST(DdsInvariant, EverySampleOnceUnderRandomInterleavingsAndARestart) {
  TempDir dir;
  for (const std::uint64_t seed : {1ull, 2ull, 3ull, 4ull, 5ull, 6ull}) {
    const ShuffleMode shuffle = seed % 3 == 0 ? ShuffleMode::blocks : ShuffleMode::samples;
    const std::uint64_t steal_min = seed % 2 == 0 ? 3 : 0;
    SCOPED_TRACE(testing::Message() << "seed " << seed << " shuffle " << to_string(shuffle) << " steal_min "
                                    << steal_min);
    const SimStats s = simulate(seed, dir.file("dds-" + std::to_string(seed) + ".json"), shuffle, steal_min);
    if (HasFailure()) return;
    // The run exercised what it claims to.
    EXPECT_EQ(s.restores, 1u);
    EXPECT_GT(s.resplits, 0u);
    EXPECT_GT(s.failures, 0u);
    EXPECT_GT(s.give_backs, 0u);
    if (steal_min > 0) {
      EXPECT_GT(s.stolen, 0u);
    } else {
      EXPECT_EQ(s.stolen, 0u);
    }
    ASSERT_EQ(s.shards_taken.size(), 8u);
    EXPECT_GT(s.shards_taken[7], s.shards_taken[0]);  // speed 8 against speed 1
  }
}

TEST(DdsInvariant, EightThreadsConsumeEachSampleOncePerEpoch) {
  constexpr int kRanks = 8;
  constexpr std::uint64_t kSamples = 5000;
  constexpr std::uint32_t kEpochs = 2;
  DdsOptions opt;
  opt.world_size = kRanks;
  opt.shard_size = 50;
  opt.seed = 99;
  opt.epochs = kEpochs;
  opt.steal_min = 2;
  Dds dds(Dataset::samples(kSamples), opt);
  std::vector<std::vector<std::uint32_t>> counts(kEpochs, std::vector<std::uint32_t>(kSamples, 0));
  std::mutex counts_mutex;
  std::atomic<bool> timed_out{false};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      Rng rng(1234 + static_cast<std::uint64_t>(rank));
      for (;;) {
        if (std::chrono::steady_clock::now() > deadline) {
          timed_out = true;
          return;
        }
        const Batch b = dds.fetch(rank, 1 + rng.below(16));
        if (b.status == FetchStatus::finished) return;
        if (b.status == FetchStatus::wait) {
          std::this_thread::yield();
          continue;
        }
        if (rank == 0 && rng.chance(0.1)) dds.resplit(0);
        if (rng.chance(0.15)) {
          dds.give_back(b.lease);
          continue;
        }
        // Count before committing: the commit may end the epoch.
        {
          std::lock_guard lock(counts_mutex);
          for (const std::uint64_t id : b.samples) ++counts[b.epoch][id];
        }
        if (!dds.commit(b.lease)) {
          std::lock_guard lock(counts_mutex);
          for (const std::uint64_t id : b.samples) --counts[b.epoch][id];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(timed_out) << "threads did not finish within 60 s";
  for (std::uint32_t e = 0; e < kEpochs; ++e)
    for (std::uint64_t id = 0; id < kSamples; ++id) ASSERT_EQ(counts[e][id], 1u) << "epoch " << e << " sample " << id;
  EXPECT_EQ(dds.progress().total_committed, kSamples * kEpochs);
}

}  // namespace
}  // namespace antdt::sched
