// antdt-sim: runs the scheduler's policies on a simulated job with thousands of
// virtual ranks (tools/antdt-sim.hpp has the model) and prints, per policy,
// throughput, straggler efficiency (DESIGN §14) and the Controller's decision
// time per step. --check makes it exit 1 when a run broke an invariant
// (Σ b = B every step, every sample committed exactly once per epoch, leases
// settled), so ctest can run it.
#include "tools/antdt-sim.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using antdt::sim::Scenario;
  Scenario sc;
  std::string policies = "bsp,antdt-dd,antdt-nd";
  std::vector<std::string> configs;
  std::string kinds = "deterministic,transient,persistent";
  double per_sample_ms = sc.per_sample_s * 1e3, pass_overhead_ms = 0, gradient_mb = sc.gradient_bytes / 1e6;
  double alpha_us = sc.alpha_s * 1e6, bandwidth_gbs = 1e-9 / sc.beta_s_per_byte, grace_ms = 0;
  bool check = false, step_log = false;

  CLI::App app("antdt-sim: the Controller's policies on a simulated job (real Monitor, Controller and Dds; "
               "α-β ring AllReduce; straggler models). Prints throughput, efficiency and decision time per policy.");
  app.add_option("-r,--ranks", sc.ranks, "virtual ranks")->check(CLI::Range(1, 1 << 20));
  app.add_option("-n,--steps", sc.steps, "steps per policy")->check(CLI::Range(1, 100000000));
  app.add_option("-b,--batch-per-rank", sc.batch_per_rank, "global batch B = ranks x this")->check(CLI::Range(1, 1 << 24));
  app.add_option("--per-sample-ms", per_sample_ms, "a healthy rank's compute per sample, ms")->check(CLI::Range(1e-6, 1e6));
  app.add_option("--pass-overhead-ms", pass_overhead_ms, "extra compute per micro-batch pass, ms")->check(CLI::Range(0.0, 1e6));
  app.add_option("--noise", sc.noise, "relative compute noise (uniform +-)")->check(CLI::Range(0.0, 0.9));
  app.add_option("--gradient-mb", gradient_mb, "gradient size, 10^6 bytes (α-β model n)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--alpha-us", alpha_us, "α-β model: latency per message, us")->check(CLI::Range(0.0, 1e6));
  app.add_option("--bandwidth-gbs", bandwidth_gbs, "α-β model: bandwidth 1/β, 10^9 bytes/s")->check(CLI::Range(1e-6, 1e6));
  app.add_option("-s,--stragglers", sc.straggler_fraction, "fraction of ranks that straggle")->check(CLI::Range(0.0, 1.0));
  app.add_option("--kinds", kinds, "straggler kinds, assigned in turn: deterministic,transient,persistent");
  app.add_option("--slow-factor", sc.slow_factor, "deterministic stragglers' compute factor")->check(CLI::Range(0.01, 1000.0));
  app.add_option("--spike-p", sc.spike_p, "transient: probability that a spike starts at a step")->check(CLI::Range(0.0, 1.0));
  app.add_option("--spike-x", sc.spike_x, "transient: compute factor during a spike")->check(CLI::Range(0.01, 1000.0));
  app.add_option("--spike-len", sc.spike_len, "transient: steps a spike lasts")->check(CLI::Range(1, 10000));
  app.add_option("--onset", sc.onset, "persistent: first slow step")->check(CLI::Range(0, 100000000));
  app.add_option("--persistent-factor", sc.persistent_factor, "persistent stragglers' factor after the onset")->check(CLI::Range(0.01, 1000.0));
  app.add_option("--restart-delay-s", sc.restart_delay_s, "seconds a restarted rank is away")->check(CLI::Range(0.0, 1e6));
  app.add_option("--quorum", sc.quorum, "arbiter quorum (fraction of active ranks)")->check(CLI::Range(0.001, 1.0));
  app.add_option("--warmup", sc.warmup, "steps closed as BSP while the Monitor learns")->check(CLI::Range(0, 100000000));
  app.add_option("--grace-ms", grace_ms, "arbiter grace, ms (0: the Monitor's)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--dataset", sc.dataset, "samples in the dataset (0: 40 global batches)");
  app.add_option("--shard-size", sc.shard_size, "DDS shard size, samples")->check(CLI::Range(1, 1 << 30));
  app.add_option("--seed", sc.seed, "seed of the straggler choice, spikes and noise");
  app.add_option("-p,--policies", policies, "policies to run, comma-separated (bsp, antdt-dd, antdt-nd)");
  app.add_option("-c,--policy-config", configs, "NAME=JSON: ANTDT_POLICY_CONFIG for policy NAME (repeatable)");
  app.add_flag("--check", check, "exit 1 when a run broke an invariant");
  app.add_flag("--step-log", step_log, "one line per simulated step on stderr");
  app.add_option("--steal-min", sc.steal_min, "DDS end-of-epoch work stealing: smallest half stolen (0: off)");
  CLI11_PARSE(app, argc, argv);

  try {
    sc.per_sample_s = per_sample_ms * 1e-3;
    sc.pass_overhead_s = pass_overhead_ms * 1e-3;
    sc.gradient_bytes = gradient_mb * 1e6;
    sc.alpha_s = alpha_us * 1e-6;
    sc.beta_s_per_byte = 1.0 / (bandwidth_gbs * 1e9);
    sc.grace_s = grace_ms * 1e-3;
    sc.kinds.clear();
    for (const std::string& k : split_list(kinds)) sc.kinds.push_back(antdt::sim::parse_kind(k));
    std::map<std::string, std::string> config_of;
    for (const std::string& c : configs) {
      const auto eq = c.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "antdt-sim: --policy-config '%s' is invalid: expected NAME=JSON\n", c.c_str());
        return 2;
      }
      config_of[c.substr(0, eq)] = c.substr(eq + 1);
    }

    const antdt::sim::ComputeModel model(sc);
    const std::uint64_t global = sc.batch_per_rank * static_cast<std::uint64_t>(sc.ranks);
    std::printf("# antdt-sim: %d ranks, %llu steps, B = %llu (%llu per rank), %.3f ms/sample, noise %.2f\n", sc.ranks,
                static_cast<unsigned long long>(sc.steps), static_cast<unsigned long long>(global),
                static_cast<unsigned long long>(sc.batch_per_rank), per_sample_ms, sc.noise);
    std::printf("# stragglers: %zu deterministic (x%.2f), %zu transient (p %.3f, x%.2f, %u steps), %zu persistent "
                "(x%.2f from step %llu), restart delay %.1f s, seed %llu\n",
                model.count(antdt::sim::Kind::deterministic), sc.slow_factor, model.count(antdt::sim::Kind::transient),
                sc.spike_p, sc.spike_x, sc.spike_len, model.count(antdt::sim::Kind::persistent), sc.persistent_factor,
                static_cast<unsigned long long>(sc.onset), sc.restart_delay_s, static_cast<unsigned long long>(sc.seed));
    std::printf("# allreduce (alpha-beta ring): %.1f MB, alpha %.2f us, %.2f GB/s -> %.3f ms at %d ranks\n", gradient_mb,
                alpha_us, bandwidth_gbs,
                antdt::sim::ring_allreduce_s(sc.ranks, sc.gradient_bytes, sc.alpha_s, sc.beta_s_per_byte) * 1e3, sc.ranks);
    std::printf("# decide: Controller::on_step per step, mean/max, wall and thread-CPU milliseconds\n");
    std::printf("%-10s %9s %12s %10s %8s %9s %9s %7s %7s %8s %6s %6s %17s %17s\n", "policy", "sim s", "samples/s",
                "efficiency", "bsp-th", "deferred", "dropped", "restart", "resplit", "decision", "b min", "b max",
                "decide wall ms", "decide cpu ms");
    bool broken = false;
    for (const std::string& policy : split_list(policies)) {
      const auto it = config_of.find(policy);
      antdt::sim::Simulation sim(sc, policy, it == config_of.end() ? "{}" : it->second);
      if (step_log) sim.set_step_log(stderr);
      const antdt::sim::Result r = sim.run();
      std::printf("%-10s %9.2f %12.1f %10.3f %8.3f %9llu %9llu %7llu %7llu %8llu %6llu %6llu %8.3f/%8.3f %8.3f/%8.3f\n",
                  policy.c_str(), r.sim_time_s, r.samples_per_s, r.efficiency, r.bsp_theory,
                  static_cast<unsigned long long>(r.deferred), static_cast<unsigned long long>(r.dropped),
                  static_cast<unsigned long long>(r.restarts), static_cast<unsigned long long>(r.resplits),
                  static_cast<unsigned long long>(r.decisions), static_cast<unsigned long long>(r.min_batch),
                  static_cast<unsigned long long>(r.max_batch), r.decide_mean_s * 1e3, r.decide_max_s * 1e3,
                  r.decide_cpu_mean_s * 1e3, r.decide_cpu_max_s * 1e3);
      for (const std::string& v : r.violations) {
        std::printf("#   %s: INVARIANT BROKEN: %s\n", policy.c_str(), v.c_str());
        broken = true;
      }
      std::printf("#   %s: %llu samples committed, %llu given back, %llu epochs completed, invariants %s\n",
                  policy.c_str(), static_cast<unsigned long long>(r.committed),
                  static_cast<unsigned long long>(r.given_back), static_cast<unsigned long long>(r.epochs_completed),
                  r.violations.empty() ? "hold" : "BROKEN");
    }
    std::fflush(stdout);
    return check && broken ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt-sim: %s\n", e.what());
    return 2;
  }
}
