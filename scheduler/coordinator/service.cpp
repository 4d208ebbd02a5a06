#include "scheduler/coordinator/service.hpp"

#include "core/bootstrap_admission.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "scheduler/dds_checkpoint.hpp"
#include "scheduler/dds_store_sqlite.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <utility>

namespace antdt::sched::coord {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------
CoordinatorOptions CoordinatorOptions::from(const Config& cfg, int world_size, std::uint64_t dataset_size,
                                            std::uint32_t epochs, std::uint64_t global_batch) {
  CoordinatorOptions o;
  o.world_size = world_size;
  o.dataset_size = dataset_size;
  o.dds = sched::dds_options_from(cfg, world_size, epochs);
  o.global_batch = global_batch;
  o.monitor = telemetry::MonitorConfig::from(cfg);
  o.checkpoint_path = cfg.coordinator_checkpoint;
  o.checkpoint_interval = cfg.coordinator_checkpoint_interval;
  o.database_path = cfg.coordinator_db;
  o.grace = cfg.coordinator_grace;
  o.max_restarts = cfg.max_restarts;
  return o;
}

std::array<std::byte, 16> job_secret(const Config& cfg) { return cfg.secret_bytes("the coordinator"); }

// ---------------------------------------------------------------------------
// Coordinator
// ---------------------------------------------------------------------------
namespace {

// A checkpoint that cannot be written is found out at the start, not when the
// job ends and the final checkpoint fails (the data state of the job lost).
// The checkpoint goes to a temporary file in the same directory, then is renamed.
void check_writable_path(const std::string& path, const char* what, const char* variables) {
  namespace fs = std::filesystem;
  const auto where = [&] { return cat("the coordinator ", what, " '", path, "' (", variables, ")"); };
  std::error_code ec;
  if (fs::is_directory(path, ec)) raise<ConfigError>(where(), " is a directory; name a file in it");
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    raise<ConfigError>(where(), " cannot be written: its directory '", dir, "' does not exist");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    raise<ConfigError>(where(), " cannot be written: its directory '", dir, "' is not writable (",
                       std::strerror(errno), ")");
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    raise<ConfigError>(where(), " cannot be written (", std::strerror(errno), ")");
}

void check_checkpoint_path(const std::string& path) {
  check_writable_path(path, "checkpoint", "ANTDT_COORDINATOR_CHECKPOINT or antdt-coordinator --checkpoint");
}

constexpr const char* kDatabaseVariables = "ANTDT_COORDINATOR_DB or antdt-coordinator --db";

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)), last_checkpoint_(Clock::now()) {
  ANTDT_CHECK_ARG(options_.world_size >= 1, "coordinator: world size must be >= 1, got ", options_.world_size);
  // Without a dataset there is no data state, and nothing is ever written there.
  if (options_.dataset_size > 0 && !options_.checkpoint_path.empty()) check_checkpoint_path(options_.checkpoint_path);
  options_.dds.world_size = options_.world_size;
  if (options_.global_batch == 0) options_.global_batch = 32 * static_cast<std::uint64_t>(options_.world_size);
  if (options_.dataset_size > 0 && !options_.database_path.empty())
    check_writable_path(options_.database_path, "database", kDatabaseVariables);
  members_.resize(static_cast<std::size_t>(options_.world_size));
  std::vector<sched::LostRank> lost_for_good;
  if (options_.dataset_size > 0) {
    dds_ = std::make_unique<sched::Dds>(sched::Dataset::samples(options_.dataset_size), options_.dds);
    std::optional<sched::StoredState> stored;
    if (!options_.database_path.empty()) {
      try {
        store_ = sched::open_sqlite_store(options_.database_path);
        stored = store_->load();
      } catch (const Error& e) {
        raise<ConfigError>("the coordinator database (", kDatabaseVariables, "): ", e.what());
      }
    }
    if (stored) {
      if (!(stored->dds.dataset == dds_->dataset()) || !(stored->dds.options == dds_->options()))
        raise<ConfigError>("the coordinator database '", options_.database_path, "' (", kDatabaseVariables,
                           ") holds the state of another job (", stored->dds.dataset.size(), " samples, ",
                           stored->dds.options.world_size, " ranks, shard size ", stored->dds.options.shard_size,
                           ", seed ", stored->dds.options.seed, ", ", stored->dds.options.epochs,
                           " epoch(s)); this one has ", dds_->dataset().size(), " samples, ", options_.world_size,
                           " ranks, shard size ", options_.dds.shard_size, ", seed ", options_.dds.seed, ", ",
                           options_.dds.epochs, " epoch(s)");
      std::uint64_t returned = 0;
      dds_ = sched::Dds::resume(std::move(stored->dds), &returned);
      for (const auto& r : stored->settled) settled_[r.rank] = r;
      lost_for_good = std::move(stored->lost);
      restore_plans(*stored);
      resumed_ = true;
      const auto p = dds_->progress();
      ANTDT_INFO("coordinator: resumed the data sharding state from ", store_->describe(), " (epoch ", p.epoch, ", ",
                 p.total_committed, " samples committed, ", returned, " samples of open leases back to the queue; ",
                 "plans handed out up to step ", highest_frozen_, ", communicator generation ", generation_, ")");
    } else if (!options_.checkpoint_path.empty() && std::filesystem::exists(options_.checkpoint_path)) {
      resumed_ = true;
      dds_->restore(options_.checkpoint_path);
      const auto p = dds_->progress();
      ANTDT_INFO("coordinator: restored the data sharding state from ", options_.checkpoint_path, " (epoch ", p.epoch,
                 ", ", p.total_committed, " samples committed)");
    }
  }
  monitor_ = std::make_unique<telemetry::Monitor>(options_.world_size, options_.monitor);
  if (options_.policy.empty()) {
    controller_ = sched::Controller::from_config(*monitor_, config(), options_.world_size, options_.global_batch);
  } else {
    sched::ControllerOptions copts;
    copts.world_size = options_.world_size;
    copts.global_batch = options_.global_batch;
    auto split = sched::ControllerOptions::split_config(copts, options_.policy_config);
    controller_ = std::make_unique<sched::Controller>(*monitor_, make_policy(options_.policy, split.policy_config),
                                                      split.options);
  }
  // Ranks an earlier coordinator process declared lost for good stay lost:
  // not members of the next generation, no share of the global batch.
  for (const sched::LostRank& r : lost_for_good) {
    if (r.rank >= options_.world_size) continue;  // load() checked it against the stored world size
    Member& m = members_[static_cast<std::size_t>(r.rank)];
    m.gone = true;
    m.gone_generation = r.generation;
    m.incarnation = r.incarnation;
    m.ever_connected = true;  // it said hello to the process before; it never says bye
    controller_->rank_lost(r.rank, 1);
    ANTDT_INFO("coordinator: rank ", r.rank, " was lost for good in generation ", r.generation,
               " (recorded in ", store_->describe(), "): the job goes on without it");
  }
  idle_since_ = Clock::now();
  // The first write holds everything: a new job, a resumed one with its leases
  // returned, or a checkpoint imported.
  if (store_) {
    try {
      sync();
    } catch (const Error& e) {
      raise<ConfigError>("the coordinator database (", kDatabaseVariables, "): ", e.what());
    }
  }
}

