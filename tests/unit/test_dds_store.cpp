// The DDS state in SQLite (scheduler/dds_store_sqlite.hpp, docs/dds.md
// "Durable state"): the rows a Dds reports as changed rebuild exactly its
// state; a writer SIGKILLed mid-stream loses no acknowledged commit and the
// job finished from the database serves nothing twice and loses nothing; the
// coordinator answers a settle sent again after a crash as the first time and
// keeps the ranks lost for good lost;
// a second writer on the same database and an unwritable path are refused.
#include "core/error.hpp"
#include "scheduler/coordinator/service.hpp"
#include "scheduler/dds.hpp"
#include "scheduler/dds_checkpoint.hpp"
#include "scheduler/dds_store_sqlite.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace antdt::sched {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "antdt-store-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write(DdsStore& store, Dds& dds) { store.write(dds.dataset(), dds.options(), dds.take_changes(), CoordinatorRows{}); }

std::string stored_text(DdsStore& store) {
  auto stored = store.load();
  if (!stored) return "(empty)";
  return checkpoint_text(stored->dds.dataset, stored->dds.options, stored->dds.state);
}

// Random operations of 6 ranks over two epochs; after each batch of 1..4
// operations the changes go to the store, and what it reads back is the Dds's
// state, byte for byte in checkpoint form.
TEST(DdsStore, ChangedRowsRebuildTheState) {
  for (const std::uint64_t steal : {0ull, 3ull}) {
    TempDir dir;
    auto store = open_sqlite_store(dir.file("dds.db"), SqliteSync::normal);
    EXPECT_FALSE(store->load().has_value());
    DdsOptions o;
    o.world_size = 6;
    o.shard_size = 16;
    o.seed = 5;
    o.epochs = 2;
    o.steal_min = steal;
    Dds dds(Dataset::samples(500), o);
    std::mt19937_64 random(42 + steal);
    std::vector<std::pair<int, std::uint64_t>> open;
    int ops = 0;
    while (!dds.progress().finished && ops < 20000) {
      const int batch = 1 + static_cast<int>(random() % 4);
      for (int i = 0; i < batch; ++i, ++ops) {
        const auto pick = random() % 100;
        const int rank = static_cast<int>(random() % 6);
        if (pick < 45 || open.empty()) {
          Batch b = dds.fetch(rank, 1 + random() % 12);
          if (b.lease != 0) open.emplace_back(rank, b.lease);
        } else if (pick < 85) {
          const auto at = random() % open.size();
          EXPECT_TRUE(dds.commit(open[at].second));
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(at));
        } else if (pick < 93) {
          const auto at = random() % open.size();
          EXPECT_TRUE(dds.give_back(open[at].second));
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(at));
        } else if (pick < 97) {
          dds.resplit(rank, random() % 3);
        } else {
          dds.rank_failed(rank);
          std::erase_if(open, [&](const auto& l) { return l.first == rank; });
        }
      }
      write(*store, dds);
      ASSERT_EQ(stored_text(*store), dds.serialize()) << "after " << ops << " operations (steal_min " << steal << ")";
    }
    EXPECT_TRUE(dds.progress().finished);
  }
}

// The positions of the stored epoch that are committed: cut, not in a live
// shard's unhanded range, not in an open lease.
std::set<std::uint64_t> committed_samples(const DdsCheckpoint& c, const Dds& order) {
  std::set<std::uint64_t> out;
  std::vector<bool> pending(c.state.fresh, false);
  for (const auto& [id, shard] : c.state.shards)
    for (std::uint64_t p = shard.cursor; p < shard.end; ++p) pending[p] = true;
  for (const auto& [id, lease] : c.state.leases)
    for (const auto& piece : lease.pieces)
      for (std::uint64_t p = piece.begin; p < piece.end; ++p) pending[p] = true;
  for (std::uint64_t p = 0; p < c.state.fresh; ++p)
    if (!pending[p]) out.insert(order.sample_at(c.state.epoch, p));
  return out;
}

