// Straggler injection (ANTDT_INJECT) for tests, perf tools and the demo.
//
//   ANTDT_INJECT="rank=2:slow=3;rank=*:spike_p=0.1,spike_x=5,spike_len=1;rank=1:slow=4,from_step=30;rank=0:delay_us=200"
//
// Clauses are separated by ';'. A clause is `rank=<R>:<key>=<value>,...` where
// <R> is a rank, a range A-B (inclusive) or * (every rank), or the clause is
// `seed=<N>` alone (the default seed of every clause). Keys:
//   slow=F        compute takes F times as long (F < 1 makes the rank faster)
//   spike_p=P     probability that a spike starts at a step (needs spike_x)
//   spike_x=F     compute factor during a spike
//   spike_len=L   steps a spike lasts (default 1)
//   from_step=S   slow and spikes apply from step S on (a persistent onset)
//   incarnation=I the clause applies only to incarnation I of the rank
//                 (ANTDT_INCARNATION): 0 models a bad node a restart moves off
//   delay_us=D    transport delay per message, microseconds
//   bw_mbps=M     cap on the rank's send bandwidth, 10^6 bytes/s (fault transport)
//   seed=N        seed of this clause's spikes
// Every clause that names a rank applies to it: factors multiply, delays add,
// the lowest bandwidth cap wins.
// docs/monitor.md has the full description. The parser lives here; Config
// (core/config.cpp) calls it so ANTDT_INJECT is validated with the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {
struct Config;
}

namespace antdt {

struct InjectClause {
  std::string text;          // as written, for messages
  int rank_first = -1;       // -1: every rank
  int rank_last = -1;
  double slow = 1;
  double spike_p = 0;
  double spike_x = 1;
  std::uint32_t spike_len = 1;
  std::uint64_t from_step = 0;
  std::optional<int> incarnation;  // unset: every incarnation
  std::uint64_t delay_us = 0;
  double bw_mbps = 0;        // 0: no cap
  std::optional<std::uint64_t> seed;

  bool applies_to(int rank) const noexcept { return rank_first < 0 || (rank >= rank_first && rank <= rank_last); }
};

struct InjectSpec {
  std::string text;  // the variable's value
  std::uint64_t seed = 0;
  std::vector<InjectClause> clauses;
};

// Raises ConfigError naming ANTDT_INJECT, the clause and the accepted keys.
InjectSpec parse_inject(std::string_view text);

// What ANTDT_INJECT does to one rank. Copyable; every query is a pure
// function of (seed, rank, step), so runs repeat exactly.
class Injector {
 public:
  Injector() = default;  // injects nothing
  // ConfigError when a clause names a rank outside [0, nranks). Clauses with
  // `incarnation=` apply only when it equals `incarnation`.
  Injector(const InjectSpec& spec, int rank, int nranks, int incarnation = 0);
  // From the process configuration (nothing when ANTDT_INJECT is unset), for
  // this process's incarnation (Config::incarnation).
  static Injector from_config(const Config& cfg, int rank, int nranks);

  bool active() const noexcept { return !clauses_.empty() || delay_.count() > 0 || send_bytes_per_second_ > 0; }
  int rank() const noexcept { return rank_; }

  // Factor by which this rank's compute of `step` is stretched (1 = none).
  double compute_factor(std::uint64_t step) const noexcept;
  bool in_spike(std::uint64_t step) const noexcept;
  // Delay the fault transport adds to every message this rank sends.
  std::chrono::microseconds transport_delay() const noexcept { return delay_; }
  // Cap the fault transport puts on this rank's send bandwidth (0: none).
  double transport_bytes_per_second() const noexcept { return send_bytes_per_second_; }

  // A synthetic compute phase: sleeps base_seconds * compute_factor(step) and
  // returns the seconds it meant to sleep.
  double simulate_compute(double base_seconds, std::uint64_t step) const;

 private:
  struct Effect {
    double slow;
    double spike_p;
    double spike_x;
    std::uint32_t spike_len;
    std::uint64_t from_step;
    std::uint64_t seed;
    std::uint64_t clause;  // index in the spec: clauses draw independent spikes
  };
  bool spike_covers(const Effect& e, std::uint64_t step) const noexcept;

  int rank_ = -1;
  std::vector<Effect> clauses_;
  std::chrono::microseconds delay_{0};
  double send_bytes_per_second_ = 0;
};

}  // namespace antdt
