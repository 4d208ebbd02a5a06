// ANTDT_INJECT parsing and the per-rank Injector (core/inject.hpp).
#include "core/inject.hpp"

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/printable.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <thread>

namespace antdt {
namespace {

constexpr std::string_view kVar = "ANTDT_INJECT";
constexpr std::string_view kAccepted =
    "clauses separated by ';', each 'rank=<N|A-B|*>:key=value,...' with keys slow, spike_p, spike_x, spike_len, "
    "from_step, incarnation, delay_us, bw_mbps, seed; or 'seed=<N>' alone";
constexpr double kMaxFactor = 1000;
constexpr std::uint64_t kMaxSpikeLen = 10000;
constexpr std::uint64_t kMaxDelayUs = 60'000'000;
constexpr double kMaxBandwidthMbps = 1'000'000;
constexpr std::uint64_t kMaxStep = 1ULL << 62;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(std::string_view clause, std::string_view problem) const {
    raise<ConfigError>(kVar, "='", printable(text_), "' is invalid: clause '", printable(clause), "': ", problem,
                       " (accepted: ", kAccepted, ")");
  }

  std::uint64_t unsigned_value(std::string_view clause, std::string_view key, std::string_view value,
                               std::uint64_t hi) const {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v, 10);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || v > hi) {
      fail(clause, cat(key, "='", printable(value), "' must be an integer in [0, ", hi, "]"));
    }
    return v;
  }

  // A finite decimal number in (lo, hi] (lo_open) or [lo, hi].
  double real_value(std::string_view clause, std::string_view key, std::string_view value, double lo, double hi,
                    bool lo_open) const {
    double v = 0;
    const auto [end, ec] =
        std::from_chars(value.data(), value.data() + value.size(), v, std::chars_format::fixed);
    const bool in_range = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !in_range) {
      fail(clause, cat(key, "='", printable(value), "' must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "]"));
    }
    return v;
  }

  void parse_ranks(std::string_view clause, std::string_view value, InjectClause& c) const {
    if (value == "*") return;
    const auto dash = value.find('-');
    const std::string_view first = dash == std::string_view::npos ? value : value.substr(0, dash);
    const std::string_view last = dash == std::string_view::npos ? value : value.substr(dash + 1);
    const auto rank_of = [&](std::string_view v) {
      return static_cast<int>(unsigned_value(clause, "rank", trim(v), INT_MAX - 1));
    };
    c.rank_first = rank_of(first);
    c.rank_last = rank_of(last);
    if (c.rank_last < c.rank_first) fail(clause, cat("rank range '", printable(value), "' is empty"));
  }

  void parse_key(std::string_view clause, std::string_view key, std::string_view value, InjectClause& c) const {
    if (key == "slow") {
      c.slow = real_value(clause, key, value, 0, kMaxFactor, true);
    } else if (key == "spike_p") {
      c.spike_p = real_value(clause, key, value, 0, 1, false);
    } else if (key == "spike_x") {
      c.spike_x = real_value(clause, key, value, 0, kMaxFactor, true);
    } else if (key == "spike_len") {
      c.spike_len = static_cast<std::uint32_t>(unsigned_value(clause, key, value, kMaxSpikeLen));
      if (c.spike_len == 0) fail(clause, "spike_len must be at least 1");
    } else if (key == "from_step") {
      c.from_step = unsigned_value(clause, key, value, kMaxStep);
    } else if (key == "incarnation") {
      c.incarnation = static_cast<int>(unsigned_value(clause, key, value, INT_MAX));
    } else if (key == "delay_us") {
      c.delay_us = unsigned_value(clause, key, value, kMaxDelayUs);
    } else if (key == "bw_mbps") {
      c.bw_mbps = real_value(clause, key, value, 0, kMaxBandwidthMbps, true);
    } else if (key == "seed") {
      c.seed = unsigned_value(clause, key, value, UINT64_MAX);
    } else {
      fail(clause, cat("unknown key '", printable(key), "'"));
    }
  }

  InjectSpec parse() const {
    InjectSpec spec;
    spec.text = std::string(trim(text_));
    bool seed_given = false;
    std::string_view rest = text_;
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      const std::string_view clause = trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
      if (clause.empty()) continue;

      const auto colon = clause.find(':');
      const std::string_view head = clause.substr(0, colon);
      const auto head_eq = head.find('=');
      const std::string_view head_key = trim(head.substr(0, head_eq));
      const std::string_view head_value =
          head_eq == std::string_view::npos ? std::string_view{} : trim(head.substr(head_eq + 1));
      if (colon == std::string_view::npos && head_eq != std::string_view::npos && head_key == "seed") {
        if (seed_given) fail(clause, "the global seed is given twice");
        spec.seed = unsigned_value(clause, "seed", head_value, UINT64_MAX);
        seed_given = true;
        continue;
      }
      if (head_eq == std::string_view::npos || head_key != "rank") fail(clause, "a clause starts with 'rank=<N|A-B|*>:'");
      if (colon == std::string_view::npos) fail(clause, "missing ':' and keys after the rank");
      InjectClause c;
      c.text = std::string(clause);
      parse_ranks(clause, head_value, c);

      std::array<bool, 9> seen{};
      constexpr std::array<std::string_view, 9> kKeys{"slow",     "spike_p", "spike_x", "spike_len",  "from_step",
                                                      "delay_us", "seed",    "bw_mbps", "incarnation"};
      std::string_view keys = clause.substr(colon + 1);
      bool any = false;
      while (!keys.empty()) {
        const auto comma = keys.find(',');
        const std::string_view item = trim(keys.substr(0, comma));
        keys = comma == std::string_view::npos ? std::string_view{} : keys.substr(comma + 1);
        if (item.empty()) fail(clause, "empty key");
        const auto eq = item.find('=');
        if (eq == std::string_view::npos) fail(clause, cat("'", printable(item), "' is not key=value"));
        const std::string_view key = trim(item.substr(0, eq));
        for (std::size_t k = 0; k < kKeys.size(); ++k) {
          if (kKeys[k] != key) continue;
          if (seen[k]) fail(clause, cat("key '", key, "' is given twice"));
          seen[k] = true;
        }
        parse_key(clause, key, trim(item.substr(eq + 1)), c);
        any = true;
      }
      if (!any) fail(clause, "no keys after the rank");
      const bool has_p = seen[1], has_x = seen[2], has_len = seen[3];
      if (has_p != has_x) fail(clause, "spike_p and spike_x go together");
      if (has_len && !has_p) fail(clause, "spike_len needs spike_p and spike_x");
      spec.clauses.push_back(std::move(c));
    }
    return spec;
  }

 private:
  std::string_view text_;
};

