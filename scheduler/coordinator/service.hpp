// The coordinator (DESIGN §9, docs/scheduler.md "Agent and coordinator"):
// hosts the job's Dds, a Monitor and the Controller, and serves every rank's
// Agent over an authenticated TCP protocol (scheduler/coordinator/wire.hpp).
//
// Coordinator is the logic alone, driven by one call per request (unit-tested
// without sockets). CoordinatorService runs it on its own thread behind a
// listener: embedded in rank 0 by default, or in tools/antdt-coordinator.
//
// Beyond the Controller's plans it owns three things every rank must agree on,
// fixed for a step the first time any rank asks for that step's plan:
//  - stop: the data is consumed (Dds finished), every rank leaves its loop;
//  - restarts: ranks that exit with the restart code before the step;
//  - generation: the communicator generation of the step. A step with restarts
//    (or the first step after an unordered restart, a lost rank or a failed
//    communicator) starts a new generation: every member re-creates its
//    communicator with the UniqueId the generation's first member offers
//    (offer_id), which the others fetch (join). Its members are the ranks not
//    lost for good, in rank order (a rank lost with restarts left stays a
//    member: its next incarnation joins).
#pragma once

#include <antdt/scheduler.hpp>

#include "core/bootstrap_drop_log.hpp"
#include "core/control.hpp"
#include "core/control_reader.hpp"
#include "scheduler/controller.hpp"
#include "scheduler/coordinator/wire.hpp"
#include "scheduler/dds.hpp"
#include "scheduler/dds_store.hpp"
#include "collectives/partial/arbiter_host.hpp"
#include "collectives/telemetry/monitor.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace antdt {
struct Config;
}

namespace antdt::sched::coord {

struct CoordinatorOptions {
  int world_size = 1;
  std::uint64_t dataset_size = 0;       // samples served by the Dds; 0: no data sharding (fetch is an error)
  sched::DdsOptions dds;                // world_size is taken from world_size
  std::uint64_t global_batch = 0;       // B for the Controller; 0: 32 per rank
  // The policy by name and its JSON configuration; empty name: ANTDT_POLICY /
  // ANTDT_POLICY_CONFIG (Controller::from_config).
  std::string policy;
  std::string policy_config = "{}";
  telemetry::MonitorConfig monitor;
  // Dds checkpoint (empty: none): written every checkpoint_interval and every
  // checkpoint_steps closed steps (0: not by steps), and when the job ends;
  // restored at start when the file exists.
  std::string checkpoint_path;
  std::chrono::milliseconds checkpoint_interval{10000};
  std::uint64_t checkpoint_steps = 0;
  // The Dds state in an SQLite database (empty: none; docs/dds.md "Durable
  // state"): every change is written before the request that made it is
  // answered, so a kill -9 of the coordinator loses and repeats no commit.
  // Resumed at start when the database holds a state (else imported from
  // checkpoint_path when that file exists).
  std::string database_path;
  // antdt-coordinator exits (non-zero) once no rank has been connected for this long.
  std::chrono::milliseconds grace{120000};
  // Restarts the launcher grants each rank (antdt-run --restarts, ANTDT_MAX_RESTARTS):
  // a rank lost (gone without bye) while its incarnation is below this comes
  // back; one lost at or above it is lost for good and the job goes on without it.
  int max_restarts = 0;
  // Runs inside rank 0's process: an order to restart rank 0 is not carried out
  // (it would take the coordinator down with it), only logged.
  bool embedded = false;

