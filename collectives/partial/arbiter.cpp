#include "collectives/partial/arbiter.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace antdt::coll::partial {
namespace {

// Before the Monitor has measured anything, and as a floor afterwards.
constexpr double kMinGraceSeconds = 0.001;
// The grace is at least this fraction of the expected step (0.25 and 0.1
// measured alike for a 3x-slow rank; 0.1 wastes less on transient spikes): a healthy rank
// that is a little late (it served a catch-up, its OS scheduled it late) is
// waited for; only ranks late by a good part of a step are skipped.
constexpr double kMinGraceStepFraction = 0.1;
// With defer a late contribution is not lost: it joins the next step, and the
// late rank fetches the result it missed. Waiting for it is then worth what
// deferring it costs: the push of the missed result (one transfer), and a next
// step that carries the deferred contribution, whose contributors then have
// unequal weights and take the weighted ring (about one transfer more). So the
// grace is kDeferGraceTransfers of the ranks' typical transfer time, or their
// measured arrival jitter, with a floor for wake-ups. (Measured with 10% 5x
// spikes on 4 ranks: 4 KiB gradients 1.40x BSP with a 2 ms grace, 1.51x with
// 0.3 ms; 1 MiB gradients 1.33-1.40x with one transfer (0.6-1.0 ms), 1.45-1.49x
// with 1.5 ms, 1.42x with 3 ms, 1.30x with 0.3 ms; docs/benchmarks.md.)
constexpr double kMinDeferGraceSeconds = 0.0002;
constexpr double kDeferGraceTransfers = 2.0;

}  // namespace

ArbiterConfig ArbiterConfig::from(const Config& cfg, int ranks) {
  ArbiterConfig a;
  a.ranks = ranks;
  a.result_cache = cfg.result_cache;
  a.quorum = cfg.partial_quorum;
  a.grace_s = cfg.partial_grace_ms / 1000.0;
  a.warmup_steps = cfg.partial_warmup;
  a.monitor = telemetry::MonitorConfig::from(cfg);
  return a;
}

Arbiter::Arbiter(const ArbiterConfig& cfg)
    : cfg_(cfg), monitor_(cfg.ranks, cfg.monitor), ranks_(static_cast<std::size_t>(cfg.ranks)) {
  ANTDT_CHECK_ARG(cfg.ranks >= 1, "arbiter needs at least one rank");
  ANTDT_CHECK_ARG(cfg.result_cache >= 2, "result cache must hold at least 2 results");
}

double Arbiter::grace_seconds() const {
  if (cfg_.grace_s > 0) return cfg_.grace_s;
  if (policy_ == LatePolicy::defer)
    return std::max(
        {kMinDeferGraceSeconds, monitor_.measured_jitter(), kDeferGraceTransfers * monitor_.expected_transfer()});
  return std::max({kMinGraceSeconds, monitor_.grace(), kMinGraceStepFraction * monitor_.expected_step()});
}

void Arbiter::fail_all(Status status, const std::string& reason, std::vector<Out>& out) {
  failed_ = reason;
  failed_status_ = status;
  for (int r = 0; r < cfg_.ranks; ++r)
    if (!ranks_[static_cast<std::size_t>(r)].lost) out.push_back({r, Failure{status, reason}});
}

std::string Arbiter::describe(int rank) const {
  return cfg_.describe_rank ? cfg_.describe_rank(rank) : cat("rank ", rank);
}

namespace {

// Every rank that takes part in `d`'s data movement, once each.
template <class F>
void for_each_participant(const Decision& d, int ranks, F&& f) {
  std::vector<bool> seen(static_cast<std::size_t>(ranks));
  auto visit = [&](int r) {
    if (r < 0 || seen[static_cast<std::size_t>(r)]) return;
    seen[static_cast<std::size_t>(r)] = true;
    f(r);
  };
  for (const auto& c : d.contributors) visit(c.rank);
  for (const auto& c : d.catchups) visit(c.rank);
  visit(d.server);
}

// Built in place: moving a temporary Out holding an Abandon makes GCC 12 warn
// (falsely) that the Decision alternative may be used uninitialized.
void push_abandon(std::vector<Arbiter::Out>& out, int rank, const Abandon& abandon) {
  auto& o = out.emplace_back();
  o.rank = rank;
  o.message.emplace<Abandon>(abandon);
}

bool contributed(const Decision& d, int rank) {
  return std::any_of(d.contributors.begin(), d.contributors.end(), [&](const auto& c) { return c.rank == rank; });
}

}  // namespace

