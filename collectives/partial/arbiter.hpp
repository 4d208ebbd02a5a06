// The arbiter of partial collectives: decides, step by step, which ranks'
// contributions make up the step's result (docs/partial.md).
//
// Arbiter is the decision logic alone (no I/O, driven by events and a clock),
// so it is unit-tested deterministically. ArbiterService runs it on a thread
// of rank 0 (or of a standalone coordinator) over the control plane.
#pragma once

#include "core/control.hpp"
#include "collectives/telemetry/monitor.hpp"
#include "collectives/partial/partial_protocol.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace antdt::coll::partial {

using Clock = std::chrono::steady_clock;

struct ArbiterConfig {
  int ranks = 1;
  std::size_t result_cache = 4;        // K: a rank may be at most K-1 steps late
  double quorum = 0.5;                 // fraction of active ranks on time before closing without the rest
  double grace_s = 0;                  // 0: from the Monitor
  int warmup_steps = 5;                // steps closed as BSP while the Monitor learns
  telemetry::MonitorConfig monitor;
  // How messages name a rank ("rank 2 (pid 123 on host h)"); unset: "rank 2".
  std::function<std::string(int)> describe_rank;
  // How the arbiter thread's log lines are labelled: rank 0's thread, or -1
  // in a process that is no rank (antdt-coordinator).
  int thread_rank = 0;

  static ArbiterConfig from(const Config& cfg, int ranks);
};

class Arbiter {
 public:
  explicit Arbiter(const ArbiterConfig& cfg);

  struct Out {
    int rank;
    FromArbiter message;
  };
  void on_arrival(const Arrival& a, Clock::time_point now, std::vector<Out>& out);
  void on_finish(const Finish& f, Clock::time_point now, std::vector<Out>& out);
  void on_rank_lost(int rank, Clock::time_point now, std::vector<Out>& out);
  void on_tick(Clock::time_point now, std::vector<Out>& out);
  // When on_tick should run next (a grace period ends), if anything is pending.
  std::optional<Clock::time_point> next_deadline() const;

  std::uint64_t open_step() const noexcept { return open_step_; }
  const telemetry::Monitor& monitor() const noexcept { return monitor_; }
  double grace_seconds() const;

 private:
  enum class Role : std::uint8_t { absent, on_time, deferred, catch_up };
  struct RankState {
    Role role = Role::absent;
    double weight = 0;
    std::uint64_t based_on = 0;
    bool finished = false;
    std::uint64_t applied_at_finish = 0;
    bool lost = false;
    std::uint64_t last_arrival = 0;  // the step of its newest arrival in this run (stale-synchronous bound)
    // The oldest step that closed while this rank was absent and whose result
    // it has not been sent since. A deferred rank takes part in the ring of
    // every step it is present at, so it holds those results already: only
    // the steps from here on are pushed to it (none when it was never absent).
    std::optional<std::uint64_t> first_missing;
    // Dead ranks (docs/partial.md#dead-ranks):
    std::uint64_t holds = 0;         // the newest result it is known to hold (it completed every step to there)
    std::uint64_t last_decided = 0;  // the step of the last (non-final) decision sent to it
    std::optional<Arrival> retry;    // it gave up last_decided's data movement and waits for the outcome
    std::uint64_t included_at = 0;   // as a catch-up: its contribution is in this step's result after all
    // Stale-synchronous defer (docs/partial.md#stale-synchronous-defer):
    std::vector<Deposit> held;  // late ranks' contributions it adds to its own at its next contribution
    std::size_t announced = 0;  // held[0, announced) were sent to it in an Incoming
    std::vector<Fetch> ahead;   // results pushed ahead to it that it has not been told to receive yet
  };