Coordinator::~Coordinator() {
  try {
    sync();
  } catch (const Error& e) {
    ANTDT_WARN("coordinator: final database write failed: ", e.what());
  }
  try {
    std::lock_guard lock(mu_);
    checkpoint_locked(true);
  } catch (const Error& e) {
    ANTDT_WARN("coordinator: final checkpoint failed: ", e.what());
  }
}

void Coordinator::sync() {
  std::lock_guard lock(mu_);
  if (!store_ || !dds_) return;
  const sched::DdsChanges changes = dds_->take_changes();
  const sched::CoordinatorRows rows{settled_dirty_, lost_dirty_, frozen_dirty_, generations_dirty_,
                                    frozen_kept_from_dirty_, offered_dirty_};
  if (!changes.any && rows.empty()) return;
  store_->write(dds_->dataset(), dds_->options(), changes, rows);
  settled_dirty_.clear();
  lost_dirty_.clear();
  frozen_dirty_.clear();
  generations_dirty_.clear();
  frozen_kept_from_dirty_ = 0;
  offered_dirty_.reset();
  ++stats_.database_writes;
}

// The plans a crashed coordinator process handed out: a rank a step behind
// the others gets the plan they got, and the next generation starts after
// the last step planned, not at step 1. And the id of the newest generation:
// members that had not fetched it still can.
void Coordinator::restore_plans(const sched::StoredState& stored) {
  for (const sched::FrozenStep& f : stored.frozen) {
    frozen_[f.step] = f;
    highest_frozen_ = std::max(highest_frozen_, f.step);
    generation_ = std::max(generation_, f.generation);
    // Ordered to restart: its next incarnation is the ordered one (hello
    // clears the order when a later incarnation reconnects: it came back before the crash).
    for (const auto& [rank, incarnation] : f.restarts) {
      if (rank >= options_.world_size) continue;
      Member& m = members_[static_cast<std::size_t>(rank)];
      m.restart_ordered = true;
      m.incarnation = std::max(m.incarnation, incarnation);
    }
  }
  for (const sched::GenerationRecord& g : stored.generations) {
    generation_start_[g.generation] = g.start;
    generation_members_[g.generation] = g.members;
    generation_ = std::max(generation_, g.generation);
  }
  // Members that had not fetched it yet when the process before died.
  if (stored.offered) generation_ids_[stored.offered->generation] = stored.offered->id;
}

void Coordinator::note_lost_locked(int rank, bool gone) {
  if (!store_) return;
  const Member& m = members_[static_cast<std::size_t>(rank)];
  std::erase_if(lost_dirty_, [&](const auto& r) { return r.rank == rank; });
  lost_dirty_.push_back({rank, m.incarnation, m.gone_generation, gone});
}

void Coordinator::note_settled_locked(int rank, std::uint64_t lease, bool commit, bool ok) {
  if (!store_) return;
  const sched::SettleRecord record{rank, lease, commit, ok};
  settled_[rank] = record;
  std::erase_if(settled_dirty_, [&](const auto& r) { return r.rank == rank; });
  settled_dirty_.push_back(record);
}

std::optional<bool> Coordinator::settled_answer_locked(int rank, std::uint64_t lease, bool commit) const {
  const auto it = settled_.find(rank);
  if (it == settled_.end() || it->second.lease != lease || it->second.commit != commit) return std::nullopt;
  return it->second.ok;
}

bool Coordinator::job_complete() const {
  std::lock_guard lock(mu_);
  if (!all_exited_locked()) return false;
  return !dds_ || options_.dds.epochs == 0 || dds_->progress().finished;
}

bool Coordinator::data_finished() const {
  std::lock_guard lock(mu_);
  return dds_ && options_.dds.epochs > 0 && dds_->progress().finished;
}

std::optional<Clock::duration> Coordinator::all_gone_for() const {
  std::lock_guard lock(mu_);
  if (stats_.connected > 0 || all_exited_locked()) return std::nullopt;
  const bool any = resumed_ || std::any_of(members_.begin(), members_.end(), [](const Member& m) { return m.ever_connected; });
  if (!any) return std::nullopt;
  return Clock::now() - idle_since_;
}

Coordinator::Member& Coordinator::member(int rank) {
  ANTDT_CHECK_ARG(rank >= 0 && rank < options_.world_size, "coordinator: rank ", rank, " out of range [0, ",
                  options_.world_size, ")");
  return members_[static_cast<std::size_t>(rank)];
}