std::vector<StragglerClass> Arbiter::classes() const {
  std::vector<StragglerClass> out;
  out.reserve(ranks_.size());
  for (int r = 0; r < cfg_.ranks; ++r)
    out.push_back(ranks_[static_cast<std::size_t>(r)].lost ? StragglerClass::lost : monitor_.classify(r));
  return out;
}

void Arbiter::record_compute(const Arrival& a) {
  if (a.compute_s <= 0) return;
  telemetry::StepRecord rec;
  rec.rank = a.rank;
  rec.step = a.step;
  rec.compute_s = a.compute_s;
  rec.transfer_s = a.transfer_s;
  rec.step_s = a.compute_s + a.transfer_s;
  rec.samples = a.samples;
  monitor_.record(rec);
}

void Arbiter::record_decision(const Decision& d) {
  recent_[d.step] = d;
  for_each_participant(d, cfg_.ranks, [&](int r) { ranks_[static_cast<std::size_t>(r)].last_decided = d.step; });
  while (!recent_.empty() && recent_.begin()->first + cfg_.result_cache < d.step) recent_.erase(recent_.begin());
}

bool Arbiter::has_lost_participant(const Decision& d) const {
  bool lost = false;
  for_each_participant(d, cfg_.ranks, [&](int r) { lost |= ranks_[static_cast<std::size_t>(r)].lost; });
  return lost;
}

void Arbiter::start_resolution(std::uint64_t step, int lost, Clock::time_point now, std::vector<Out>& out) {
  if (resolving_.count(step) != 0) return;
  auto& res = resolving_[step];
  res.lost = lost;
  res.asked.assign(static_cast<std::size_t>(cfg_.ranks), false);
  resolve(step, now, out);
}

void Arbiter::resolve_all(Clock::time_point now, std::vector<Out>& out) {
  std::vector<std::uint64_t> steps;
  for (const auto& [step, res] : resolving_) steps.push_back(step);
  for (auto step : steps) resolve(step, now, out);
}