  // From the process configuration: the Dds knobs (ANTDT_DDS_*), the Monitor's
  // (ANTDT_MONITOR_*), ANTDT_COORDINATOR_CHECKPOINT(_S), ANTDT_COORDINATOR_DB and ANTDT_COORDINATOR_GRACE_S.
  static CoordinatorOptions from(const Config& cfg, int world_size, std::uint64_t dataset_size,
                                 std::uint32_t epochs, std::uint64_t global_batch);
};

// The 16 bytes of ANTDT_SECRET, which ranks prove to the coordinator
// (ConfigError naming the variable when it is unset).
std::array<std::byte, 16> job_secret(const Config& cfg);

struct CoordinatorStats {
  std::uint64_t generation = 0;
  std::uint64_t steps_closed = 0;       // steps whose records went to the Controller
  std::uint64_t restarts_ordered = 0;   // ranks told to restart
  std::uint64_t restarts_done = 0;      // restarted ranks that came back
  std::uint64_t ranks_lost = 0;         // disconnections without bye
  std::uint64_t ranks_gone = 0;         // of those, lost for good (no restarts left)
  std::uint64_t dropped_reports = 0;    // steps reported with Fate::dropped
  std::uint64_t checkpoints = 0;
  std::uint64_t database_writes = 0;    // transactions written by sync() (one per round with changes)
  int connected = 0;
};

class Coordinator {
 public:
  // InvalidArgument naming the problem (world size, options); ConfigError when
  // options.checkpoint_path cannot be written (its directory is missing or not
  // writable); restores the Dds from options.checkpoint_path when that file exists.
  explicit Coordinator(CoordinatorOptions options);
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  ~Coordinator();

  // A rank proved the secret. Refused (accepted = false, with the reason) when
  // the rank is out of range or already connected. `reconnect`: the process
  // said hello before (to this or an earlier coordinator process), so a new
  // incarnation number is not a restart to handle.
  Welcome hello(int rank, std::uint32_t incarnation, std::uint64_t generation, bool reconnect = false);
  // fetch_max > 0: the plan also carries the step's batch (PlanRequest::fetch_max).
  Plan plan(int rank, std::uint64_t step, std::uint64_t fetch_max = 0);
  void report(int rank, const Report& report);
  BatchReply fetch(int rank, std::uint64_t max_samples);
  // False when the lease is not open or not this rank's (already settled,
  // revoked by a failure, or issued by an earlier coordinator process).
  bool commit(int rank, std::uint64_t lease);
  bool give_back(int rank, std::uint64_t lease);
  // The rank asks to be restarted: it is ordered to at the next step no rank has asked a plan for.
  void request_restart(int rank);
  void offer_id(int rank, std::uint64_t generation, const UniqueId& id);
  GenerationId join(int rank, std::uint64_t generation);
  // restarting: the rank exits to be started again (its samples stay queued for it).
  void bye(int rank, bool restarting);
  // The rank's connection ended without bye: its leases and DOING shards go back
  // (Dds::rank_failed), and the job moves to a new communicator generation: with
  // the rank's next incarnation while it has restarts left, else without it.
  void lost(int rank);
  // `rank`'s communicator of `generation` failed at `step`; `lost`: ranks its
  // transport knows are gone. Each of those whose incarnation is in that
  // generation or an older one is declared lost (as lost(); also one that is
  // not connected to this coordinator process, e.g. it died while a restarted
  // coordinator came up); returns those that were connected (the service
  // closes their connections). The job moves to a new generation when
  // `generation` is the current one.
  std::vector<int> comm_failed(int rank, std::uint64_t generation, std::uint64_t step,
                               const std::vector<std::uint32_t>& lost);
  // The job ranks of a generation, in communicator-rank order; empty while it is not planned.
  std::vector<std::uint32_t> members(std::uint64_t generation) const;
  // Writes the checkpoint when one is due (or `force`); no-op without a checkpoint path.
  void maybe_checkpoint(bool force = false);
  // Writes the changes since the last sync to the database in one transaction
  // (no-op without one, or without changes). The service calls it before it
  // sends the answers of a round of requests. Throws when the write fails:
  // nothing of the round may be answered then.
  void sync();
  // The job is done: the data is consumed (every epoch served, when there is
  // a dataset with an end) and every rank that connected said bye.
  bool job_complete() const;
  // Every epoch of a dataset with an end was committed (durably), whether or
  // not the ranks' byes reached this coordinator process: after a crash and
  // restart at the job's very end they went to the process before.
  bool data_finished() const;
  // How long no rank has been connected, once some rank was (or the state was
  // resumed from a database or checkpoint: ranks were there before); nullopt otherwise.
  std::optional<std::chrono::steady_clock::duration> all_gone_for() const;