Welcome Coordinator::hello(int rank, std::uint32_t incarnation, std::uint64_t generation, bool reconnect) {
  std::lock_guard lock(mu_);
  if (rank < 0 || rank >= options_.world_size)
    return Welcome{false, cat("rank ", rank, " is out of range [0, ", options_.world_size, ")"), 0, 0};
  Member& m = member(rank);
  if (m.connected) return Welcome{false, cat("rank ", rank, " is already connected"), 0, 0};
  if (m.gone) {
    const bool same_process = reconnect || incarnation <= m.incarnation;
    if (same_process && !(rebuild_pending_ && generation_ == m.gone_generation))
      return Welcome{false,
                     cat("rank ", rank, " incarnation ", incarnation,
                         " was declared lost for good and the job went on without it"),
                     0, 0};
    // Its connection broke but the process lives, and no generation without it
    // was planned yet; or a new process (a launcher restarted it although it
    // had no restarts left by ANTDT_MAX_RESTARTS) rejoins like an unordered restart.
    m.gone = false;
    note_lost_locked(rank, false);
    controller_->rank_back(rank, highest_frozen_ + 1);
  }
  if (m.ever_connected && incarnation < m.incarnation)
    return Welcome{false, cat("rank ", rank, " incarnation ", incarnation, " is older than ", m.incarnation), 0, 0};
  generation_ = std::max(generation_, generation);
  // A restart ordered by a coordinator process before a crash, done before it:
  // this incarnation reconnects to the one restarted since.
  if (reconnect && m.restart_ordered && incarnation > m.incarnation) m.restart_ordered = false;
  std::uint64_t resume_step = 0;
  const bool restarted = !reconnect && incarnation > 0 && (!m.ever_connected || incarnation > m.incarnation);
  if (restarted) {
    if (m.restart_ordered) {
      m.restart_ordered = false;
      controller_->rank_restarted(rank);
      ++stats_.restarts_done;
    } else if (m.awaiting_restart) {
      // It crashed and was started again. The generation planned since its loss
      // (if any) counts it as a member: it joins that one; otherwise the next one.
      m.awaiting_restart = false;
      controller_->rank_restarted(rank);
      ++stats_.restarts_done;
      if (rebuild_pending_) m.unordered_restart = true;
      ANTDT_INFO("coordinator: rank ", rank, " is back after a crash as incarnation ", incarnation);
    } else if (m.ever_connected || highest_frozen_ > 0) {
      // Nobody ordered it (the rank exited with the restart code on its own, or
      // this coordinator was started after the order): the others must still
      // rebuild their communicator to let it in, from the next unfrozen step.
      m.unordered_restart = true;
      rebuild_pending_ = true;
      controller_->rank_restarted(rank);
      ++stats_.restarts_done;
      ANTDT_WARN("coordinator: rank ", rank, " came back as incarnation ", incarnation,
                 " without a restart order; every rank rebuilds its communicator at step ", highest_frozen_ + 1);
    }
    auto start = generation_start_.find(generation_);
    resume_step = m.unordered_restart || start == generation_start_.end() ? highest_frozen_ + 1 : start->second;
    m.last_reported = resume_step > 0 ? resume_step - 1 : 0;
  }
  m.connected = true;
  m.ever_connected = true;
  m.exited = false;
  m.awaiting_restart = false;
  m.incarnation = incarnation;
  ++stats_.connected;
  const std::uint64_t joins = m.unordered_restart ? generation_ + 1 : generation_;
  m.generation = restarted ? joins : std::max(generation, m.generation);
  return Welcome{true, {}, joins, resume_step};
}

const sched::FrozenStep& Coordinator::frozen_locked(std::uint64_t step) {
  if (auto it = frozen_.find(step); it != frozen_.end()) return it->second;
  if (step <= highest_frozen_)
    raise<InvalidArgument>("coordinator: the plan of step ", step, " is no longer kept (steps up to ", highest_frozen_,
                           " were planned; a rank fell too far behind)");
  sched::FrozenStep f;
  f.step = step;
  f.stop = dds_ && dds_->progress().finished;
  if (!f.stop) {
    for (int r = 0; r < options_.world_size; ++r) {
      Member& m = members_[static_cast<std::size_t>(r)];
      if (!m.restart_at || *m.restart_at > step) continue;
      m.restart_at.reset();
      if (!m.connected) continue;  // gone already: nothing to order
      f.restarts.emplace_back(r, m.incarnation);
      m.restart_ordered = true;
      ++stats_.restarts_ordered;
    }
  }
  // A lost rank or a failed communicator needs a new generation even at the
  // stop step: the ranks' last collectives run on it.
  if (!f.restarts.empty() || rebuild_pending_) {
    ++generation_;
    generation_start_[generation_] = step;
    rebuild_pending_ = false;
    for (auto& m : members_) m.unordered_restart = false;
    std::vector<std::uint32_t> in;
    for (int r = 0; r < options_.world_size; ++r) {
      const Member& m = members_[static_cast<std::size_t>(r)];
      if (!m.gone) {
        in.push_back(static_cast<std::uint32_t>(r));
      } else {
        controller_->rank_lost(r, step);  // once: its share of the global batch goes to the members from here on
      }
    }
    if (store_) generations_dirty_.push_back({generation_, step, in});
    generation_members_[generation_] = std::move(in);
    ANTDT_INFO("coordinator: communicator generation ", generation_, " starts at step ", step, " with ",
               generation_members_[generation_].size(), " of ", options_.world_size, " ranks (", f.restarts.size(),
               " rank(s) restart)");
  }
  f.generation = generation_;
  highest_frozen_ = step;
  // Ranks never ask for steps older than their last one; keep a margin for the
  // slowest. A rank that has not connected yet starts at step 1: keep
  // everything for it (its thread or process may simply start late).
  std::uint64_t oldest = step;
  for (const auto& m : members_)
    if (m.connected || !m.ever_connected) oldest = std::min(oldest, m.last_reported);
  const auto kept = frozen_.lower_bound(oldest);
  if (store_ && kept != frozen_.begin()) frozen_kept_from_dirty_ = std::max(frozen_kept_from_dirty_, oldest);
  frozen_.erase(frozen_.begin(), kept);
  if (store_) frozen_dirty_.push_back(f);
  return frozen_.emplace(step, std::move(f)).first->second;
}

