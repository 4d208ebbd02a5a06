// What measuring costs a training step (DESIGN §8: under 1% of step time when
// nothing is slow). A synthetic step is a fixed amount of CPU work (~2 ms);
// the instrumented loop adds everything a rank and the arbiter do per step:
// the StepTimer marks, the collectives' wait/transfer reports, the Monitor's
// record + classification of every rank, and the JSON-lines + Chrome trace.
//
// Two figures, because this machine is noisy:
//   1. the instrumentation alone (the same loop without the work), in
//      microseconds per step and as a share of the measured work step: the
//      precise one;
//   2. interleaved A/B runs of plain and instrumented loops, each run summed
//      up by its median step, and the median of the per-repetition
//      overheads: the end-to-end check, within the machine's noise.
#include "perf_common.hpp"

#include "collectives/telemetry/monitor.hpp"
#include "collectives/telemetry/step_timer.hpp"
#include "collectives/telemetry/trace.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using antdt::telemetry::Monitor;
using antdt::telemetry::MonitorConfig;
using antdt::telemetry::StepRecord;
using antdt::telemetry::StepTimer;
using antdt::telemetry::TraceWriter;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Deterministic floating-point work the compiler cannot drop; the same
// iteration count always does the same work, unlike spinning on a clock.
class Work {
 public:
  explicit Work(std::size_t n) : data_(n, 1.0f) {}
  void run(std::size_t passes) {
    for (std::size_t p = 0; p < passes; ++p) {
      float acc = 0;
      for (float& x : data_) {
        x = x * 0.999f + 0.001f;
        acc += x;
      }
      sink_ = sink_ + acc;
    }
  }
  // Passes that take about `seconds` (the median of a few probes).
  std::size_t calibrate(double seconds) {
    std::vector<double> per_pass;
    for (int i = 0; i < 7; ++i) {
      const double t0 = now_s();
      run(20);
      per_pass.push_back((now_s() - t0) / 20);
    }
    std::sort(per_pass.begin(), per_pass.end());
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(seconds / per_pass[per_pass.size() / 2])));
  }

 private:
  std::vector<float> data_;
  volatile float sink_ = 0;
};

struct Instruments {
  Instruments(int ranks, const std::string& trace_dir, std::uint32_t flush_steps)
      : timer(0), monitor(ranks, MonitorConfig{}), records(static_cast<std::size_t>(ranks)) {
    if (!trace_dir.empty()) trace = std::make_unique<TraceWriter>(trace_dir, 0, flush_steps, "bench");
  }
  StepTimer timer;
  Monitor monitor;
  std::unique_ptr<TraceWriter> trace;
  std::vector<StepRecord> records;  // this rank's record plus the other ranks' copies
};