void Arbiter::resolve(std::uint64_t step, Clock::time_point now, std::vector<Out>& out) {
  auto res_it = resolving_.find(step);
  auto dec_it = recent_.find(step);
  if (res_it == resolving_.end()) return;
  if (dec_it == recent_.end()) {  // older than the result cache: nobody can be waiting for it any more
    resolving_.erase(res_it);
    return;
  }
  Resolution& res = res_it->second;
  const Decision& d = dec_it->second;
  std::vector<int> completed, retried, to_ask;
  bool unknown = false;
  for_each_participant(d, cfg_.ranks, [&](int r) {
    auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.lost) return;
    if (s.holds >= step) {
      completed.push_back(r);
    } else if (s.retry && s.last_decided == step) {
      retried.push_back(r);
    } else {
      unknown = true;
      // In the data movement (it gives up and retries) or computing after it
      // completed (it ignores a stale Abandon): only its next word tells.
      if (!res.asked[static_cast<std::size_t>(r)]) {
        res.asked[static_cast<std::size_t>(r)] = true;
        to_ask.push_back(r);
      }
    }
  });
  for (int r : to_ask) push_abandon(out, r, Abandon{step, d.generation, res.lost});
  if (unknown) return;
  const int lost = res.lost;
  resolving_.erase(res_it);
  ++generation_;  // nothing of the attempt given up may match what follows
  if (!completed.empty()) {
    // Some survivor holds the step's result: the others fetch it, as late
    // ranks do, with their contributions counted in it.
    ANTDT_INFO("partial collectives: step ", step, " completed on ", completed.size(), " rank(s) although ",
               describe(lost), " was lost; ", retried.size(), " rank(s) fetch its result");
    for (int r : retried) {
      auto& s = ranks_[static_cast<std::size_t>(r)];
      const Arrival a = *s.retry;
      s.retry.reset();
      if (open_step_ - a.step + 1 > cfg_.result_cache) {
        out.push_back({r, Failure{Status::resync, cat("rank ", r, " is ", open_step_ - a.step,
                                                       " steps behind after giving up step ", step,
                                                       "; only ", cfg_.result_cache, " results are kept")}});
        continue;
      }
      s.role = Role::catch_up;
      s.based_on = a.step;
      s.last_arrival = a.step;
      s.weight = 0;
      s.included_at = contributed(d, r) ? step : 0;
    }
    maybe_close(now, out);
    // The others may have finished meanwhile (they completed the step and
    // their run ended): no step can take the ranks that retried any more.
    finish_stragglers_if_run_over();
    maybe_finish(out);
    return;
  }
  // Nobody completed it: every survivor still holds its contribution. Run
  // the step again without the lost ranks.
  Decision again;
  again.step = step;
  again.generation = generation_;
  for (const auto& c : d.contributors)
    if (!ranks_[static_cast<std::size_t>(c.rank)].lost) again.contributors.push_back(c);
  for (const auto& c : d.catchups)
    if (!ranks_[static_cast<std::size_t>(c.rank)].lost) again.catchups.push_back(c);
  // The server pushes results up to this step: a contributor that was on
  // time for it holds every earlier one.
  auto holds_all = [&](int r) { return !ranks_[static_cast<std::size_t>(r)].lost && ranks_[static_cast<std::size_t>(r)].holds + 1 >= step; };
  if (d.server >= 0 && !ranks_[static_cast<std::size_t>(d.server)].lost) again.server = d.server;
  for (const auto& c : again.contributors)
    if (again.server < 0 && c.based_on == step && holds_all(c.rank)) again.server = c.rank;
  if (again.contributors.empty()) {
    // The lost rank was the step's only contributor: the step is now empty
    // (zeros, which every rank fills in itself); ranks at this step need no push.
    std::erase_if(again.catchups, [&](const CatchUp& c) {
      if (c.from_step != step) return false;
      if (again.server < 0) again.server = c.rank;
      return true;
    });
  }
  if (again.server < 0 && !again.catchups.empty()) {
    for (const auto& c : again.catchups)
      out.push_back({c.rank, Failure{Status::resync, cat("rank ", c.rank, " needs results that only the lost ",
                                                          describe(lost), " could send; reload the model and rejoin")}});
    again.catchups.clear();
  }
  if (again.server < 0 && !retried.empty()) again.server = retried.front();
  again.classes = classes();
  ANTDT_WARN("partial collectives: step ", step, " runs again among ", again.contributors.size(),
             " contributor(s): ", describe(lost), " was lost during it");
  record_decision(again);
  for_each_participant(again, cfg_.ranks, [&](int r) {
    ranks_[static_cast<std::size_t>(r)].retry.reset();
    out.push_back({r, again});
  });
  maybe_close(now, out);
  maybe_finish(out);
}

void Arbiter::on_arrival(const Arrival& a, Clock::time_point now, std::vector<Out>& out) {
  auto& s = ranks_[static_cast<std::size_t>(a.rank)];
  if (failed_) {
    out.push_back({a.rank, Failure{failed_status_, *failed_}});
    return;
  }
  s.holds = std::max(s.holds, a.holds);
  if (a.retry) {
    // It gave up its last decision's data movement (a rank of it was lost):
    // held until the step's outcome is known.
    s.retry = a;
    const auto step = s.last_decided;
    auto d = recent_.find(step);
    if (resolving_.count(step) != 0)
      resolve(step, now, out);
    else if (d != recent_.end() && has_lost_participant(d->second))
      start_resolution(step, -1, now, out);
    // else: the loss is not known here yet; on_rank_lost starts the resolution.
    return;
  }
  if (!signature_) {
    signature_ = a.signature;
    policy_ = a.policy;
    stale_synchronous_ = a.stale_synchronous && a.policy == LatePolicy::defer;
    staleness_ = a.staleness;
  } else if (*signature_ != a.signature) {
    fail_all(Status::mismatch,
             cat("rank ", a.rank, " called partial_allreduce for step ", a.step,
                 " with a different count, dtype, op, policy or staleness than the other ranks"),
             out);
    return;
  }
  if (s.role != Role::absent || s.finished) {
    fail_all(Status::internal, cat("rank ", a.rank, " arrived twice for step ", open_step_), out);
    return;
  }
  if (a.step > open_step_) {
    fail_all(Status::internal, cat("rank ", a.rank, " is at step ", a.step, " beyond the open step ", open_step_), out);
    return;
  }
  const std::uint64_t lateness = open_step_ - a.step;
  if (lateness + 1 > cfg_.result_cache) {
    // The results it missed are no longer kept anywhere: it must resynchronise.
    out.push_back({a.rank, Failure{Status::resync,
                                   cat("rank ", a.rank, " is ", lateness, " steps behind (at step ", a.step,
                                       ", open step ", open_step_, "); only ", cfg_.result_cache,
                                       " results are kept (ANTDT_RESULT_CACHE): reload the model and rejoin")}});
    return;
  }
  if (stale_synchronous_ && lateness > 0 && answer_late(a, now, out)) return;
  s.based_on = a.step;
  s.last_arrival = a.step;
  s.weight = a.weight;
  if (lateness == 0)
    s.role = a.weight > 0 ? Role::on_time : Role::catch_up;
  else if (a.weight > 0 && a.policy == LatePolicy::defer && lateness <= a.staleness)
    s.role = Role::deferred;
  else
    s.role = Role::catch_up;
  finish_stragglers_if_run_over();
  record_compute(a);
  if (stale_synchronous_ && s.role != Role::absent) announce_deposits(a.rank, out);
  maybe_close(now, out);
  maybe_finish(out);
  if (!resolving_.empty()) resolve_all(now, out);  // it completed the steps up to a.holds
}

