// The policy registry, the policies' helpers (split_batch, equal_plans,
// plan_for_batch) and the JSON configuration reader (docs/scheduler.md).
#include "scheduler/policy_config.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

namespace antdt {

MonitorView::~MonitorView() = default;
Policy::~Policy() = default;

std::vector<RankPlan> Policy::initial(const PolicyContext& ctx) { return equal_plans(ctx); }

namespace {

constexpr std::array<std::string_view, 3> kBuiltins{"bsp", "antdt-dd", "antdt-nd"};

bool valid_policy_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
}

struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::string, PolicyFactory>> entries;  // built-ins first, then in registration order

  Registry() {
    entries.emplace_back("bsp", sched::make_bsp_policy);
    entries.emplace_back("antdt-dd", sched::make_dd_policy);
    entries.emplace_back("antdt-nd", sched::make_nd_policy);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names_locked(const Registry& r) {
  std::string out;
  for (const auto& [name, factory] : r.entries) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

void register_policy(std::string name, PolicyFactory factory) {
  ANTDT_CHECK_ARG(valid_policy_name(name), "register_policy: name '", name,
                  "' is invalid: expected 1..64 characters of [A-Za-z0-9_.-]");
  ANTDT_CHECK_ARG(std::find(kBuiltins.begin(), kBuiltins.end(), name) == kBuiltins.end(), "register_policy: '",
                  name, "' is a built-in policy and cannot be replaced");
  ANTDT_CHECK_ARG(static_cast<bool>(factory), "register_policy: the factory of '", name, "' is empty");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& [existing, f] : r.entries) {
    if (existing == name) {
      f = std::move(factory);
      return;
    }
  }
  r.entries.emplace_back(std::move(name), std::move(factory));
}

std::vector<std::string> registered_policies() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  out.reserve(r.entries.size());
  for (const auto& [name, factory] : r.entries) out.push_back(name);
  return out;
}

std::unique_ptr<Policy> make_policy(std::string_view name, std::string_view config_json) {
  PolicyFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (const auto& [existing, f] : r.entries) {
      if (existing == name) factory = f;
    }
    if (!factory) {
      raise<ConfigError>("ANTDT_POLICY='", name, "' is invalid: expected one of the registered policies (",
                         names_locked(r), ")");
    }
  }
  // Called outside the lock: a factory may itself look at the registry.
  std::unique_ptr<Policy> policy = factory(config_json);
  if (!policy) raise<InvalidArgument>("the factory of policy '", name, "' returned no policy");
  return policy;
}

std::vector<std::uint64_t> split_batch(std::uint64_t total, std::span<const double> weights, std::uint64_t lo,
                                       std::uint64_t hi) {
  const std::size_t n = weights.size();
  ANTDT_CHECK_ARG(n > 0, "split_batch: no weights");
  ANTDT_CHECK_ARG(lo <= hi, "split_batch: lower bound ", lo, " is above the upper bound ", hi);
  // n * lo <= total <= n * hi, without overflow.
  ANTDT_CHECK_ARG(lo == 0 || total / lo >= n, "split_batch: ", n, " shares of at least ", lo,
                  " exceed the total ", total);
  ANTDT_CHECK_ARG(total / n + (total % n != 0 ? 1 : 0) <= hi, "split_batch: ", n, " shares of at most ", hi,
                  " cannot add up to ", total);
  double weight_sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ANTDT_CHECK_ARG(std::isfinite(weights[i]) && weights[i] >= 0, "split_batch: weight ", i, " is ", weights[i],
                    ": weights must be finite and >= 0");
    weight_sum += weights[i];
  }
  ANTDT_CHECK_ARG(weight_sum > 0, "split_batch: every weight is 0");

  // Continuous shares x_i = clamp(share of the rest, lo, hi) by water-filling:
  // shares that break a bound are fixed at it, the side with the larger total
  // violation first (fixing it cannot make the other side's fixes wrong), and
  // the rest is split again among the free shares.
  std::vector<double> x(n, 0.0);
  std::vector<std::uint8_t> fixed(n, 0);
  const double dlo = static_cast<double>(lo), dhi = static_cast<double>(hi);
  for (std::size_t round = 0; round <= n; ++round) {
    double rest = static_cast<double>(total), free_weight = 0;
    std::size_t free_count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (fixed[i]) {
        rest -= x[i];
      } else {
        free_weight += weights[i];
        ++free_count;
      }
    }
    if (free_count == 0) break;
    double over = 0, under = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      x[i] = free_weight > 0 ? rest * weights[i] / free_weight : rest / static_cast<double>(free_count);
      if (x[i] > dhi) over += x[i] - dhi;
      if (x[i] < dlo) under += dlo - x[i];
    }
    if (over == 0 && under == 0) break;
    const bool fix_high = over >= under;
    for (std::size_t i = 0; i < n; ++i) {
      if (fixed[i]) continue;
      if (fix_high && x[i] > dhi) {
        x[i] = dhi;
        fixed[i] = 1;
      } else if (!fix_high && x[i] < dlo) {
        x[i] = dlo;
        fixed[i] = 1;
      }
    }
  }

  // Largest remainder: floors, then one more sample to the largest fractions
  // (ties to the lower index) until the total is met. Rounding error in x can
  // leave the floors a little off in either direction; the loops below fix
  // that within the bounds, which the checks above make feasible.
  std::vector<std::uint64_t> out(n);
  std::vector<double> frac(n);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double clamped = std::clamp(x[i], dlo, dhi);
    const double f = std::floor(clamped);
    out[i] = std::clamp(static_cast<std::uint64_t>(f), lo, hi);
    frac[i] = clamped - f;
    sum += out[i];
  }
  // The d largest fractions among the shares that may still grow (or the d
  // smallest among those that may shrink), ties to the lower index: a strict
  // order, so nth_element (O(n)) finds the same set a sort would.
  std::vector<std::size_t> candidates;
  candidates.reserve(n);
  while (sum != total) {
    const bool grow = sum < total;
    candidates.clear();
    for (std::size_t i = 0; i < n; ++i) {
      if (grow ? out[i] < hi : out[i] > lo) candidates.push_back(i);
    }
    ANTDT_ASSERT(!candidates.empty());  // the bounds were checked feasible above
    const std::uint64_t gap = grow ? total - sum : sum - total;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(gap, candidates.size()));
    const auto before = [&](std::size_t a, std::size_t b) {
      if (frac[a] != frac[b]) return grow ? frac[a] > frac[b] : frac[a] < frac[b];
      return a < b;
    };
    if (take < candidates.size()) {
      std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(take), candidates.end(),
                       before);
    }
    for (std::size_t k = 0; k < take; ++k) {
      const std::size_t i = candidates[k];
      if (grow) {
        ++out[i];
        ++sum;
      } else {
        --out[i];
        --sum;
      }
      frac[i] = grow ? -1.0 : 2.0;  // moved once: last in line for another round
    }
  }
  return out;
}