  void maybe_close(Clock::time_point now, std::vector<Out>& out);
  // Stale-synchronous defer: closing the open step would leave an active rank
  // that has not arrived more steps behind than the run allows, or a deposit
  // its depositary holds would land later than the bound.
  bool bound_holds_back() const;
  // Stale-synchronous defer: a late arrival is answered at once (Late): the
  // rank hands its contribution to a depositary and does not wait for a step
  // to close. False when no rank can take the deposit (the others finished).
  bool answer_late(const Arrival& a, Clock::time_point now, std::vector<Out>& out);
  // The rank most likely to contribute soonest (present at the open step, else
  // the one furthest ahead), other than `late` and `besides`; -1 if none is active.
  int choose_depositary(int late, int besides = -1) const;
  // A held deposit's fate at its holder when a step closes (or the run ends):
  // it lands there when the holder contributes and its other holder has not
  // landed it; lost when this was its last holder and it never landed.
  struct DepositFate {
    bool lands = false;
    bool lost = false;
  };
  DepositFate settle_deposit(const Deposit& d, bool holder_contributes);
  bool contributes(int rank) const;
  void record_compute(const Arrival& a);
  // Stale-synchronous: tells `rank` of the deposits it holds that it was not
  // told of yet (its receives then overlap its wait for the step to close).
  void announce_deposits(int rank, std::vector<Out>& out);
  std::vector<StragglerClass> classes() const;
  void close_step(std::vector<Out>& out);
  void maybe_finish(std::vector<Out>& out);
  // When every other rank finished, late arrivals can never join a step:
  // they become finishes (their contribution dropped) and get the catch-up.
  void finish_stragglers_if_run_over();
  void fail_all(Status status, const std::string& reason, std::vector<Out>& out);
  std::string describe(int rank) const;
  void record_decision(const Decision& d);
  // A step whose data movement a lost rank may have broken: every survivor of
  // it either completed it (holds it) or gave it up (retry); those still
  // unheard of are told to give it up (Abandon). Once every one is known, the
  // step is settled: catch-up from a survivor that completed it, else re-run
  // among the survivors (resolve()).
  void start_resolution(std::uint64_t step, int lost, Clock::time_point now, std::vector<Out>& out);
  void resolve(std::uint64_t step, Clock::time_point now, std::vector<Out>& out);
  void resolve_all(Clock::time_point now, std::vector<Out>& out);
  bool has_lost_participant(const Decision& d) const;
  bool done(const RankState& s) const noexcept { return s.role != Role::absent || s.finished || s.lost; }

  ArbiterConfig cfg_;
  telemetry::Monitor monitor_;
  std::vector<RankState> ranks_;
  std::uint64_t open_step_ = 1;
  std::optional<std::uint64_t> signature_;  // of the current run of steps (reset by a finish)
  LatePolicy policy_ = LatePolicy::wait;
  bool stale_synchronous_ = false;   // of the current run
  std::uint32_t staleness_ = 1;      // of the current run
  bool held_back_ = false;           // the last maybe_close waited for the bound, not for the grace
  std::optional<Clock::time_point> quorum_at_;
  std::optional<std::string> failed_;  // after a fatal failure every arrival gets it
  Status failed_status_ = Status::internal;
  std::map<std::uint64_t, Decision> recent_;  // the last result_cache decisions, by step (resolutions need them)
  struct Resolution {
    int lost = -1;             // the rank whose loss started it
    std::vector<bool> asked;   // ranks sent an Abandon
  };
  std::map<std::uint64_t, Resolution> resolving_;
  std::uint32_t generation_ = 0;  // grows with every resolution (Decision::generation)
  // Stale-synchronous: every deposit not yet received by all its holders (the
  // depositary and the backup), by (late rank, its step).
  struct DepositState {
    std::array<int, 2> holders{-1, -1};
    int pending = 0;  // holders that have not received it yet
    bool landed = false;
  };
  std::map<std::pair<int, std::uint64_t>, DepositState> deposits_;
  int lost_count_ = 0;
};

// Runs an Arbiter on its own thread, serving one link per rank, until it is
// destroyed or every link closed.
class ArbiterService {
 public:
  ArbiterService(std::vector<net::Fd> links, const ArbiterConfig& cfg, std::chrono::milliseconds send_timeout);
  ~ArbiterService();
  ArbiterService(const ArbiterService&) = delete;
  ArbiterService& operator=(const ArbiterService&) = delete;

  // The Monitor's summary table (thread-safe: the Monitor locks).
  std::string summary() const { return arbiter_.monitor().summary_table(); }
  bool any_straggler() const;
  // Every rank's link closed: the communicator is gone (its thread has ended).
  bool ended() const noexcept { return ended_.load(); }

 private:
  void run();

  control::Hub hub_;
  Arbiter arbiter_;
  std::chrono::milliseconds send_timeout_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
  int thread_rank_;
  std::thread thread_;
};

}  // namespace antdt::coll::partial