  CoordinatorStats stats() const;
  sched::DdsProgress progress() const;  // zeros without a dataset
  // True once every rank that connected said bye without restarting.
  bool all_exited() const;
  const CoordinatorOptions& options() const noexcept { return options_; }

 private:
  struct Member {
    bool connected = false;
    bool ever_connected = false;
    bool exited = false;            // bye without restart
    bool restart_ordered = false;   // in a frozen step's restarts, not back yet
    bool unordered_restart = false; // came back with a new incarnation nobody ordered
    bool awaiting_restart = false;  // lost with restarts left: its next incarnation is expected
    bool gone = false;              // lost for good: not a member of later generations
    std::uint64_t gone_generation = 0;  // the generation it was lost in
    std::uint64_t generation = 0;   // the generation this incarnation is in (or joining)
    std::uint32_t incarnation = 0;
    std::uint64_t last_reported = 0;
    bool dropped_last = false;      // its latest report: the step's contribution was dropped
    bool sit_out_fetch = false;     // its next fetch gets nothing (it gave back a dropped batch)
    std::optional<std::uint64_t> restart_at;  // ordered, for the first step >= this one not yet frozen
  };
  Member& member(int rank);
  const sched::FrozenStep& frozen_locked(std::uint64_t step);
  void restore_plans(const sched::StoredState& stored);
  void close_steps_locked();
  void lost_locked(int rank, const std::string& why);
  std::vector<std::uint32_t> members_locked(std::uint64_t generation) const;
  BatchReply fetch_locked(Member& m, int rank, std::uint64_t max_samples);
  void schedule_restart_locked(int rank, std::uint64_t step, const char* why);
  void checkpoint_locked(bool force);
  bool all_exited_locked() const;

  CoordinatorOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<sched::Dds> dds_;
  std::unique_ptr<telemetry::Monitor> monitor_;
  std::unique_ptr<sched::Controller> controller_;
  std::vector<Member> members_;
  std::map<std::uint64_t, sched::FrozenStep> frozen_;  // the plans handed out, kept for slower ranks
  std::uint64_t highest_frozen_ = 0;
  std::uint64_t generation_ = 0;
  std::map<std::uint64_t, std::uint64_t> generation_start_;  // generation -> its first step
  std::map<std::uint64_t, UniqueId> generation_ids_;          // offered by the generation's first member
  std::map<std::uint64_t, std::vector<std::uint32_t>> generation_members_;  // generations after the first
  std::set<std::uint64_t> abandoned_;  // generations a member was lost from before they formed
  std::optional<std::uint64_t> formed_;  // the newest generation a rank reported a step on
  bool rebuild_pending_ = false;                              // an unordered restart needs a new generation
  std::map<std::uint64_t, int> lease_owner_;                  // leases issued by this process
  std::map<std::uint64_t, std::vector<telemetry::StepRecord>> records_;  // per step, until it closes
  std::uint64_t next_close_ = 1;
  std::chrono::steady_clock::time_point last_checkpoint_;
  std::uint64_t closed_at_checkpoint_ = 0;
  CoordinatorStats stats_;
  std::unique_ptr<sched::DdsStore> store_;
  std::map<int, sched::SettleRecord> settled_;     // per rank: its latest settle and the answer it got
  std::vector<sched::SettleRecord> settled_dirty_; // not yet in the store
  std::vector<sched::LostRank> lost_dirty_;        // ranks lost for good (or back) since the last sync
  std::vector<sched::FrozenStep> frozen_dirty_;    // steps frozen since the last sync
  std::vector<sched::GenerationRecord> generations_dirty_;  // generations planned since the last sync
  std::uint64_t frozen_kept_from_dirty_ = 0;       // frozen steps below it dropped since the last sync
  std::optional<sched::OfferedId> offered_dirty_;  // an id offered since the last sync
  bool resumed_ = false;
  std::chrono::steady_clock::time_point idle_since_;
  void note_settled_locked(int rank, std::uint64_t lease, bool commit, bool ok);
  void note_lost_locked(int rank, bool gone);
  std::optional<bool> settled_answer_locked(int rank, std::uint64_t lease, bool commit) const;
};

// Runs a Coordinator behind a TCP listener on its own thread. The same
// listener takes the ranks' links to the partial collectives' arbiters, which
// run here (one thread each) when the ranks use an antdt-coordinator apart.
class CoordinatorService {
 public:
  // Listens on `listen` (host:port; port 0 = any). `secret`: the bytes ranks
  // must prove (the 16 bytes of ANTDT_SECRET or of the job's UniqueId).
  // `max_unauthenticated`: connections awaiting their hello at once (0: the
  // default, core/bootstrap_admission.hpp's kDefaultMaxPending or the world
  // size, fitted to the descriptor limit); the oldest goes first above it.
  CoordinatorService(CoordinatorOptions options, const net::Endpoint& listen, std::span<const std::byte> secret,
                     std::chrono::milliseconds send_timeout = std::chrono::seconds(5),
                     std::size_t max_unauthenticated = 0);
  ~CoordinatorService();  // stops the thread (a final checkpoint is written)
  CoordinatorService(const CoordinatorService&) = delete;
  CoordinatorService& operator=(const CoordinatorService&) = delete;