Plan Coordinator::plan(int rank, std::uint64_t step, std::uint64_t fetch_max) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  ANTDT_CHECK_ARG(step >= 1, "coordinator: steps start at 1");
  const sched::FrozenStep& f = frozen_locked(step);
  Plan out;
  out.step = step;
  out.plan = controller_->plan_for(rank, step);
  if (out.plan.resplit && dds_) {
    const auto moved = dds_->resplit(rank);
    ANTDT_INFO("coordinator: re-split rank ", rank, "'s shard at step ", step, ": ", moved, " samples for faster ranks");
  }
  // The coordinator's own record decides restarts, so that every rank sees the
  // same restart set (and the same generation) for this step.
  out.plan.restart = std::find(f.restarts.begin(), f.restarts.end(), std::pair{rank, m.incarnation}) != f.restarts.end();
  out.stop = f.stop;
  out.generation = f.generation;
  // The batch of the step, leased as the rank's Fetch right after the plan
  // would; none for a rank about to exit or a job that stops here. Nor while
  // the rank must sit out a fetch (its last batch was dropped): only a fetch
  // the trainer makes may use that up, else a late rank that skips the step
  // (it applies a result it missed) would consume it unseen and take new
  // samples at its next computed step, to be dropped again.
  if (fetch_max > 0 && dds_ && !out.plan.restart && !out.stop && out.plan.local_batch > 0 && !m.sit_out_fetch)
    out.batch = fetch_locked(m, rank, std::min(out.plan.local_batch, fetch_max));
  return out;
}

void Coordinator::report(int rank, const Report& r) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  if (r.fate == Fate::dropped) ++stats_.dropped_reports;
  m.dropped_last = r.fate == Fate::dropped;
  // A step reported on the rank's generation: its communicator was made.
  formed_ = std::max(formed_.value_or(0), m.generation);
  if (r.step >= next_close_) {
    telemetry::StepRecord rec;
    rec.rank = rank;
    rec.step = r.step;
    rec.compute_s = r.compute_s;
    rec.wait_s = r.wait_s;
    rec.transfer_s = r.transfer_s;
    rec.step_s = r.compute_s + r.wait_s + r.transfer_s;
    rec.samples = r.samples;
    records_[r.step].push_back(rec);
  }
  m.last_reported = std::max(m.last_reported, r.step);
  close_steps_locked();
  checkpoint_locked(false);
}

// A step closes when every connected rank reported it (or a later one).
void Coordinator::close_steps_locked() {
  for (;;) {
    bool any = false;
    for (const auto& m : members_) {
      if (!m.connected) continue;
      any = true;
      if (m.last_reported < next_close_) return;
    }
    if (!any) return;
    std::vector<telemetry::StepRecord> records;
    if (auto it = records_.find(next_close_); it != records_.end()) {
      records = std::move(it->second);
      records_.erase(it);
    }
    auto decision = controller_->on_step(next_close_, records);
    if (decision) {
      for (int r = 0; r < options_.world_size; ++r)
        if (decision->plans[static_cast<std::size_t>(r)].restart)
          schedule_restart_locked(r, decision->effective_step, "ordered by the policy");
      if (!decision->reason.empty()) ANTDT_INFO("coordinator: new plans from step ", decision->effective_step, ": ", decision->reason);
    }
    ++next_close_;
    ++stats_.steps_closed;
  }
}

void Coordinator::schedule_restart_locked(int rank, std::uint64_t step, const char* why) {
  Member& m = member(rank);
  if (m.restart_ordered || m.restart_at || m.gone) return;  // one order at a time; none for a rank lost for good
  if (options_.max_restarts > 0 && static_cast<long long>(m.incarnation) >= options_.max_restarts) {
    // The launcher would not start it again: it would be lost for good while
    // the next generation waits for it. (0: not known, e.g. no antdt-run.)
    ANTDT_WARN("coordinator: rank ", rank, " is not restarted (", why, "): it has used its ", options_.max_restarts,
               " restart(s) (ANTDT_MAX_RESTARTS)");
    controller_->rank_restarted(rank);
    return;
  }
  if (options_.embedded && rank == 0) {
    ANTDT_WARN("coordinator: rank 0 cannot be restarted (", why,
               "): it hosts the embedded coordinator; run antdt-coordinator (ANTDT_COORDINATOR) for that");
    controller_->rank_restarted(0);
    return;
  }
  m.restart_at = std::max(step, highest_frozen_ + 1);
  ANTDT_INFO("coordinator: rank ", rank, " restarts at step ", *m.restart_at, " (", why, ")");
}

BatchReply Coordinator::fetch(int rank, std::uint64_t max_samples) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  if (!dds_) raise<InvalidArgument>("coordinator: fetch, but this job has no dataset (dataset size 0)");
  return fetch_locked(m, rank, max_samples);
}