int Arbiter::choose_depositary(int late, int besides) const {
  // Present at the open step: the deposit lands in it. Else the rank that
  // arrived for the latest step (it computes the open one): it lands when that
  // rank arrives, and the bound holds the steps for it meanwhile. Among equals,
  // the one holding the fewest deposits (its receives are on the step's path).
  int best = -1;
  auto key = [&](int r) {
    const auto& s = ranks_[static_cast<std::size_t>(r)];
    return std::make_tuple(s.role == Role::on_time ? 1 : 0, s.last_arrival,
                           -static_cast<std::int64_t>(s.held.size()));
  };
  for (int r = 0; r < cfg_.ranks; ++r) {
    const auto& s = ranks_[static_cast<std::size_t>(r)];
    if (r == late || r == besides || s.lost || s.finished || s.weight <= 0) continue;
    if (s.role != Role::on_time && s.role != Role::absent) continue;
    if (best < 0 || key(r) > key(best)) best = r;
  }
  return best;
}

bool Arbiter::contributes(int rank) const {
  if (rank < 0) return false;
  const auto role = ranks_[static_cast<std::size_t>(rank)].role;
  return role == Role::on_time || role == Role::deferred;
}

Arbiter::DepositFate Arbiter::settle_deposit(const Deposit& d, bool holder_contributes) {
  auto it = deposits_.find({d.from, d.step});
  ANTDT_ASSERT(it != deposits_.end());
  DepositFate fate;
  fate.lands = holder_contributes && !it->second.landed;
  it->second.landed |= fate.lands;
  if (--it->second.pending == 0) {
    fate.lost = !it->second.landed;
    deposits_.erase(it);
  }
  return fate;
}

void Arbiter::announce_deposits(int rank, std::vector<Out>& out) {
  auto& s = ranks_[static_cast<std::size_t>(rank)];
  if (s.announced == s.held.size()) return;
  Incoming incoming;
  incoming.deposits.assign(s.held.begin() + static_cast<std::ptrdiff_t>(s.announced), s.held.end());
  s.announced = s.held.size();
  auto& o = out.emplace_back();
  o.rank = rank;
  o.message.emplace<Incoming>(std::move(incoming));
}

bool Arbiter::answer_late(const Arrival& a, Clock::time_point now, std::vector<Out>& out) {
  auto& s = ranks_[static_cast<std::size_t>(a.rank)];
  Late late;
  late.step = a.step;
  if (a.weight > 0) {
    late.depositary = choose_depositary(a.rank);
    if (late.depositary < 0) return false;  // every other rank finished: the run's end handles it
    // A depositary that is not at the open step yet may be late for it (a
    // spike): a second rank holds the deposit too, and whichever contributes
    // first adds it, so the bound rarely has to hold a step for one rank.
    if (!contributes(late.depositary)) late.backup = choose_depositary(a.rank, late.depositary);
    auto& state = deposits_[{a.rank, a.step}];
    for (int holder : {late.depositary, late.backup}) {
      if (holder < 0) continue;
      state.holders[static_cast<std::size_t>(state.pending++)] = holder;
      ranks_[static_cast<std::size_t>(holder)].held.push_back(Deposit{holder, a.rank, a.step, a.weight, false});
    }
  }
  s.based_on = a.step;
  s.last_arrival = a.step;
  s.weight = a.weight;
  record_compute(a);
  late.fetches = std::move(s.ahead);
  s.ahead.clear();
  late.classes = classes();
  const int depositary = late.depositary, backup = late.backup;
  auto& o = out.emplace_back();
  o.rank = a.rank;
  o.message.emplace<Late>(std::move(late));
  // Its holders post their receives at once (a holder computing now reads
  // this at its next call), and so does this rank for what it holds itself.
  for (int holder : {a.rank, depositary, backup})
    if (holder >= 0) announce_deposits(holder, out);
  maybe_close(now, out);  // its arrival may be what the bound waited for
  return true;
}