// A child process commits batches as fast as it can, one transaction each
// (synchronous = FULL), and acknowledges each batch's ids on a pipe only after
// the write returned; it is SIGKILLed mid-stream. Reopened: every acknowledged
// id is committed; the job finished from the database hands out exactly the
// ids not committed yet, each once.
TEST(DdsStore, SigkillMidStreamLosesAndRepeatsNothing) {
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    const std::string path = dir.file("dds.db");
    const std::uint64_t n = 200000;
    DdsOptions o;
    o.world_size = 4;
    o.shard_size = 64;
    o.seed = 3 + static_cast<std::uint64_t>(round);
    o.epochs = 1;
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      try {
        auto store = open_sqlite_store(path, SqliteSync::full);
        Dds dds(Dataset::samples(n), o);
        write(*store, dds);
        std::uint64_t open_lease = 0;
        for (int step = 0;; ++step) {
          const int rank = step % 4;
          Batch b = dds.fetch(rank, 7);
          if (b.lease == 0) break;
          // One lease stays open across each write: open leases must come back, not count.
          if (open_lease != 0) dds.commit(open_lease);
          open_lease = 0;
          if (step % 3 == 0) {
            open_lease = b.lease;
            write(*store, dds);
            continue;
          }
          dds.commit(b.lease);
          write(*store, dds);
          for (const std::uint64_t id : b.samples)
            if (::write(fds[1], &id, sizeof id) != sizeof id) ::_exit(3);
        }
      } catch (...) {
        ::_exit(2);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    std::vector<std::uint64_t> acked;
    const std::size_t kill_after = 2000 + 1500 * static_cast<std::size_t>(round);
    std::uint64_t id = 0;
    while (acked.size() < kill_after && ::read(fds[0], &id, sizeof id) == sizeof id) acked.push_back(id);
    ::kill(child, SIGKILL);
    while (::read(fds[0], &id, sizeof id) == sizeof id) acked.push_back(id);  // written before the kill
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer ended before it was killed (status " << status << ")";
    ASSERT_GE(acked.size(), kill_after);

    auto store = open_sqlite_store(path, SqliteSync::full);
    auto stored = store->load();
    ASSERT_TRUE(stored.has_value());
    Dds order(Dataset::samples(n), o);
    const std::set<std::uint64_t> committed = committed_samples(stored->dds, order);
    std::size_t missing = 0;
    for (const std::uint64_t a : acked) missing += committed.count(a) == 0 ? 1 : 0;
    EXPECT_EQ(missing, 0u) << "acknowledged ids not in the database (round " << round << ")";
    EXPECT_EQ(committed.size(), stored->dds.state.committed);

    auto resumed = Dds::resume(std::move(stored->dds));
    std::vector<int> count(n, 0);
    for (const std::uint64_t c : committed) ++count[c];
    for (int step = 0; !resumed->progress().finished; ++step) {
      Batch b = resumed->fetch(step % 4, 500);
      ASSERT_NE(b.lease, 0u);
      for (const std::uint64_t s : b.samples) ++count[s];
      ASSERT_TRUE(resumed->commit(b.lease));
    }
    std::size_t wrong = 0;
    for (const int c : count) wrong += c != 1 ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "ids served twice or never (round " << round << ")";
  }
}

TEST(DdsStore, ASecondWriterIsRefused) {
  TempDir dir;
  auto first = open_sqlite_store(dir.file("dds.db"));
  try {
    open_sqlite_store(dir.file("dds.db"));
    FAIL() << "a second store opened the same database";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("locked"), std::string::npos) << e.what();
  }
}

TEST(DdsStore, NotADatabaseIsAConfigError) {
  TempDir dir;
  { std::ofstream(dir.file("junk.db")) << "this is no SQLite database, only some text long enough to have a header.......\n"; }
  EXPECT_THROW(open_sqlite_store(dir.file("junk.db")), ConfigError);
}

// The coordinator over a database: a process that commits and then dies
// without any cleanup (_exit: no destructor, like kill -9); the next one on
// the same database has the commit, gives the open lease back, and answers
// the resent commit as the first time.
// A bsp job of `world` ranks over `samples` samples in shards of 10, one
// epoch, `world * 5` samples per step, its state in `database`.
coord::CoordinatorOptions job_with_database(int world, std::uint64_t samples, const std::string& database) {
  coord::CoordinatorOptions o;
  o.world_size = world;
  o.dataset_size = samples;
  o.dds.shard_size = 10;
  o.dds.epochs = 1;
  o.global_batch = 5 * static_cast<std::uint64_t>(world);
  o.policy = "bsp";
  o.database_path = database;
  return o;
}