BatchReply Coordinator::fetch_locked(Member& m, int rank, std::uint64_t max_samples) {
  BatchReply out;
  if (std::exchange(m.sit_out_fetch, false)) {
    out.status = static_cast<std::uint8_t>(sched::FetchStatus::wait);
    out.epoch = dds_->epoch();
    return out;
  }
  sched::Batch b = dds_->fetch(rank, max_samples);
  out.status = static_cast<std::uint8_t>(b.status);
  out.lease = b.lease;
  out.epoch = b.epoch;
  out.samples = std::move(b.samples);
  if (out.lease != 0) lease_owner_[out.lease] = rank;
  return out;
}

bool Coordinator::commit(int rank, std::uint64_t lease) {
  std::lock_guard lock(mu_);
  member(rank);
  auto it = lease_owner_.find(lease);
  if (!dds_ || it == lease_owner_.end() || it->second != rank) {
    // Sent again after a coordinator crash whose answer the rank never saw: the same answer.
    return dds_ ? settled_answer_locked(rank, lease, true).value_or(false) : false;
  }
  lease_owner_.erase(it);
  const bool ok = dds_->commit(lease);
  note_settled_locked(rank, lease, true, ok);
  return ok;
}

bool Coordinator::give_back(int rank, std::uint64_t lease) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  auto it = lease_owner_.find(lease);
  if (!dds_ || it == lease_owner_.end() || it->second != rank)
    return dds_ ? settled_answer_locked(rank, lease, false).value_or(false) : false;
  lease_owner_.erase(it);
  const bool ok = dds_->give_back(lease);
  note_settled_locked(rank, lease, false, ok);
  if (!ok) return false;
  // The rank's contribution was dropped (too late). give_back rewinds its
  // shard so that it would compute the same samples again, and a rank the
  // arbiter no longer waits for would be dropped again at every step: the
  // epoch could never end. Cut its shard there instead, so the samples (and
  // the rest of the shard) go to the front of the queue, and give this rank
  // nothing at its next fetch, so that another rank takes them.
  if (m.dropped_last) {
    dds_->resplit(rank);
    m.sit_out_fetch = true;
  }
  return true;
}

void Coordinator::request_restart(int rank) {
  std::lock_guard lock(mu_);
  schedule_restart_locked(rank, highest_frozen_ + 1, "asked by the rank");
}

std::vector<std::uint32_t> Coordinator::members_locked(std::uint64_t generation) const {
  if (generation > generation_) return {};
  if (auto it = generation_members_.find(generation); it != generation_members_.end()) return it->second;
  // The first generation (or one a restarted coordinator learnt from a hello): every rank not lost.
  std::vector<std::uint32_t> all;
  for (int r = 0; r < options_.world_size; ++r)
    if (!members_[static_cast<std::size_t>(r)].gone) all.push_back(static_cast<std::uint32_t>(r));
  return all;
}

std::vector<std::uint32_t> Coordinator::members(std::uint64_t generation) const {
  std::lock_guard lock(mu_);
  return members_locked(generation);
}

void Coordinator::offer_id(int rank, std::uint64_t generation, const UniqueId& id) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  const auto in = members_locked(generation);
  ANTDT_CHECK_ARG(!in.empty() && in.front() == static_cast<std::uint32_t>(rank), "coordinator: rank ", rank,
                  " offers an id for generation ", generation, ", whose first member is ",
                  in.empty() ? std::string("not known yet") : cat("rank ", in.front()));
  ANTDT_CHECK_ARG(generation == generation_, "coordinator: rank ", rank, " offers an id for generation ", generation,
                  ", the job is at generation ", generation_);
  m.generation = generation;
  generation_ids_[generation] = id;
  if (store_) offered_dirty_ = sched::OfferedId{generation, id};
  // Older generations are over: every rank asked for the new one's plan already.
  generation_ids_.erase(generation_ids_.begin(), generation_ids_.find(generation));
}

GenerationId Coordinator::join(int rank, std::uint64_t generation) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  GenerationId out;
  out.generation = generation;
  // A rank waits for the generation a loss made due (a restarted rank, or
  // one whose last generation was abandoned): plan the next step now, which
  // starts it, instead of waiting for a plan request that may never come
  // (every member restarted: they all wait here).
  if (generation == generation_ + 1 && rebuild_pending_) frozen_locked(highest_frozen_ + 1);
  out.members = members_locked(generation);
  m.generation = std::max(m.generation, generation);
  if (auto it = generation_ids_.find(generation); it != generation_ids_.end()) {
    out.ready = true;
    out.id = it->second;
  }
  out.abandoned = abandoned_.count(generation) > 0;
  return out;
}

void Coordinator::bye(int rank, bool restarting) {
  std::lock_guard lock(mu_);
  Member& m = member(rank);
  if (!m.connected) return;
  m.connected = false;
  if (--stats_.connected == 0) idle_since_ = Clock::now();
  if (!restarting) m.exited = true;
  // Open leases of a rank that says bye go back (a polite exit mid-step).
  std::vector<std::uint64_t> open;
  for (const auto& [lease, owner] : lease_owner_)
    if (owner == rank) open.push_back(lease);
  for (auto lease : open) {
    lease_owner_.erase(lease);
    if (dds_) dds_->give_back(lease);
  }
  close_steps_locked();
  if (all_exited_locked()) checkpoint_locked(true);
}

void Coordinator::lost(int rank) {
  std::lock_guard lock(mu_);
  lost_locked(rank, "disconnected without bye");
}