  const net::Endpoint& address() const noexcept { return bound_; }
  Coordinator& coordinator() noexcept { return *coordinator_; }
  // Blocks until every rank that connected said bye without restarting, or the deadline (false).
  bool wait_all_exited(std::chrono::steady_clock::time_point deadline) const;
  // Thread-safe: makes the service thread stop (the destructor waits for it).
  void stop() noexcept;
  // Why the service stopped by itself (its database could not be written), or empty.
  std::string failure() const;

 private:
  // Frames are read without blocking (control::FrameReader): a connection
  // that sends part of a frame holds its own buffer, never the service thread.
  struct Connection {
    control::Link link;
    control::FrameReader reader{kMaxHelloFrameBytes};  // the full frame limit once authenticated
    std::string peer;
    int rank = -1;  // -1 until its hello was accepted
    Challenge challenge;
    std::chrono::steady_clock::time_point hello_deadline;
    std::chrono::steady_clock::time_point frame_started;  // when reader.mid_frame() became true
    bool said_bye = false;
  };
  // A hello is some 70 bytes: an unauthenticated peer gets no more than this per frame.
  static constexpr std::size_t kMaxHelloFrameBytes = 1024;
  void run();
  void accept_new();
  bool drop_oldest_unauthenticated(const std::string& why);
  // False when the connection must close.
  bool serve(Connection& c);
  bool handle(Connection& c, const Bytes& frame);
  // Connections awaiting their hello at once: room for every rank, and no more
  // than this for a flood of connections without the secret.
  std::size_t max_unauthenticated() const noexcept { return max_unauthenticated_; }
  std::size_t max_unauthenticated_;

  // Answers are sent only once the round's changes are durable (Coordinator::sync).
  struct Pending {
    Connection* connection;
    Bytes reply;
    bool close_after;  // bye: the connection ends once the answer is out
  };
  void answer_round();

  // An arbiter hello: the link leaves this service for the partial
  // collectives' arbiter of its communicator (docs/partial.md#where-the-arbiter-runs).
  void hand_to_arbiter(Connection& c, const Bytes& frame);

  std::unique_ptr<Coordinator> coordinator_;
  coll::partial::ArbiterHost arbiters_;
  std::vector<Pending> pending_;
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::vector<std::byte> secret_;
  std::chrono::milliseconds send_timeout_;
  net::Fd listener_;
  net::Endpoint bound_;
  net::Fd wake_fd_;
  std::vector<std::unique_ptr<Connection>> connections_;  // in accept order: the oldest first
  std::chrono::steady_clock::time_point listener_paused_until_{};  // out of descriptors: accept later
  std::atomic<bool> stop_{false};
  DropLog unauthenticated_log_{"coordinator"};  // service thread only
  std::thread thread_;
};

}  // namespace antdt::sched::coord