// Runs `body` on a coordinator in a child process that then dies without
// any cleanup (_exit: no destructor, like kill -9) after a sync. The child's
// exit status: 0, 2 (an exception), 4 (`body` said its checks failed).
int coordinator_then_crash(const coord::CoordinatorOptions& o, const std::function<bool(coord::Coordinator&)>& body) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    try {
      auto* c = new coord::Coordinator(o);  // never destroyed: the process dies as if killed
      if (!body(*c)) ::_exit(4);
      c->sync();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(DdsStore, CoordinatorResumesAndAnswersAResentCommit) {
  TempDir dir;
  const coord::CoordinatorOptions o = job_with_database(2, 100, dir.file("coordinator.db"));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    try {
      auto* c = new coord::Coordinator(o);  // never destroyed: the process dies as if killed
      c->hello(0, 0, 0);
      const auto first = c->fetch(0, 5);
      const bool ok = c->commit(0, first.lease);
      const auto second = c->fetch(0, 5);
      c->sync();
      const std::uint64_t out[3] = {first.lease, ok ? 1u : 0u, second.lease};
      if (::write(fds[1], out, sizeof out) != sizeof out) ::_exit(3);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::uint64_t got[3] = {0, 0, 0};
  ASSERT_EQ(::read(fds[0], got, sizeof got), static_cast<ssize_t>(sizeof got));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(got[1], 1u);

  coord::Coordinator c(o);
  EXPECT_EQ(c.progress().total_committed, 5u);
  EXPECT_EQ(c.progress().open_leases, 0u);  // the second lease went back
  EXPECT_EQ(c.progress().given_back_samples, 5u);
  ASSERT_TRUE(c.hello(0, 0, 0, true).accepted);
  EXPECT_TRUE(c.commit(0, got[0]));    // sent again: the first answer
  EXPECT_FALSE(c.give_back(0, got[0]));  // not what was settled
  EXPECT_FALSE(c.commit(1, got[0]));   // not this rank's
  EXPECT_FALSE(c.commit(0, got[2]));   // returned at the restart: served again, not committed
  EXPECT_EQ(c.progress().total_committed, 5u);
}

// A rank lost for good (no restarts left) stays lost across a kill -9 of the
// coordinator: the restarted one does not count it as a member of the next
// generation (the survivors would wait for it until ANTDT_TIMEOUT_MS) and
// spreads its share of the global batch over the survivors (Σb = B).
TEST(DdsStore, ARankLostForGoodStaysLostAcrossACoordinatorCrash) {
  TempDir dir;
  coord::CoordinatorOptions o = job_with_database(3, 300, dir.file("coordinator.db"));
  o.global_batch = 30;
  o.max_restarts = 0;
  ASSERT_EQ(coordinator_then_crash(o, [](coord::Coordinator& c) {
              for (int r = 0; r < 3; ++r) c.hello(r, 0, 0);
              for (int r = 0; r < 3; ++r) c.plan(r, 1);
              c.lost(1);
              return c.plan(0, 2).generation == 1 && c.members(1) == std::vector<std::uint32_t>{0, 2};
            }),
            0);

  coord::Coordinator c(o);
  ASSERT_TRUE(c.hello(0, 0, 1, true).accepted);
  ASSERT_TRUE(c.hello(2, 0, 1, true).accepted);
  EXPECT_FALSE(c.hello(1, 0, 1, true).accepted) << "the lost process is not let back in";
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(c.plan(0, 3).plan.local_batch + c.plan(2, 3).plan.local_batch, 30u);
  EXPECT_EQ(c.plan(1, 3).plan.local_batch, 0u);
  // A new incarnation (a launcher restarted it after all) comes back, and that
  // is recorded too: the next coordinator process counts it as a member again.
  ASSERT_TRUE(c.hello(1, 1, 1).accepted);
  c.sync();
}

TEST(DdsStore, ALostRankThatCameBackIsAMemberAgainAfterACrash) {
  TempDir dir;
  const coord::CoordinatorOptions o = job_with_database(2, 100, dir.file("coordinator.db"));
  {
    coord::Coordinator c(o);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(c.hello(r, 0, 0).accepted);
    c.plan(0, 1);
    c.plan(1, 1);
    c.lost(1);
    c.sync();
    ASSERT_EQ(c.plan(0, 2).generation, 1u);
    ASSERT_TRUE(c.hello(1, 1, 1).accepted);  // restarted by its launcher after all
    c.sync();
  }
  coord::Coordinator c(o);
  ASSERT_TRUE(c.hello(0, 0, 1, true).accepted);
  ASSERT_TRUE(c.hello(1, 1, 2, true).accepted) << "its lost row went: it is let back in";
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0})) << "generation 1 was planned without it";
  EXPECT_EQ(c.plan(0, 3).generation, 2u);
  EXPECT_EQ(c.members(2), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(c.plan(1, 3).plan.local_batch, 5u);
}