void Arbiter::finish_stragglers_if_run_over() {
  bool someone_finished = false;
  for (const auto& s : ranks_) {
    if (s.lost) continue;
    if (s.role == Role::on_time) return;           // a step can still close
    if (!s.finished && s.role == Role::absent) return;  // a rank may still arrive on time
    someone_finished |= s.finished;
  }
  if (!someone_finished) return;
  for (auto& s : ranks_) {
    if (s.lost || s.role == Role::absent) continue;
    s.role = Role::absent;
    s.finished = true;
    s.applied_at_finish = s.based_on - 1;
  }
}

void Arbiter::maybe_close(Clock::time_point now, std::vector<Out>& out) {
  held_back_ = false;
  // While a step broken by a lost rank is being settled, no other step closes:
  // every decision then carries the generation that follows the settlement
  // (resolve() calls this again once it is done).
  if (!resolving_.empty()) return;
  int arrived_on_time = 0, arrived_deferred = 0, active = 0;
  bool all_done = true, missing_all_slow = true, any_arrived = false, any_finished = false, any_empty_at_open = false;
  for (int r = 0; r < cfg_.ranks; ++r) {
    const auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.role == Role::on_time) ++arrived_on_time;
    if (s.role == Role::deferred) ++arrived_deferred;
    any_finished |= s.finished;
    any_empty_at_open |= s.role == Role::catch_up && s.based_on == open_step_;
    any_arrived |= s.role != Role::absent;
    if (!s.lost && !s.finished) ++active;
    if (!done(s)) {
      all_done = false;
      const auto cls = monitor_.classify(r);
      // Stale-synchronous: a rank whose last arrival is older than the step
      // before the open one still computes an earlier step; it cannot be on
      // time for this one, and waiting the grace for it is waste.
      const bool behind = stale_synchronous_ && s.last_arrival + 1 < open_step_;
      if (cls != StragglerClass::deterministic && cls != StragglerClass::persistent && !behind)
        missing_all_slow = false;
    }
  }
  if (!any_arrived) return;
  if (all_done) {
    // Every rank here called with weight 0 and some are at the open step (no
    // data this step, e.g. the end of an epoch): the step closes empty.
    if (arrived_on_time > 0 || (!any_finished && any_empty_at_open)) close_step(out);
    // Only late ranks are left and everybody else finished: the finish
    // exchange serves them (maybe_finish), nothing to close here.
    return;
  }
  const bool bsp = policy_ == LatePolicy::wait ||
                   static_cast<int>(open_step_) <= cfg_.warmup_steps;
  if (bsp) return;
  const int quorum = std::max(1, static_cast<int>(std::ceil(cfg_.quorum * active - 1e-9)));
  // Stale-synchronous: ranks held at the bound arrive late on every step (their
  // lag never shrinks: they compute every step), yet their contributions are in
  // this step; counted, so that the on-time ranks alone need not make the quorum.
  const int counted = arrived_on_time + (stale_synchronous_ ? arrived_deferred : 0);
  if (arrived_on_time == 0 || counted < quorum) return;
  if (!quorum_at_) quorum_at_ = now;
  held_back_ = bound_holds_back();
  if (held_back_) return;  // the late rank's arrival calls maybe_close again
  if (missing_all_slow || now >= *quorum_at_ + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(grace_seconds())))
    close_step(out);
}

bool Arbiter::bound_holds_back() const {
  if (!stale_synchronous_) return false;
  // A rank whose newest arrival is for step l arrives next for l+1; once the
  // open step o closed, that arrival is o+1-(l+1) = o-l steps late, and is
  // deferred only while o-l <= staleness (and its missed results are kept
  // while o-l < result_cache).
  const std::uint64_t bound = std::min<std::uint64_t>(staleness_, cfg_.result_cache - 1);
  for (const auto& s : ranks_) {
    if (s.lost || s.finished) continue;
    if (s.role == Role::absent && open_step_ - s.last_arrival > bound) return true;
    // A deposit neither of whose holders contributes to this step lands in a
    // later one, at the earliest open_step_ + 1.
    for (const auto& d : s.held) {
      if (open_step_ + 1 - d.step <= staleness_) continue;
      const auto it = deposits_.find({d.from, d.step});
      if (it == deposits_.end() || it->second.landed) continue;
      if (!contributes(it->second.holders[0]) && !contributes(it->second.holders[1])) return true;
    }
  }
  return false;
}