RankPlan plan_for_batch(std::uint64_t local_batch, std::uint64_t micro_batch_cap) {
  RankPlan plan;
  plan.local_batch = local_batch;
  if (micro_batch_cap == 0 || local_batch <= micro_batch_cap) {
    plan.micro_batches = 1;
    plan.micro_batch = local_batch;
    return plan;
  }
  const std::uint64_t passes = (local_batch + micro_batch_cap - 1) / micro_batch_cap;
  ANTDT_CHECK_ARG(passes <= std::numeric_limits<std::uint32_t>::max(), "plan_for_batch: ", local_batch,
                  " samples need ", passes, " passes of at most ", micro_batch_cap, ": too many");
  plan.micro_batches = static_cast<std::uint32_t>(passes);
  // Balanced passes: ceil(b / m) <= cap because m = ceil(b / cap).
  plan.micro_batch = (local_batch + passes - 1) / passes;
  return plan;
}

std::vector<RankPlan> equal_plans(const PolicyContext& ctx) {
  ANTDT_CHECK_ARG(ctx.world_size > 0, "equal_plans: world size ", ctx.world_size, " is not positive");
  const std::vector<double> ones(static_cast<std::size_t>(ctx.world_size), 1.0);
  const std::uint64_t hi = ctx.max_local_batch == 0 ? ctx.global_batch : ctx.max_local_batch;
  const std::vector<std::uint64_t> batches = split_batch(ctx.global_batch, ones, ctx.min_local_batch, hi);
  std::vector<RankPlan> plans;
  plans.reserve(batches.size());
  for (std::uint64_t b : batches) plans.push_back(plan_for_batch(b, ctx.micro_batch_cap));
  return plans;
}

namespace sched {

nlohmann::json parse_policy_config(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return nlohmann::json::object();
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    raise<ConfigError>("ANTDT_POLICY_CONFIG is invalid: not JSON (", e.what(), ")");
  }
  if (!value.is_object()) {
    raise<ConfigError>("ANTDT_POLICY_CONFIG is invalid: expected a JSON object ({\"key\": value, ...}), got a ",
                       value.type_name());
  }
  return value;
}

PolicyConfigReader::PolicyConfigReader(std::string_view policy, std::string_view text)
    : policy_(policy), object_(parse_policy_config(text)) {}

void PolicyConfigReader::bad(std::string_view key, std::string_view expected) const {
  raise<ConfigError>("ANTDT_POLICY_CONFIG is invalid for policy '", policy_, "': \"", key, "\" is ",
                     object_.at(std::string(key)).dump(), ", expected ", expected);
}

const nlohmann::json* PolicyConfigReader::find(std::string_view key) {
  accepted_.emplace_back(key);
  const auto it = object_.find(std::string(key));
  return it == object_.end() ? nullptr : &*it;
}

double PolicyConfigReader::number(std::string_view key, double fallback, double lo, double hi) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) bad(key, cat("a number in [", lo, ", ", hi, "]"));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(key, cat("a number in [", lo, ", ", hi, "]"));
  return d;
}

std::uint64_t PolicyConfigReader::integer(std::string_view key, std::uint64_t fallback, std::uint64_t lo,
                                          std::uint64_t hi) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0)) {
    bad(key, cat("an integer in [", lo, ", ", hi, "]"));
  }
  const std::uint64_t u = v->get<std::uint64_t>();
  if (u < lo || u > hi) bad(key, cat("an integer in [", lo, ", ", hi, "]"));
  return u;
}

bool PolicyConfigReader::boolean(std::string_view key, bool fallback) {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad(key, "true or false");
  return v->get<bool>();
}

void PolicyConfigReader::finish() const {
  std::string unknown;
  for (const auto& [key, value] : object_.items()) {
    if (std::find(accepted_.begin(), accepted_.end(), key) != accepted_.end()) continue;
    if (!unknown.empty()) unknown += ", ";
    unknown += "\"" + key + "\"";
  }
  if (unknown.empty()) return;
  std::string accepted;
  for (const std::string& key : accepted_) {
    if (!accepted.empty()) accepted += ", ";
    accepted += key;
  }
  raise<ConfigError>("ANTDT_POLICY_CONFIG is invalid for policy '", policy_, "': unknown key(s) ", unknown,
                     " (accepted: ", accepted.empty() ? std::string("none") : accepted,
                     "; common: min_local_batch, max_local_batch, micro_batch_cap)");
}

}  // namespace sched
}  // namespace antdt