// The plans handed out ("frozen" steps) and the generations planned go to
// the store with the DDS rows; pruned steps leave it; what load() returns is
// what was written.
TEST(DdsStore, FrozenStepsAndGenerationsRoundTrip) {
  TempDir dir;
  auto store = open_sqlite_store(dir.file("dds.db"));
  Dds dds(Dataset::samples(100), DdsOptions{.world_size = 3, .shard_size = 10});
  write(*store, dds);
  const std::vector<FrozenStep> frozen = {{1, 0, false, {}}, {2, 0, false, {}}, {3, 1, false, {{1, 0}, {2, 4}}},
                                          {4, 1, true, {}}};
  const std::vector<GenerationRecord> generations = {{1, 3, {2, 0, 1}}};
  store->write(dds.dataset(), dds.options(), dds.take_changes(), CoordinatorRows{{}, {}, frozen, generations, 0});
  auto stored = store->load();
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->frozen, frozen);
  EXPECT_EQ(stored->generations, generations);
  // Steps below 3 are no longer kept; generation 1's members change.
  const std::vector<GenerationRecord> again = {{1, 3, {0, 2}}};
  store->write(dds.dataset(), dds.options(), dds.take_changes(), CoordinatorRows{{}, {}, {}, again, 3});
  stored = store->load();
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->frozen, std::vector<FrozenStep>(frozen.begin() + 2, frozen.end()));
  EXPECT_EQ(stored->generations, again);
  EXPECT_FALSE(stored->offered);
  // The newest offered id replaces the one before.
  OfferedId first{1, {}}, second{2, {}};
  first.id.bytes.fill(std::byte{0x11});
  for (std::size_t i = 0; i < second.id.bytes.size(); ++i) second.id.bytes[i] = static_cast<std::byte>(i);
  for (const OfferedId& o : {first, second}) {
    CoordinatorRows rows;
    rows.offered = o;
    store->write(dds.dataset(), dds.options(), dds.take_changes(), rows);
  }
  stored = store->load();
  ASSERT_TRUE(stored && stored->offered);
  EXPECT_EQ(*stored->offered, second);
  // It holds bootstrap secrets: owner-only.
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("dds.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// The coordinator killed between the first member's offer of a generation's
// id and the other members' fetch: the restarted one has the id (before, the
// others waited ANTDT_TIMEOUT_MS for it and the generation failed).
TEST(DdsStore, AnOfferedIdSurvivesACoordinatorCrash) {
  TempDir dir;
  const coord::CoordinatorOptions o = job_with_database(3, 300, dir.file("coordinator.db"));
  UniqueId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::byte>(0xA0 ^ i);
  ASSERT_EQ(coordinator_then_crash(o, [&](coord::Coordinator& c) {
              for (int r = 0; r < 3; ++r) c.hello(r, 0, 0);
              c.offer_id(0, 0, id);
              return true;
            }),
            0);
  coord::Coordinator c(o);
  ASSERT_TRUE(c.hello(2, 0, 0, true).accepted);
  const coord::GenerationId got = c.join(2, 0);
  ASSERT_TRUE(got.ready);
  EXPECT_EQ(got.id.bytes, id.bytes);
  EXPECT_EQ(got.members, (std::vector<std::uint32_t>{0, 1, 2}));
}

// A coordinator killed while its ranks are a step apart (partial steps let
// the fast ones run ahead): the restarted one gives the slower rank the plan
// the others got for that step (same generation), keeps the restart order
// and the generation it started, and moves the job to a new generation after
// the last step planned, not at step 1. Before the plans were stored, it
// planned from scratch: the slower rank's plans disagreed with the others'
// generation, or were refused ("no longer kept").
TEST(DdsStore, PlansHandedOutSurviveACoordinatorCrash) {
  TempDir dir;
  coord::CoordinatorOptions o = job_with_database(3, 300, dir.file("coordinator.db"));
  o.max_restarts = 2;
  ASSERT_EQ(coordinator_then_crash(o, [](coord::Coordinator& c) {
              for (int r = 0; r < 3; ++r) c.hello(r, 0, 0);
              for (std::uint64_t step = 1; step <= 3; ++step)
                for (int r = 0; r < 3; ++r) {
                  c.plan(r, step);
                  if (r < 2 || step < 3) c.report(r, coord::Report{.step = step});  // rank 2 is still in step 3
                }
              c.request_restart(1);
              const auto p0 = c.plan(0, 4);
              const auto p1 = c.plan(1, 4);
              return p0.generation == 1 && !p0.plan.restart && p1.plan.restart;
            }),
            0);

  coord::Coordinator c(o);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(c.hello(r, 0, 0, true).accepted);
  EXPECT_EQ(c.plan(2, 3).generation, 0u);
  const auto p2 = c.plan(2, 4);
  EXPECT_EQ(p2.generation, 1u) << "the slower rank gets the generation the others got for step 4";
  EXPECT_FALSE(p2.plan.restart);
  EXPECT_TRUE(c.plan(1, 4).plan.restart) << "the restart order of step 4 holds";
  EXPECT_EQ(c.members(1), (std::vector<std::uint32_t>{0, 1, 2}));
  // Rank 1 restarts as ordered: it rejoins generation 1 at its first step.
  c.bye(1, true);
  const coord::Welcome back = c.hello(1, 1, 0);
  ASSERT_TRUE(back.accepted) << back.reason;
  EXPECT_EQ(back.generation, 1u);
  EXPECT_EQ(back.resume_step, 4u);
  // A communicator failure now moves the job on after the last step planned.
  c.comm_failed(0, 1, 4, {});
  EXPECT_EQ(c.plan(0, 5).generation, 2u);
  EXPECT_EQ(c.plan(2, 5).generation, 2u);
}

TEST(DdsStore, UnwritableDatabaseIsAStartupError) {
  coord::CoordinatorOptions o;
  o.world_size = 1;
  o.dataset_size = 10;
  o.policy = "bsp";
  o.database_path = "/nonexistent/dir/coordinator.db";
  try {
    coord::Coordinator c(o);
    FAIL() << "accepted a database in a missing directory";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ANTDT_COORDINATOR_DB"), std::string::npos) << e.what();
  }
}

TEST(DdsStore, CompletionAndGraceClock) {
  coord::CoordinatorOptions o;
  o.world_size = 2;
  o.dataset_size = 4;
  o.dds.shard_size = 2;
  o.dds.epochs = 1;
  o.policy = "bsp";
  o.max_restarts = 1;  // a lost rank is expected back (else it is lost for good and the job goes on without it)
  coord::Coordinator c(o);
  EXPECT_FALSE(c.all_gone_for().has_value());  // nobody came yet: no clock
  ASSERT_TRUE(c.hello(0, 0, 0).accepted);
  ASSERT_TRUE(c.hello(1, 0, 0).accepted);
  c.lost(1);
  EXPECT_FALSE(c.all_gone_for().has_value());  // rank 0 is still there
  const auto b = c.fetch(0, 4);
  ASSERT_TRUE(c.commit(0, b.lease));
  c.bye(0, false);
  ASSERT_TRUE(c.all_gone_for().has_value());   // rank 1 never said bye: the job is not over
  EXPECT_FALSE(c.job_complete());
  ASSERT_TRUE(c.hello(1, 0, 0, true).accepted);
  EXPECT_FALSE(c.all_gone_for().has_value());
  c.bye(1, false);
  EXPECT_TRUE(c.job_complete());               // data consumed, every rank said bye
}

}  // namespace
}  // namespace antdt::sched