// One step of the instrumented loop around `work` passes.
void instrumented_step(Instruments& in, Work& work, std::size_t passes) {
  in.timer.begin_step();
  in.timer.begin_compute();
  work.run(passes);
  in.timer.end_compute();
  // What a collective reports: waiting for peers, then the exchange.
  in.timer.add_wait(20e-6);
  in.timer.add_transfer(50e-6);
  in.timer.end_step(32);
  StepRecord r;
  while (in.timer.poll(r)) {
    // The arbiter receives every rank's record; here the others mirror ours.
    for (std::size_t i = 0; i < in.records.size(); ++i) {
      in.records[i] = r;
      in.records[i].rank = static_cast<int>(i);
    }
    in.monitor.record_step(in.records);
    if (in.trace) in.trace->write(r, antdt::telemetry::to_string(in.monitor.classify(0)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("antdt monitor overhead: a synthetic training loop with and without step timing, the Monitor and traces");
  int steps = 500;
  int reps = 7;
  double compute_ms = 2.0;
  int ranks = 8;
  std::string trace_dir;
  bool no_trace = false;
  std::uint32_t flush_steps = 100;
  int scale_ranks = 8192;
  app.add_option("-n,--steps", steps, "steps per run")->check(CLI::Range(10, 1000000));
  app.add_option("-r,--reps", reps, "interleaved plain/instrumented repetitions")->check(CLI::Range(1, 1000));
  app.add_option("-c,--compute-ms", compute_ms, "work per step, milliseconds")->check(CLI::Range(0.05, 10000.0));
  app.add_option("-R,--ranks", ranks, "ranks the Monitor aggregates each step")->check(CLI::Range(1, 65536));
  app.add_option("-t,--trace-dir", trace_dir, "trace directory (default: a temporary one, removed at exit)");
  app.add_flag("--no-trace", no_trace, "measure without the trace writer");
  app.add_option("--flush-steps", flush_steps, "trace flush interval, steps")->check(CLI::Range(1, 1000000));
  app.add_option("--scale-ranks", scale_ranks, "ranks of the Monitor scaling figure (0: skip it)")
      ->check(CLI::Range(0, 1 << 20));
  CLI11_PARSE(app, argc, argv);

  std::filesystem::path temp_dir;
  if (!no_trace && trace_dir.empty()) {
    temp_dir = std::filesystem::temp_directory_path() / ("antdt-monitor-bench-" + std::to_string(::getpid()));
    trace_dir = temp_dir.string();
  }
  if (no_trace) trace_dir.clear();

  Work work(4096);
  const std::size_t passes = work.calibrate(compute_ms * 1e-3);

  // 1. The instrumentation alone: the instrumented loop with no work.
  double alone_us = 0;
  {
    Instruments in(ranks, trace_dir, flush_steps);
    std::vector<double> per_step;
    for (int rep = 0; rep < reps; ++rep) {
      const double t0 = now_s();
      for (int s = 0; s < steps; ++s) instrumented_step(in, work, 0);
      per_step.push_back((now_s() - t0) / steps);
    }
    alone_us = antdt::perf::median(per_step) * 1e6;
  }

  // 2. Interleaved A/B runs, the order alternating so drift cancels. A run's
  // figure is its median step: robust to the preemptions of a shared machine.
  std::vector<double> plain_ms, instrumented_ms, overhead_pct;
  std::vector<double> durations(static_cast<std::size_t>(steps));
  for (int rep = 0; rep < reps; ++rep) {
    double plain = 0, instrumented = 0;
    for (int half = 0; half < 2; ++half) {
      const bool do_plain = (half == 0) == (rep % 2 == 0);
      if (do_plain) {
        for (auto& d : durations) {
          const double t0 = now_s();
          work.run(passes);
          d = now_s() - t0;
        }
        plain = antdt::perf::median(durations);
      } else {
        Instruments in(ranks, trace_dir, flush_steps);
        for (auto& d : durations) {
          const double t0 = now_s();
          instrumented_step(in, work, passes);
          d = now_s() - t0;
        }
        if (in.trace) in.trace->close();
        instrumented = antdt::perf::median(durations);
      }
    }
    plain_ms.push_back(plain * 1e3);
    instrumented_ms.push_back(instrumented * 1e3);
    overhead_pct.push_back((instrumented - plain) / plain * 100);
  }
  const double step_ms = antdt::perf::median(plain_ms);

  std::printf("# antdt monitor overhead: %d steps x %d reps, work %.3f ms/step (target %.3f), %d ranks into the "
              "Monitor, trace %s\n",
              steps, reps, step_ms, compute_ms, ranks, trace_dir.empty() ? "off" : "on");
  std::printf("# instrumentation alone (timer + monitor record/classify + trace): %.2f us/step = %.3f %% of the step\n",
              alone_us, alone_us / (step_ms * 1e3) * 100);
  std::printf("# A/B, median over %d interleaved reps of each run's median step: plain %.4f ms, instrumented %.4f ms, "
              "overhead %.3f %%"
              " (per-rep spread %.3f .. %.3f %%)\n",
              reps, step_ms, antdt::perf::median(instrumented_ms), antdt::perf::median(overhead_pct),
              *std::min_element(overhead_pct.begin(), overhead_pct.end()),
              *std::max_element(overhead_pct.begin(), overhead_pct.end()));

  // 3. The arbiter at scale: one step = a record from every rank + one
  // classification pass, as the simulator drives it.
  if (scale_ranks > 0) {
    Monitor monitor(scale_ranks, MonitorConfig{});
    std::vector<StepRecord> records(static_cast<std::size_t>(scale_ranks));
    std::vector<double> record_s, evaluate_s;
    for (int step = 0; step < 50; ++step) {
      for (int rank = 0; rank < scale_ranks; ++rank) {
        StepRecord& r = records[static_cast<std::size_t>(rank)];
        r.rank = rank;
        r.step = static_cast<std::uint64_t>(step);
        // A spread of speeds and a few stragglers, so the classes are not trivial.
        r.compute_s = 0.010 * (1 + 0.01 * (rank % 7)) * (rank % 1000 == 3 ? 3 : 1);
        r.step_s = r.compute_s + 0.002;
        r.transfer_s = 0.002;
        r.samples = 32;
      }
      const double t0 = now_s();
      for (const StepRecord& r : records) monitor.record(r);
      const double t1 = now_s();
      monitor.evaluate();
      const double t2 = now_s();
      record_s.push_back(t1 - t0);
      evaluate_s.push_back(t2 - t1);
    }
    std::printf("# Monitor at %d ranks, median of 50 steps: record all %.3f ms, classify all (evaluate) %.3f ms\n",
                scale_ranks, antdt::perf::median(record_s) * 1e3, antdt::perf::median(evaluate_s) * 1e3);
  }
  if (!temp_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir, ec);
  }
  return 0;
}