// Uniform in [0, 1), a pure function of its arguments.
double uniform(std::uint64_t seed, int rank, std::uint64_t clause, std::uint64_t step) noexcept {
  std::uint64_t h = hash::splitmix64(seed);
  h = hash::splitmix64(h ^ static_cast<std::uint64_t>(rank));
  h = hash::splitmix64(h ^ clause);
  h = hash::splitmix64(h ^ step);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

}  // namespace

InjectSpec parse_inject(std::string_view text) { return Parser(text).parse(); }

Injector::Injector(const InjectSpec& spec, int rank, int nranks, int incarnation) : rank_(rank) {
  for (std::size_t i = 0; i < spec.clauses.size(); ++i) {
    const InjectClause& c = spec.clauses[i];
    if (c.rank_first >= nranks || c.rank_last >= nranks) {
      raise<ConfigError>(kVar, "='", printable(spec.text), "' is invalid: clause '", printable(c.text),
                         "' names rank ", c.rank_last >= nranks ? c.rank_last : c.rank_first, " but the job has ",
                         nranks, " ranks (0..", nranks - 1, ")");
    }
    if (!c.applies_to(rank)) continue;
    if (c.incarnation && *c.incarnation != incarnation) continue;
    delay_ += std::chrono::microseconds(c.delay_us);
    if (c.bw_mbps > 0) {
      const double cap = c.bw_mbps * 1e6;
      send_bytes_per_second_ = send_bytes_per_second_ > 0 ? std::min(send_bytes_per_second_, cap) : cap;
    }
    if (c.slow != 1 || c.spike_p > 0) {
      clauses_.push_back(Effect{c.slow, c.spike_p, c.spike_x, c.spike_len, c.from_step, c.seed.value_or(spec.seed), i});
    }
  }
}

Injector Injector::from_config(const Config& cfg, int rank, int nranks) {
  if (!cfg.inject) return Injector();
  return Injector(*cfg.inject, rank, nranks, cfg.incarnation);
}

bool Injector::spike_covers(const Effect& e, std::uint64_t step) const noexcept {
  if (e.spike_p <= 0 || step < e.from_step) return false;
  // A spike that started at any of the last spike_len steps still runs.
  const std::uint64_t earliest = step - e.from_step >= e.spike_len ? step - e.spike_len + 1 : e.from_step;
  for (std::uint64_t start = earliest; start <= step; ++start) {
    if (uniform(e.seed, rank_, e.clause, start) < e.spike_p) return true;
  }
  return false;
}

bool Injector::in_spike(std::uint64_t step) const noexcept {
  for (const Effect& e : clauses_) {
    if (spike_covers(e, step)) return true;
  }
  return false;
}

double Injector::compute_factor(std::uint64_t step) const noexcept {
  double factor = 1;
  for (const Effect& e : clauses_) {
    if (step < e.from_step) continue;
    factor *= e.slow;
    if (spike_covers(e, step)) factor *= e.spike_x;
  }
  return factor;
}

double Injector::simulate_compute(double base_seconds, std::uint64_t step) const {
  ANTDT_CHECK_ARG(std::isfinite(base_seconds) && base_seconds >= 0,
                  "simulate_compute: base_seconds must be a finite number >= 0, got ", base_seconds);
  const double seconds = base_seconds * compute_factor(step);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return seconds;
}

}  // namespace antdt
