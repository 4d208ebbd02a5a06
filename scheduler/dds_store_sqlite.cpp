// The DDS store in SQLite (scheduler/dds_store_sqlite.hpp, docs/dds.md "Durable state").
//
// 64-bit unsigned values are stored as SQLite's signed 64-bit integers with the
// same bits (ids, positions and counters never reach 2^63; seeds may, and
// come back unchanged). The database is opened in exclusive locking mode: a
// second coordinator on the same file is refused at once instead of the two
// overwriting each other's state; the lock goes with the process (kill -9 too).
#include "scheduler/dds_store_sqlite.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace antdt::sched {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS job (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  samples INTEGER NOT NULL, world_size INTEGER NOT NULL, shard_size INTEGER NOT NULL, seed INTEGER NOT NULL,
  shuffle TEXT NOT NULL, epochs INTEGER NOT NULL, steal_min INTEGER NOT NULL,
  epoch INTEGER NOT NULL, finished INTEGER NOT NULL, fresh INTEGER NOT NULL, next_shard_id INTEGER NOT NULL,
  next_lease_id INTEGER NOT NULL, committed INTEGER NOT NULL, done_shards INTEGER NOT NULL,
  epochs_completed INTEGER NOT NULL, total_committed INTEGER NOT NULL, given_back INTEGER NOT NULL,
  resplit INTEGER NOT NULL, rank_failures INTEGER NOT NULL, stolen INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS files (idx INTEGER PRIMARY KEY, name TEXT NOT NULL, records INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS shards (id INTEGER PRIMARY KEY, first INTEGER NOT NULL, last INTEGER NOT NULL,
  cursor INTEGER NOT NULL, owner INTEGER NOT NULL, state INTEGER NOT NULL, attempts INTEGER NOT NULL,
  pending INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS queue (pos INTEGER PRIMARY KEY, shard INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ranks (rank INTEGER PRIMARY KEY, active INTEGER NOT NULL, shards_taken INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY, rank INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pieces (lease INTEGER NOT NULL, idx INTEGER NOT NULL, shard INTEGER NOT NULL,
  first INTEGER NOT NULL, last INTEGER NOT NULL, PRIMARY KEY (lease, idx));
CREATE TABLE IF NOT EXISTS settled (rank INTEGER PRIMARY KEY, lease INTEGER NOT NULL, is_commit INTEGER NOT NULL,
  ok INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lost_ranks (rank INTEGER PRIMARY KEY, incarnation INTEGER NOT NULL,
  generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS frozen_steps (step INTEGER PRIMARY KEY, generation INTEGER NOT NULL, stop INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS frozen_restarts (step INTEGER NOT NULL, rank INTEGER NOT NULL,
  incarnation INTEGER NOT NULL, PRIMARY KEY (step, rank));
CREATE TABLE IF NOT EXISTS generations (generation INTEGER PRIMARY KEY, start INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS generation_members (generation INTEGER NOT NULL, idx INTEGER NOT NULL,
  rank INTEGER NOT NULL, PRIMARY KEY (generation, idx));
CREATE TABLE IF NOT EXISTS offered_id (id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL,
  bytes BLOB NOT NULL);
)sql";

std::int64_t s64(std::uint64_t v) noexcept { return static_cast<std::int64_t>(v); }
std::uint64_t u64(sqlite3_stmt* st, int col) noexcept {
  return static_cast<std::uint64_t>(sqlite3_column_int64(st, col));
}

// One prepared statement, finalized with its owner.
class Statement {
 public:
  Statement() = default;
  explicit Statement(sqlite3_stmt* prepared) noexcept : st_(prepared) {}
  Statement(sqlite3* db, const char* sql, const std::string& where) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
      raise<InternalError>(where, ": cannot prepare '", sql, "': ", sqlite3_errmsg(db));
  }
  Statement(Statement&& o) noexcept : st_(std::exchange(o.st_, nullptr)) {}
  Statement& operator=(Statement&& o) noexcept {
    std::swap(st_, o.st_);
    return *this;
  }
  ~Statement() { sqlite3_finalize(st_); }
  sqlite3_stmt* get() const noexcept { return st_; }

 private:
  sqlite3_stmt* st_ = nullptr;
};

class SqliteDdsStore final : public DdsStore {
 public:
  SqliteDdsStore(const std::string& path, SqliteSync sync) : path_(path), where_("SQLite database " + path) {
    const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                   nullptr);
    if (rc != SQLITE_OK) {
      const std::string why = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close(db_);
      raise<ConfigError>("cannot open the ", where_, ": ", why);
    }
    // It holds the bootstrap ids (root address and secret) of the job's
    // generations: owner-only, like a key file (SQLite gives its -wal and
    // -shm files the same mode).
    if (::chmod(path.c_str(), S_IRUSR | S_IWUSR) != 0)
      ANTDT_WARN("cannot make the ", where_, " owner-only (", std::strerror(errno), "): it holds bootstrap ids");
    try {
      exec_config("PRAGMA locking_mode = EXCLUSIVE");
      // The journal mode is persistent in the file; the answer says whether WAL is in force.
      {
        // The first statement that reads the file: a file that is no database,
        // or one another coordinator holds (locked), fails here: the path's fault.
        sqlite3_stmt* raw = nullptr;
        if (sqlite3_prepare_v2(db_, "PRAGMA journal_mode = WAL", -1, &raw, nullptr) != SQLITE_OK) {
          sqlite3_finalize(raw);
          raise<ConfigError>("cannot use the ", where_, ": ", sqlite3_errmsg(db_));
        }
        Statement mode(raw);  // finalized before the transaction below
        if (sqlite3_step(mode.get()) != SQLITE_ROW ||
            std::string(reinterpret_cast<const char*>(sqlite3_column_text(mode.get(), 0))) != "wal")
          raise<ConfigError>("the ", where_, " cannot use write-ahead logging (", sqlite3_errmsg(db_), ")");
      }
      exec_config(sync == SqliteSync::full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
      // Takes the exclusive lock now: a second coordinator on this file fails here.
      exec_config("BEGIN IMMEDIATE");
      exec_config(kSchema);
      exec_config("COMMIT");
    } catch (...) {
      sqlite3_close(db_);
      throw;
    }
    put_shard_ = Statement(db_, "INSERT OR REPLACE INTO shards VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", where_);
    del_shard_ = Statement(db_, "DELETE FROM shards WHERE id = ?1", where_);
    put_lease_ = Statement(db_, "INSERT OR REPLACE INTO leases VALUES (?1, ?2)", where_);
    del_lease_ = Statement(db_, "DELETE FROM leases WHERE id = ?1", where_);
    put_piece_ = Statement(db_, "INSERT OR REPLACE INTO pieces VALUES (?1, ?2, ?3, ?4, ?5)", where_);
    del_pieces_ = Statement(db_, "DELETE FROM pieces WHERE lease = ?1", where_);
    put_rank_ = Statement(db_, "INSERT OR REPLACE INTO ranks VALUES (?1, ?2, ?3)", where_);
    put_queue_ = Statement(db_, "INSERT INTO queue VALUES (?1, ?2)", where_);
    put_settled_ = Statement(db_, "INSERT OR REPLACE INTO settled VALUES (?1, ?2, ?3, ?4)", where_);
    put_lost_ = Statement(db_, "INSERT OR REPLACE INTO lost_ranks VALUES (?1, ?2, ?3)", where_);
    del_lost_ = Statement(db_, "DELETE FROM lost_ranks WHERE rank = ?1", where_);
    put_frozen_ = Statement(db_, "INSERT OR REPLACE INTO frozen_steps VALUES (?1, ?2, ?3)", where_);
    put_frozen_restart_ = Statement(db_, "INSERT OR REPLACE INTO frozen_restarts VALUES (?1, ?2, ?3)", where_);
    prune_frozen_ = Statement(db_, "DELETE FROM frozen_steps WHERE step < ?1", where_);
    prune_frozen_restarts_ = Statement(db_, "DELETE FROM frozen_restarts WHERE step < ?1", where_);
    put_generation_ = Statement(db_, "INSERT OR REPLACE INTO generations VALUES (?1, ?2)", where_);
    del_generation_members_ = Statement(db_, "DELETE FROM generation_members WHERE generation = ?1", where_);
    put_generation_member_ = Statement(db_, "INSERT INTO generation_members VALUES (?1, ?2, ?3)", where_);
    put_offered_ = Statement(db_, "INSERT OR REPLACE INTO offered_id VALUES (1, ?1, ?2)", where_);
    put_job_ = Statement(db_,
                         "INSERT OR REPLACE INTO job VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
                         "?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                         where_);
    put_file_ = Statement(db_, "INSERT INTO files VALUES (?1, ?2, ?3)", where_);
  }

  ~SqliteDdsStore() override {
    // Statements first: sqlite3_close refuses while any is alive.
    for (Statement* st : {&put_shard_, &del_shard_, &put_lease_, &del_lease_, &put_piece_, &del_pieces_, &put_rank_,
                          &put_queue_, &put_settled_, &put_lost_, &del_lost_, &put_frozen_, &put_frozen_restart_,
                          &prune_frozen_, &prune_frozen_restarts_, &put_generation_, &del_generation_members_,
                          &put_generation_member_, &put_offered_, &put_job_, &put_file_})
      *st = Statement();
    sqlite3_close(db_);
  }

  std::string describe() const override { return where_; }

  std::optional<StoredState> load() override {
    Statement job(db_, "SELECT * FROM job WHERE id = 1", where_);
    const int rc = sqlite3_step(job.get());
    if (rc == SQLITE_DONE) return std::nullopt;
    if (rc != SQLITE_ROW) fail("reading the job");
    sqlite3_stmt* j = job.get();
    std::vector<DataFile> files;
    each("SELECT name, records FROM files ORDER BY idx", [&](sqlite3_stmt* st) {
      files.push_back({reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), u64(st, 1)});
    });
    DdsOptions options;
    options.world_size = sqlite3_column_int(j, 2);
    options.shard_size = u64(j, 3);
    options.seed = u64(j, 4);
    const char* shuffle = reinterpret_cast<const char*>(sqlite3_column_text(j, 5));
    options.epochs = static_cast<std::uint32_t>(u64(j, 6));
    options.steal_min = u64(j, 7);
    DdsState s;
    s.epoch = static_cast<std::uint32_t>(u64(j, 8));
    s.finished = sqlite3_column_int(j, 9) != 0;
    s.fresh = u64(j, 10);
    s.next_shard_id = u64(j, 11);
    s.next_lease_id = u64(j, 12);
    s.committed = u64(j, 13);
    s.done_shards = u64(j, 14);
    s.epochs_completed = u64(j, 15);
    s.total_committed = u64(j, 16);
    s.given_back = u64(j, 17);
    s.resplit = u64(j, 18);
    s.rank_failures = u64(j, 19);
    s.stolen = u64(j, 20);
    each("SELECT * FROM shards ORDER BY id", [&](sqlite3_stmt* st) {
      Shard sh;
      sh.epoch = s.epoch;
      sh.id = u64(st, 0);
      sh.begin = u64(st, 1);
      sh.end = u64(st, 2);
      sh.cursor = u64(st, 3);
      sh.owner = sqlite3_column_int(st, 4);
      sh.state = static_cast<ShardState>(sqlite3_column_int(st, 5));
      sh.attempts = static_cast<std::uint32_t>(u64(st, 6));
      sh.pending = u64(st, 7);
      s.shards.emplace(sh.id, sh);
    });
    each("SELECT shard FROM queue ORDER BY pos", [&](sqlite3_stmt* st) { s.queued.push_back(u64(st, 0)); });
    const auto ranks = static_cast<std::size_t>(options.world_size > 0 ? options.world_size : 0);
    s.active.assign(ranks, -1);
    s.shards_taken.assign(ranks, 0);
    each("SELECT * FROM ranks", [&](sqlite3_stmt* st) {
      const auto r = static_cast<std::size_t>(sqlite3_column_int64(st, 0));
      if (r >= ranks) malformed("a rank row beyond the world size");
      s.active[r] = sqlite3_column_int64(st, 1);
      s.shards_taken[r] = u64(st, 2);
    });
    each("SELECT id, rank FROM leases", [&](sqlite3_stmt* st) {
      s.leases[u64(st, 0)].rank = sqlite3_column_int(st, 1);
    });
    each("SELECT lease, shard, first, last FROM pieces ORDER BY lease, idx", [&](sqlite3_stmt* st) {
      const auto it = s.leases.find(u64(st, 0));
      if (it == s.leases.end()) malformed("a lease piece without its lease");
      it->second.pieces.push_back({u64(st, 1), u64(st, 2), u64(st, 3)});
    });
    StoredState out;
    each("SELECT * FROM settled ORDER BY rank", [&](sqlite3_stmt* st) {
      out.settled.push_back({sqlite3_column_int(st, 0), u64(st, 1), sqlite3_column_int(st, 2) != 0,
                             sqlite3_column_int(st, 3) != 0});
    });
    each("SELECT rank, incarnation, generation FROM lost_ranks ORDER BY rank", [&](sqlite3_stmt* st) {
      const std::int64_t r = sqlite3_column_int64(st, 0);
      if (r < 0 || static_cast<std::size_t>(r) >= ranks) malformed("a lost rank beyond the world size");
      out.lost.push_back({static_cast<int>(r), static_cast<std::uint32_t>(u64(st, 1)), u64(st, 2), true});
    });
    const auto rank_in_range = [&](sqlite3_stmt* st, int col, const char* what) {
      const std::int64_t r = sqlite3_column_int64(st, col);
      if (r < 0 || static_cast<std::size_t>(r) >= ranks) malformed(what);
      return r;
    };
    each("SELECT step, generation, stop FROM frozen_steps ORDER BY step", [&](sqlite3_stmt* st) {
      out.frozen.push_back({u64(st, 0), u64(st, 1), sqlite3_column_int(st, 2) != 0, {}});
    });
    each("SELECT step, rank, incarnation FROM frozen_restarts ORDER BY step, rank", [&](sqlite3_stmt* st) {
      const std::uint64_t step = u64(st, 0);
      const auto it = std::ranges::lower_bound(out.frozen, step, {}, &FrozenStep::step);
      if (it == out.frozen.end() || it->step != step) malformed("a restart order of a step that is not frozen");
      it->restarts.emplace_back(static_cast<int>(rank_in_range(st, 1, "a restart order beyond the world size")),
                                static_cast<std::uint32_t>(u64(st, 2)));
    });
    each("SELECT generation, start FROM generations ORDER BY generation", [&](sqlite3_stmt* st) {
      out.generations.push_back({u64(st, 0), u64(st, 1), {}});
    });
    each("SELECT generation, rank FROM generation_members ORDER BY generation, idx", [&](sqlite3_stmt* st) {
      const std::uint64_t g = u64(st, 0);
      const auto it = std::ranges::lower_bound(out.generations, g, {}, &GenerationRecord::generation);
      if (it == out.generations.end() || it->generation != g) malformed("a member of a generation that is not stored");
      it->members.push_back(static_cast<std::uint32_t>(rank_in_range(st, 1, "a generation member beyond the world size")));
    });
    each("SELECT generation, bytes FROM offered_id", [&](sqlite3_stmt* st) {
      OfferedId offered{u64(st, 0), {}};
      if (sqlite3_column_bytes(st, 1) != static_cast<int>(offered.id.bytes.size()))
        malformed("an offered generation id of the wrong size");
      std::memcpy(offered.id.bytes.data(), sqlite3_column_blob(st, 1), offered.id.bytes.size());
      out.offered = offered;
    });
    // One set of consistency rules for every stored form: the checkpoint
    // reader's (ranges, ownership, accounting), on the text of this state.
    try {
      options.shuffle = parse_shuffle_mode(shuffle == nullptr ? "" : shuffle);
      Dataset dataset = files.empty() ? Dataset::samples(u64(j, 1)) : Dataset::files(std::move(files));
      out.dds = parse_checkpoint(checkpoint_text(dataset, options, s), where_);
    } catch (const InvalidArgument& e) {
      if (std::string_view(e.what()).starts_with("malformed")) throw;
      malformed(e.what());
    }
    return out;
  }

  void write(const Dataset& dataset, const DdsOptions& options, const DdsChanges& c,
             const CoordinatorRows& rows) override {
    if (!c.any && rows.empty()) return;
    exec("BEGIN IMMEDIATE");
    try {
      const DdsState& s = c.state;
      if (c.everything) {
        exec("DELETE FROM files; DELETE FROM shards; DELETE FROM queue; DELETE FROM ranks; DELETE FROM leases; "
             "DELETE FROM pieces");
        std::int64_t idx = 0;
        for (const DataFile& f : dataset.files()) {
          sqlite3_stmt* st = reset(put_file_);
          sqlite3_bind_int64(st, 1, idx++);
          sqlite3_bind_text(st, 2, f.name.c_str(), static_cast<int>(f.name.size()), SQLITE_TRANSIENT);
          sqlite3_bind_int64(st, 3, s64(f.records));
          run(st);
        }
        for (const auto& [id, shard] : s.shards) put_shard(shard);
        for (const auto& [id, lease] : s.leases) put_lease(id, lease);
        for (std::size_t r = 0; r < s.active.size(); ++r) put_rank(static_cast<int>(r), s.active[r], s.shards_taken[r]);
        put_queue(std::vector<std::uint64_t>(s.queued.begin(), s.queued.end()));
      } else {
        for (const Shard& shard : c.shards) put_shard(shard);
        for (const std::uint64_t id : c.shards_gone) {
          sqlite3_stmt* st = reset(del_shard_);
          sqlite3_bind_int64(st, 1, s64(id));
          run(st);
        }
        for (const auto& [id, lease] : c.leases) put_lease(id, lease);
        for (const std::uint64_t id : c.leases_gone) {
          for (Statement* del : {&del_lease_, &del_pieces_}) {
            sqlite3_stmt* st = reset(*del);
            sqlite3_bind_int64(st, 1, s64(id));
            run(st);
          }
        }
        for (const auto& slot : c.ranks) put_rank(slot.rank, slot.active, slot.shards_taken);
        if (c.queue_changed) {
          exec("DELETE FROM queue");
          put_queue(c.queue);
        }
      }
      if (c.any) {
        sqlite3_stmt* st = reset(put_job_);
        sqlite3_bind_int64(st, 1, s64(dataset.size()));
        sqlite3_bind_int64(st, 2, options.world_size);
        sqlite3_bind_int64(st, 3, s64(options.shard_size));
        sqlite3_bind_int64(st, 4, s64(options.seed));
        const std::string shuffle(to_string(options.shuffle));
        sqlite3_bind_text(st, 5, shuffle.c_str(), static_cast<int>(shuffle.size()), SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 6, options.epochs);
        sqlite3_bind_int64(st, 7, s64(options.steal_min));
        const std::uint64_t scalars[] = {s.epoch,          s.finished ? 1u : 0u, s.fresh,           s.next_shard_id,
                                         s.next_lease_id,  s.committed,          s.done_shards,     s.epochs_completed,
                                         s.total_committed, s.given_back,        s.resplit,         s.rank_failures,
                                         s.stolen};
        int col = 8;
        for (const std::uint64_t v : scalars) sqlite3_bind_int64(st, col++, s64(v));
        run(st);
      }
      for (const SettleRecord& r : rows.settled) {
        sqlite3_stmt* st = reset(put_settled_);
        sqlite3_bind_int64(st, 1, r.rank);
        sqlite3_bind_int64(st, 2, s64(r.lease));
        sqlite3_bind_int(st, 3, r.commit ? 1 : 0);
        sqlite3_bind_int(st, 4, r.ok ? 1 : 0);
        run(st);
      }
      for (const LostRank& r : rows.lost) {
        sqlite3_stmt* st = reset(r.gone ? put_lost_ : del_lost_);
        sqlite3_bind_int64(st, 1, r.rank);
        if (r.gone) {
          sqlite3_bind_int64(st, 2, r.incarnation);
          sqlite3_bind_int64(st, 3, s64(r.generation));
        }
        run(st);
      }
      if (rows.frozen_kept_from > 0) {
        for (Statement* prune : {&prune_frozen_, &prune_frozen_restarts_}) {
          sqlite3_stmt* st = reset(*prune);
          sqlite3_bind_int64(st, 1, s64(rows.frozen_kept_from));
          run(st);
        }
      }
      for (const FrozenStep& f : rows.frozen) put_frozen(f);
      for (const GenerationRecord& g : rows.generations) put_generation(g);
      if (rows.offered) {
        sqlite3_stmt* st = reset(put_offered_);
        sqlite3_bind_int64(st, 1, s64(rows.offered->generation));
        sqlite3_bind_blob(st, 2, rows.offered->id.bytes.data(), static_cast<int>(rows.offered->id.bytes.size()),
                          SQLITE_TRANSIENT);
        run(st);
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    raise<InternalError>(where_, ": ", what, ": ", sqlite3_errmsg(db_));
  }
  [[noreturn]] void malformed(const char* what) const {
    raise<InvalidArgument>("malformed DDS state in the ", where_, ": ", what);
  }
  void exec(const char* sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string why = error != nullptr ? error : sqlite3_errmsg(db_);
      sqlite3_free(error);
      raise<InternalError>(where_, ": '", sql, "' failed: ", why);
    }
  }
  void exec_config(const char* sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
      std::string why = error != nullptr ? error : sqlite3_errmsg(db_);
      sqlite3_free(error);
      if (why.find("locked") != std::string::npos) why += " (another coordinator has it open?)";
      raise<ConfigError>("cannot use the ", where_, ": ", why);
    }
  }
  template <typename Row>
  void each(const char* sql, Row&& row) {
    Statement st(db_, sql, where_);
    for (;;) {
      const int rc = sqlite3_step(st.get());
      if (rc == SQLITE_DONE) return;
      if (rc != SQLITE_ROW) fail(sql);
      row(st.get());
    }
  }
  static sqlite3_stmt* reset(Statement& s) {
    sqlite3_reset(s.get());
    sqlite3_clear_bindings(s.get());
    return s.get();
  }
  void run(sqlite3_stmt* st) {
    if (sqlite3_step(st) != SQLITE_DONE) fail(sqlite3_sql(st));
  }
  void put_shard(const Shard& sh) {
    sqlite3_stmt* st = reset(put_shard_);
    const std::int64_t v[] = {s64(sh.id),     s64(sh.begin), s64(sh.end),      s64(sh.cursor),
                              sh.owner,       static_cast<std::int64_t>(sh.state), sh.attempts, s64(sh.pending)};
    for (int i = 0; i < 8; ++i) sqlite3_bind_int64(st, i + 1, v[i]);
    run(st);
  }
  void put_lease(std::uint64_t id, const LeaseRecord& lease) {
    sqlite3_stmt* st = reset(put_lease_);
    sqlite3_bind_int64(st, 1, s64(id));
    sqlite3_bind_int64(st, 2, lease.rank);
    run(st);
    st = reset(del_pieces_);
    sqlite3_bind_int64(st, 1, s64(id));
    run(st);
    std::int64_t idx = 0;
    for (const auto& p : lease.pieces) {
      st = reset(put_piece_);
      const std::int64_t v[] = {s64(id), idx++, s64(p.shard), s64(p.begin), s64(p.end)};
      for (int i = 0; i < 5; ++i) sqlite3_bind_int64(st, i + 1, v[i]);
      run(st);
    }
  }
  void put_rank(int rank, std::int64_t active, std::uint64_t taken) {
    sqlite3_stmt* st = reset(put_rank_);
    sqlite3_bind_int64(st, 1, rank);
    sqlite3_bind_int64(st, 2, active);
    sqlite3_bind_int64(st, 3, s64(taken));
    run(st);
  }
  void put_frozen(const FrozenStep& f) {
    sqlite3_stmt* st = reset(put_frozen_);
    sqlite3_bind_int64(st, 1, s64(f.step));
    sqlite3_bind_int64(st, 2, s64(f.generation));
    sqlite3_bind_int(st, 3, f.stop ? 1 : 0);
    run(st);
    for (const auto& [rank, incarnation] : f.restarts) {
      st = reset(put_frozen_restart_);
      sqlite3_bind_int64(st, 1, s64(f.step));
      sqlite3_bind_int64(st, 2, rank);
      sqlite3_bind_int64(st, 3, incarnation);
      run(st);
    }
  }
  void put_generation(const GenerationRecord& g) {
    sqlite3_stmt* st = reset(put_generation_);
    sqlite3_bind_int64(st, 1, s64(g.generation));
    sqlite3_bind_int64(st, 2, s64(g.start));
    run(st);
    st = reset(del_generation_members_);
    sqlite3_bind_int64(st, 1, s64(g.generation));
    run(st);
    std::int64_t idx = 0;
    for (const std::uint32_t rank : g.members) {
      st = reset(put_generation_member_);
      sqlite3_bind_int64(st, 1, s64(g.generation));
      sqlite3_bind_int64(st, 2, idx++);
      sqlite3_bind_int64(st, 3, rank);
      run(st);
    }
  }
  void put_queue(const std::vector<std::uint64_t>& queue) {
    std::int64_t pos = 0;
    for (const std::uint64_t id : queue) {
      sqlite3_stmt* st = reset(put_queue_);
      sqlite3_bind_int64(st, 1, pos++);
      sqlite3_bind_int64(st, 2, s64(id));
      run(st);
    }
  }

  std::string path_, where_;
  sqlite3* db_ = nullptr;
  Statement put_shard_, del_shard_, put_lease_, del_lease_, put_piece_, del_pieces_, put_rank_, put_queue_,
      put_settled_, put_lost_, del_lost_, put_frozen_, put_frozen_restart_, prune_frozen_, prune_frozen_restarts_,
      put_generation_, del_generation_members_, put_generation_member_, put_offered_, put_job_, put_file_;
};

}  // namespace

std::unique_ptr<DdsStore> open_sqlite_store(const std::string& path, SqliteSync sync) {
  return std::make_unique<SqliteDdsStore>(path, sync);
}

}  // namespace antdt::sched