void Arbiter::close_step(std::vector<Out>& out) {
  Decision d;
  d.step = open_step_;
  int on_time = 0;
  for (int r = 0; r < cfg_.ranks; ++r) on_time += ranks_[static_cast<std::size_t>(r)].role == Role::on_time ? 1 : 0;
  // An empty step (nobody at the open step has data): its result is zeros,
  // which the ranks at the open step know without a message; one of them
  // serves the ranks that are behind. A late contribution cannot land in it:
  // its ring would have no member holding the results before it, and no rank
  // could serve the step's result. It is dropped — its caller is told, and
  // the Agent gives the batch back — rather than made the step's only
  // contributor.
  const bool empty = on_time == 0;
  if (empty)
    for (auto& s : ranks_)
      if (s.role == Role::deferred) s.role = Role::catch_up;
  auto may_serve = [&](const RankState& s) {
    return empty ? s.role == Role::catch_up && s.based_on == open_step_ : s.role == Role::on_time;
  };
  int servers = 0;
  for (int r = 0; r < cfg_.ranks; ++r) {
    const auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.role == Role::on_time || s.role == Role::deferred) d.contributors.push_back({r, s.weight, s.based_on});
    if (s.role == Role::deferred) {
      if (s.first_missing) d.catchups.push_back({r, std::max(*s.first_missing, s.based_on), s.included_at});
    } else if (s.role == Role::catch_up && !(empty && may_serve(s))) {
      d.catchups.push_back({r, s.based_on, s.included_at});
    }
    servers += may_serve(s) ? 1 : 0;
  }
  ANTDT_ASSERT(servers > 0);
  // Serving late ranks costs the server time: rotate it over the on-time ranks.
  int pick = static_cast<int>(open_step_ % static_cast<std::uint64_t>(servers));
  for (int r = 0; r < cfg_.ranks && d.server < 0; ++r)
    if (may_serve(ranks_[static_cast<std::size_t>(r)]) && pick-- == 0) d.server = r;
  // Stale-synchronous: contributors add the deposits they hold (a present rank
  // that does not contribute drops its own), present ranks receive what was
  // pushed ahead to them, and absent ranks get this result pushed ahead.
  for (int r = 0; r < cfg_.ranks; ++r) {
    auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.role == Role::absent) {
      if (stale_synchronous_ && !s.lost && !s.finished) {
        d.ahead.push_back(r);
        s.ahead.push_back(Fetch{r, open_step_, d.server});
      }
      continue;
    }
    // (A holder that arrived with weight 0 does not contribute: the other
    // holder may still land the deposit; with no other, it is lost.)
    for (auto dep : s.held) {
      const auto fate = settle_deposit(dep, contributes(r));
      dep.drop = !fate.lands;
      if (fate.lost)
        ANTDT_WARN("partial collectives: the contribution of rank ", dep.from, " for step ", dep.step,
                   " is lost: its holder, rank ", r, ", arrived with weight 0");
      d.deposits.push_back(dep);
    }
    s.held.clear();
    s.announced = 0;
    d.fetches.insert(d.fetches.end(), s.ahead.begin(), s.ahead.end());
    s.ahead.clear();
  }
  monitor_.evaluate();
  d.classes = classes();
  d.generation = generation_;
  for (int r = 0; r < cfg_.ranks; ++r) {
    auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.role != Role::absent) out.push_back({r, d});
    // Present (on time, or sent what it missed): it holds every result up to
    // this step's, or the step's own through the ring. Absent: it lacks this
    // one (unless it is pushed ahead to it: stale-synchronous).
    if (s.role != Role::absent)
      s.first_missing.reset();
    else if (!s.first_missing && !stale_synchronous_)
      s.first_missing = open_step_;
    s.role = Role::absent;
    s.included_at = 0;
  }
  record_decision(d);
  ++open_step_;
  quorum_at_.reset();
  held_back_ = false;
}