void Coordinator::lost_locked(int rank, const std::string& why) {
  Member& m = member(rank);
  if (!m.connected) return;
  m.connected = false;
  if (--stats_.connected == 0) idle_since_ = Clock::now();
  ++stats_.ranks_lost;
  std::erase_if(lease_owner_, [&](const auto& entry) { return entry.second == rank; });
  const std::uint64_t returned = dds_ ? dds_->rank_failed(rank) : 0;
  // Its communicator is broken for every other rank: the job moves to a new
  // generation at the next step nobody has planned, with the rank's next
  // incarnation while it has restarts left, else without it.
  rebuild_pending_ = true;
  // Lost while the current generation formed (no member reported a step on
  // it yet): that generation never forms — its bootstrap needs every member.
  // The members still joining learn it from join; the rank's next incarnation
  // joins the next generation.
  if (!formed_ || *formed_ < generation_) abandoned_.insert(generation_);
  m.restart_at.reset();
  const bool back = static_cast<long long>(m.incarnation) < options_.max_restarts;
  m.awaiting_restart = back;
  int left = 0;
  for (const auto& other : members_) left += other.gone ? 0 : 1;
  if (!back && left > 1) {
    m.gone = true;
    m.gone_generation = generation_;
    ++stats_.ranks_gone;
    note_lost_locked(rank, true);
  }
  ANTDT_WARN("coordinator: rank ", rank, " (incarnation ", m.incarnation, ") ", why, "; ", returned,
             " of its samples go back to the queue; ",
             back ? cat("it has restarts left (", options_.max_restarts, " per rank): its next incarnation rejoins at a new communicator generation")
                  : m.gone ? cat("it has no restarts left: the job goes on with ", left - 1, " rank(s)")
                           : std::string("it was the last rank"));
  close_steps_locked();
}

std::vector<int> Coordinator::comm_failed(int rank, std::uint64_t generation, std::uint64_t step,
                                          const std::vector<std::uint32_t>& lost) {
  std::lock_guard lock(mu_);
  member(rank);
  std::vector<int> declared;
  for (std::uint32_t r : lost) {
    if (r >= static_cast<std::uint32_t>(options_.world_size) || static_cast<int>(r) == rank) continue;
    Member& d = members_[r];
    // Not a later incarnation that already moved on to a newer generation.
    if (d.gone || d.awaiting_restart || d.generation > generation) continue;
    const std::string why = cat("is gone (rank ", rank, "'s communicator of generation ", generation,
                                " lost it at step ", step, ")");
    if (d.connected) {
      lost_locked(static_cast<int>(r), why);
      declared.push_back(static_cast<int>(r));
      continue;
    }
    // Not connected to this coordinator process (it died while a restarted
    // coordinator was coming up, or before it said hello): lost all the same.
    d.connected = true;
    ++stats_.connected;
    lost_locked(static_cast<int>(r), why);
  }
  if (generation == generation_ && !rebuild_pending_) {
    rebuild_pending_ = true;
    ANTDT_WARN("coordinator: rank ", rank, "'s communicator of generation ", generation, " failed at step ", step,
               ": every rank moves to a new generation at step ", highest_frozen_ + 1);
  }
  return declared;
}

void Coordinator::maybe_checkpoint(bool force) {
  std::lock_guard lock(mu_);
  checkpoint_locked(force);
}

void Coordinator::checkpoint_locked(bool force) {
  if (!dds_ || options_.checkpoint_path.empty()) return;
  const auto now = Clock::now();
  const bool by_time = now - last_checkpoint_ >= options_.checkpoint_interval;
  const bool by_steps = options_.checkpoint_steps > 0 &&
                        stats_.steps_closed - closed_at_checkpoint_ >= options_.checkpoint_steps;
  if (!force && !by_time && !by_steps) return;
  dds_->checkpoint(options_.checkpoint_path);
  last_checkpoint_ = now;
  closed_at_checkpoint_ = stats_.steps_closed;
  ++stats_.checkpoints;
}

bool Coordinator::all_exited_locked() const {
  bool any = false;
  for (const auto& m : members_) {
    if (!m.ever_connected || m.gone) continue;  // a rank lost for good never says bye
    any = true;
    if (!m.exited) return false;
  }
  return any;
}

CoordinatorStats Coordinator::stats() const {
  std::lock_guard lock(mu_);
  CoordinatorStats s = stats_;
  s.generation = generation_;
  return s;
}

sched::DdsProgress Coordinator::progress() const {
  std::lock_guard lock(mu_);
  return dds_ ? dds_->progress() : sched::DdsProgress{};
}

bool Coordinator::all_exited() const {
  std::lock_guard lock(mu_);
  return all_exited_locked();
}

// ---------------------------------------------------------------------------
// CoordinatorService
// ---------------------------------------------------------------------------
namespace {
constexpr auto kHelloTimeout = std::chrono::seconds(5);
// A message that started arriving completes within a round trip; a rank whose
// message stops halfway for this long is broken (or stopped) and counts as lost.
constexpr auto kFrameTimeout = std::chrono::seconds(5);
}

CoordinatorService::CoordinatorService(CoordinatorOptions options, const net::Endpoint& listen,
                                       std::span<const std::byte> secret, std::chrono::milliseconds send_timeout,
                                       std::size_t max_unauthenticated)
    : max_unauthenticated_(max_unauthenticated), coordinator_(std::make_unique<Coordinator>(std::move(options))),
      arbiters_(send_timeout, send_timeout), secret_(secret.begin(), secret.end()), send_timeout_(send_timeout) {
  if (max_unauthenticated_ == 0)
    max_unauthenticated_ = fit_pending_cap(
        std::max<std::size_t>(kDefaultMaxPending, static_cast<std::size_t>(coordinator_->options().world_size)));
  ANTDT_CHECK_ARG(!secret_.empty(), "coordinator: the job secret is empty");
  listener_ = net::listen_on(listen.host, listen.port, &bound_);
  net::set_nonblocking(listener_.get());
  wake_fd_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) raise<TransportError>("eventfd failed: ", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

CoordinatorService::~CoordinatorService() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void CoordinatorService::stop() noexcept {
  stop_.store(true);
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_.get(), &one, sizeof one);
}

bool CoordinatorService::wait_all_exited(Clock::time_point deadline) const {
  while (!coordinator_->all_exited()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void CoordinatorService::run() {
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (!stop_.load()) {
    fds.clear();
    polled.clear();
    auto now = Clock::now();
    const bool listening = now >= listener_paused_until_;
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    fds.push_back({listening ? listener_.get() : -1, POLLIN, 0});
    auto wake_at = now + std::chrono::seconds(1);
    if (!listening) wake_at = std::min(wake_at, listener_paused_until_);
    for (const auto& c : connections_) {
      fds.push_back({c->link.fd(), POLLIN, 0});
      polled.push_back(c.get());
      if (c->rank < 0) wake_at = std::min(wake_at, c->hello_deadline);
      else if (c->reader.mid_frame()) wake_at = std::min(wake_at, c->frame_started + kFrameTimeout);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - now).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait + 1, 0, 1000)));
    if (rc < 0 && errno != EINTR) {
      ANTDT_WARN("coordinator: poll failed: ", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (stop_.load()) break;
    now = Clock::now();
    // Only the connections polled above (accept_new appends after them, and may close some).
    for (std::size_t i = 0; i < polled.size(); ++i) {
      Connection& c = *polled[i];
      if (!c.link) continue;
      bool keep = true;
      if (rc > 0 && (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) keep = serve(c);
      if (keep && c.rank < 0 && now >= c.hello_deadline) {
        unauthenticated_log_.warn("the connection from ", c.peer, " sent no hello within ", kHelloTimeout.count(),
                                  " s: closed");
        keep = false;
      } else if (keep && c.rank >= 0 && c.reader.mid_frame() && now >= c.frame_started + kFrameTimeout) {
        ANTDT_WARN("coordinator: rank ", c.rank, " sent part of a message and nothing more for ",
                   kFrameTimeout.count(), " s: connection closed");
        if (!c.said_bye) coordinator_->lost(c.rank);
        keep = false;
      }
      if (!keep) c.link = control::Link();
    }
    // After the hellos that arrived were read: a rank that answered its
    // challenge is in before newer connections can push it out of the cap.
    if (rc > 0 && (fds[1].revents & POLLIN)) accept_new();
    answer_round();
    arbiters_.tidy(Clock::now());
    std::erase_if(connections_, [](const auto& c) { return !c->link; });
    try {
      coordinator_->maybe_checkpoint();
    } catch (const Error& e) {
      ANTDT_WARN("coordinator: checkpoint failed: ", e.what());
    }
  }
  // Ending the service ends every connection; ranks still connected see it as a lost coordinator.
  connections_.clear();
}

bool CoordinatorService::drop_oldest_unauthenticated(const std::string& why) {
  for (const auto& c : connections_) {
    if (c->rank >= 0 || !c->link) continue;
    unauthenticated_log_.warn("closed the connection from ", c->peer, " before its hello: ", why);
    c->link = control::Link();
    return true;
  }
  return false;
}

void CoordinatorService::accept_new() {
  // Bounded per round, so that a flood of connections cannot starve the ranks'.
  for (std::size_t n = 0; n < max_unauthenticated(); ++n) {
    std::string peer;
    net::Fd fd;
    try {
      fd = net::accept_pending(listener_.get(), &peer);
    } catch (const BootstrapError& e) {
      // Out of descriptors: make room, or look at the listener again later instead of spinning.
      if (drop_oldest_unauthenticated(cat("making room (", e.what(), ")"))) continue;
      ANTDT_WARN("coordinator: ", e.what());
      listener_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    if (!fd) return;
    const auto waiting = static_cast<std::size_t>(std::count_if(
        connections_.begin(), connections_.end(), [](const auto& c) { return c->rank < 0 && c->link; }));
    // The oldest goes first: a rank answers its challenge within a round trip.
    if (waiting >= max_unauthenticated())
      drop_oldest_unauthenticated(cat(waiting, " connections were awaiting their hello (the cap); the oldest goes first"));
    auto c = std::make_unique<Connection>();
    c->link = control::Link(std::move(fd));
    c->peer = std::move(peer);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(c->challenge.nonce.data()),
                   static_cast<int>(c->challenge.nonce.size())) != 1) {
      ANTDT_WARN("coordinator: RAND_bytes failed; connection from ", c->peer, " closed");
      continue;
    }
    // A few dozen bytes into a new socket's empty buffer: this send never waits.
    try {
      c->link.send(encode(c->challenge), Clock::now() + send_timeout_);
    } catch (const Error& e) {
      unauthenticated_log_.warn("connection from ", c->peer, " lost before its challenge: ", e.what());
      continue;
    }
    c->hello_deadline = Clock::now() + kHelloTimeout;
    connections_.push_back(std::move(c));
  }
}

bool CoordinatorService::serve(Connection& c) {
  const bool was_mid_frame = c.reader.mid_frame();
  std::optional<Bytes> frame;
  try {
    frame = c.reader.read_some(c.link.fd());
  } catch (const BootstrapError& e) {
    if (c.rank < 0) unauthenticated_log_.warn("refused a connection from ", c.peer, ": ", e.what());
    if (c.rank >= 0 && !c.said_bye) coordinator_->lost(c.rank);
    return false;
  } catch (const Error&) {
    if (c.rank >= 0 && !c.said_bye) coordinator_->lost(c.rank);
    return false;
  }
  if (!frame) {
    if (!was_mid_frame && c.reader.mid_frame()) c.frame_started = Clock::now();
    return true;
  }
  return handle(c, *frame);
}

bool CoordinatorService::handle(Connection& c, const Bytes& frame) {
  // Replies to a connection not yet authenticated are a welcome after a challenge
  // (both small): they fit its socket buffer and these sends never wait either.
  const auto deadline = Clock::now() + send_timeout_;
  if (c.rank < 0 && coll::partial::is_arbiter_hello(frame)) {
    hand_to_arbiter(c, frame);
    return false;  // the link is the arbiter's now, or refused and closed
  }
  if (c.rank < 0) {
    Welcome welcome;
    try {
      const Hello hello = decode_hello(frame);
      if (!verify(secret_, c.challenge, hello)) {
        welcome.reason = cat("rank ", hello.rank, " could not prove the job secret (wrong ANTDT_SECRET)");
      } else if (hello.world_size != static_cast<std::uint32_t>(coordinator_->options().world_size)) {
        welcome.reason = cat("rank ", hello.rank, " believes the job has ", hello.world_size, " ranks, the coordinator has ",
                             coordinator_->options().world_size);
      } else {
        welcome = coordinator_->hello(static_cast<int>(hello.rank), hello.incarnation, hello.generation,
                                      hello.reconnect);
        if (welcome.accepted) {
          c.rank = static_cast<int>(hello.rank);
          c.reader.set_limit(control::kMaxFrameBytes);
        }
      }
    } catch (const Error& e) {
      welcome.reason = e.what();
    }
    if (!welcome.accepted) unauthenticated_log_.warn("refused a connection: ", welcome.reason);
    try {
      c.link.send(encode(welcome), deadline);
    } catch (const Error&) {
      if (c.rank >= 0) coordinator_->lost(c.rank);
      return false;
    }
    return welcome.accepted;
  }
  Bytes reply;
  bool close_after = false;
  try {
    const Envelope envelope = decode_envelope(frame);
    const Request& request = envelope.request;
    if (envelope.report) coordinator_->report(c.rank, *envelope.report);
    reply = std::visit(
        [&](const auto& m) -> Bytes {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, PlanRequest>) {
            return encode(coordinator_->plan(c.rank, m.step, m.fetch_max));
          } else if constexpr (std::is_same_v<T, Report>) {
            coordinator_->report(c.rank, m);
            return encode(Ack{});
          } else if constexpr (std::is_same_v<T, Fetch>) {
            return encode(coordinator_->fetch(c.rank, m.max_samples));
          } else if constexpr (std::is_same_v<T, Commit>) {
            return encode(Ack{coordinator_->commit(c.rank, m.lease)});
          } else if constexpr (std::is_same_v<T, GiveBack>) {
            return encode(Ack{coordinator_->give_back(c.rank, m.lease)});
          } else if constexpr (std::is_same_v<T, RequestRestart>) {
            coordinator_->request_restart(c.rank);
            return encode(Ack{});
          } else if constexpr (std::is_same_v<T, OfferId>) {
            coordinator_->offer_id(c.rank, m.generation, m.id);
            return encode(Ack{});
          } else if constexpr (std::is_same_v<T, JoinGeneration>) {
            return encode(coordinator_->join(c.rank, m.generation));
          } else if constexpr (std::is_same_v<T, CommFailed>) {
            // Ranks declared lost here may still hold a connection (their
            // process is gone, the close not seen yet): it ends now.
            for (int gone : coordinator_->comm_failed(c.rank, m.generation, m.step, m.lost))
              for (auto& other : connections_)
                if (other.get() != &c && other->rank == gone && other->link) {
                  other->said_bye = true;  // counted as lost already
                  other->link = control::Link();
                }
            return encode(Ack{});
          } else {
            static_assert(std::is_same_v<T, Bye>);
            coordinator_->bye(c.rank, m.restarting);
            c.said_bye = true;
            close_after = true;
            return encode(Ack{});
          }
        },
        request);
  } catch (const BootstrapError& e) {
    // Garbage from an authenticated rank: its side is broken; treat it as lost.
    ANTDT_WARN("coordinator: rank ", c.rank, " sent a malformed message (", e.what(), "): connection closed");
    coordinator_->lost(c.rank);
    return false;
  } catch (const Error& e) {
    reply = encode(ErrorReply{e.status(), e.what()});
  }
  // Answered once the round's changes are durable (answer_round).
  pending_.push_back({&c, std::move(reply), close_after});
  return true;
}