void Arbiter::on_finish(const Finish& f, Clock::time_point now, std::vector<Out>& out) {
  auto& s = ranks_[static_cast<std::size_t>(f.rank)];
  if (failed_) {
    out.push_back({f.rank, Failure{failed_status_, *failed_}});
    return;
  }
  if (s.role != Role::absent || s.finished) {
    fail_all(Status::internal, cat("rank ", f.rank, " finished while it had a step pending"), out);
    return;
  }
  s.finished = true;
  s.applied_at_finish = f.applied;
  s.holds = std::max(s.holds, f.holds);
  maybe_close(now, out);  // the open step no longer waits for this rank
  finish_stragglers_if_run_over();
  maybe_finish(out);
  if (!resolving_.empty()) resolve_all(now, out);
}

void Arbiter::maybe_finish(std::vector<Out>& out) {
  for (const auto& s : ranks_)
    if (!s.finished && !s.lost) return;
  // Every rank finished: late ranks get the results they miss from a rank
  // that has them all, so that every rank can apply R_1..R_last.
  const std::uint64_t last = open_step_ - 1;
  Decision d;
  d.step = last;
  d.final = true;
  std::size_t dropped = 0;
  for (int r = 0; r < cfg_.ranks; ++r) {
    auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.lost) continue;
    if (s.applied_at_finish == last && d.server < 0) d.server = r;
    // Stale-synchronous: deposits that could not land any more are received
    // and discarded; results pushed ahead are received, and pushed again only
    // up to the first of them.
    for (auto dep : s.held) {
      dep.drop = true;
      dropped += settle_deposit(dep, false).lost ? 1 : 0;
      d.deposits.push_back(dep);
    }
    s.held.clear();
    s.announced = 0;
    const std::uint64_t until = s.ahead.empty() ? 0 : s.ahead.front().step - 1;
    d.fetches.insert(d.fetches.end(), s.ahead.begin(), s.ahead.end());
    s.ahead.clear();
    if (s.applied_at_finish < last && (until == 0 || s.applied_at_finish < until)) {
      if ((until == 0 ? last : until) - s.applied_at_finish + 1 > cfg_.result_cache) {
        out.push_back({r, Failure{Status::resync, cat("rank ", r, " finished ", last - s.applied_at_finish,
                                                       " results behind; only ", cfg_.result_cache, " are kept")}});
        continue;
      }
      // A rank that gave up a step others completed with its contribution
      // in it learns so here when the run ended meanwhile.
      d.catchups.push_back({r, s.applied_at_finish + 1, s.included_at, until});
    }
    s.included_at = 0;
  }
  if (dropped > 0)
    ANTDT_INFO("partial collectives: ", dropped, " late contribution(s) of the run's last steps were dropped: every "
               "rank finished before they could land (docs/partial.md#stale-synchronous-defer)");
  d.classes = classes();
  d.generation = generation_;
  for (int r = 0; r < cfg_.ranks; ++r) {
    auto& s = ranks_[static_cast<std::size_t>(r)];
    if (s.finished) out.push_back({r, d});
    s.finished = false;
  }
  // The next run of steps may use another count, dtype, op or policy.
  signature_.reset();
  for (auto& s : ranks_) s.last_arrival = 0;
}

void Arbiter::on_rank_lost(int rank, Clock::time_point now, std::vector<Out>& out) {
  auto& s = ranks_[static_cast<std::size_t>(rank)];
  if (s.lost) return;
  const bool was_waited_for = !s.finished;
  s.lost = true;
  s.role = Role::absent;
  s.retry.reset();
  ++lost_count_;
  bool anyone_waiting = false;
  for (const auto& o : ranks_) anyone_waiting |= !o.lost && (o.role != Role::absent || o.finished || o.retry);
  // Under drop/defer a lost rank is a straggler that never returns: steps
  // whose data movement it may have broken are settled among the survivors.
  if (policy_ != LatePolicy::wait && !stale_synchronous_) {
    std::vector<std::uint64_t> broken;
    for (const auto& entry : recent_) {
      // (not a structured binding: clang 14 cannot capture one in the lambda)
      const std::uint64_t step = entry.first;
      const Decision& d = entry.second;
      bool takes_part = false, unsettled = false;
      for_each_participant(d, cfg_.ranks, [&](int r) {
        takes_part |= r == rank;
        const auto& o = ranks_[static_cast<std::size_t>(r)];
        unsettled |= !o.lost && o.holds < step;
      });
      if (takes_part && unsettled) broken.push_back(step);
    }
    for (auto step : broken) start_resolution(step, rank, now, out);
  }
  if (!anyone_waiting) return;  // a normal shutdown, or nobody depends on it yet
  if ((policy_ == LatePolicy::wait || stale_synchronous_) && was_waited_for) {
    // Stale-synchronous: results were pushed ahead to it and deposits handed
    // to it; the callers (the NCCL shim) expect an error for a lost peer.
    fail_all(Status::peer_lost,
             cat("partial collectives (late policy ", stale_synchronous_ ? "defer, stale-synchronous" : "wait",
                 "): peer ", describe(rank),
                 " is lost (its control connection to the arbiter closed) while the others waited for it"),
             out);
    return;
  }
  ANTDT_WARN("partial collectives: ", describe(rank), " is lost (its control connection closed); the steps go on "
             "without it");
  maybe_close(now, out);
  finish_stragglers_if_run_over();  // the lost rank was the last one a step could wait for
  maybe_finish(out);
}

void Arbiter::on_tick(Clock::time_point now, std::vector<Out>& out) { maybe_close(now, out); }

std::optional<Clock::time_point> Arbiter::next_deadline() const {
  if (!quorum_at_ || held_back_ || !resolving_.empty()) return std::nullopt;  // held back: only an arrival can close the step
  return *quorum_at_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_seconds()));
}

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------
ArbiterService::ArbiterService(std::vector<net::Fd> links, const ArbiterConfig& cfg,
                               std::chrono::milliseconds send_timeout)
    : hub_(std::move(links)), arbiter_(cfg), send_timeout_(send_timeout), thread_rank_(cfg.thread_rank) {
  thread_ = std::thread([this] { run(); });
}

bool ArbiterService::any_straggler() const {
  for (int r = 0; r < arbiter_.monitor().nranks(); ++r)
    if (arbiter_.monitor().classify(r) != StragglerClass::healthy) return true;
  return false;
}

ArbiterService::~ArbiterService() {
  stop_.store(true);
  hub_.wake();
  thread_.join();
}

void ArbiterService::run() {
  log::set_thread_rank(thread_rank_);
  std::vector<Arbiter::Out> out;
  try {
    while (!stop_.load()) {
      const auto deadline = arbiter_.next_deadline().value_or(Clock::now() + std::chrono::seconds(1));
      auto msg = hub_.receive_any(deadline);
      const auto now = Clock::now();
      out.clear();
      if (!msg) {
        arbiter_.on_tick(now, out);
      } else if (msg->closed) {
        ANTDT_TRACE("arbiter: link of rank ", msg->rank, " closed");
        arbiter_.on_rank_lost(msg->rank, now, out);
        if (hub_.open_count() == 0) break;  // nobody left to answer
      } else {
        try {
          auto m = decode_to_arbiter(msg->payload, hub_.size());
          ANTDT_TRACE("arbiter: <- ", partial::summary(m));
          if (auto* a = std::get_if<Arrival>(&m)) {
            if (a->rank != msg->rank) raise<BootstrapError>("rank ", msg->rank, " sent an arrival as rank ", a->rank);
            arbiter_.on_arrival(*a, now, out);
          } else {
            const auto& f = std::get<Finish>(m);
            if (f.rank != msg->rank) raise<BootstrapError>("rank ", msg->rank, " sent a finish as rank ", f.rank);
            arbiter_.on_finish(f, now, out);
          }
        } catch (const BootstrapError& e) {
          ANTDT_WARN("partial-collective arbiter: garbage from rank ", msg->rank, ": ", e.what());
          out.push_back({msg->rank, Failure{Status::internal, e.what()}});
        }
      }
      for (const auto& o : out) {
        ANTDT_TRACE("arbiter: -> rank ", o.rank, ": ", partial::summary(o.message));
        try {
          auto bytes = std::visit([](const auto& m) { return encode(m); }, o.message);
          hub_.send(o.rank, bytes, Clock::now() + send_timeout_);
        } catch (const Error& e) {
          ANTDT_WARN("partial-collective arbiter: cannot reach rank ", o.rank, ": ", e.what());
        }
      }
    }
  } catch (const std::exception& e) {
    ANTDT_WARN("partial-collective arbiter stopped: ", e.what());
  }
  ended_.store(true);
  log::set_thread_rank(-1);
}

}  // namespace antdt::coll::partial