void CoordinatorService::hand_to_arbiter(Connection& c, const Bytes& frame) {
  coll::partial::ArbiterAnswer refusal;
  try {
    const auto hello = coll::partial::decode_arbiter_hello(frame);
    // The MAC covers the challenge frame exactly as it was sent.
    if (coll::partial::verify_arbiter_hello(secret_, encode(c.challenge), hello)) {
      arbiters_.adopt(hello, c.link.release());
      return;
    }
    refusal.reason = cat("rank ", hello.rank, " could not prove the job secret to the arbiter (wrong ANTDT_SECRET)");
  } catch (const Error& e) {
    refusal.reason = e.what();
  }
  unauthenticated_log_.warn("refused an arbiter link from ", c.peer, ": ", refusal.reason);
  try {
    c.link.send(encode(refusal), Clock::now() + send_timeout_);
  } catch (const Error&) {
  }
}

void CoordinatorService::answer_round() {
  try {
    coordinator_->sync();
  } catch (const Error& e) {
    // An answer must never promise what a restart would forget: stop serving.
    ANTDT_WARN("coordinator: cannot write the data sharding state: ", e.what(), "; the coordinator stops");
    {
      std::lock_guard lock(failure_mu_);
      failure_ = e.what();
    }
    pending_.clear();
    stop_.store(true);
    return;
  }
  const auto deadline = Clock::now() + send_timeout_;
  for (Pending& p : pending_) {
    Connection& c = *p.connection;
    if (!c.link) continue;
    try {
      c.link.send(p.reply, deadline);
    } catch (const Error&) {
      if (!c.said_bye) coordinator_->lost(c.rank);
      c.link = control::Link();
      continue;
    }
    if (p.close_after) c.link = control::Link();
  }
  pending_.clear();
}

std::string CoordinatorService::failure() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

}  // namespace antdt::sched::coord
