// A small trainer on the Agent API, run under antdt-run by the agent drivers.
//
//   agent_trainer train --out DIR --dataset N [--epochs E] [--global-batch B]
//                       [--shard-size K] [--step-ms T] [--restart-rank R --restart-step S]
//                       [--slow-rank R --slow-ms T]
//     The Agent loop: each step allreduces (sum of sample ids, sample count)
//     into a replicated "model" and commits its batch. Rank R (first
//     incarnation) asks for its own restart at step S. Rank --slow-rank
//     (first incarnation only: restarted "elsewhere", it is healthy) computes
//     for --slow-ms instead of --step-ms: a straggler for the policy. After a rebuild, the
//     lowest rank that was not restarted broadcasts the model (the re-sync a
//     real trainer does). Each process
//     appends to DIR/rank<r>.inc<i>.log: "lease <step> <ids...>" before and
//     "commit <step> <ids...>" after each batch committed, "void <step> <count>" for a batch the coordinator had
//     taken back (it restarted), "rebuild <step> <generation>", "exit <step>"
//     when ordered to restart, "plan <step> <local batch> <generation>" for
//     each step's plan, "lost <step> <count>" for a step whose collective
//     raised PeerLostError (a rank died; the batch goes back and the Agent
//     moves to a new communicator generation); the first line is "pid <pid>"
//     (for a driver that kills the rank). At the end communicator rank 0 (job
//     rank 0 unless it was lost for good) writes DIR/total.txt:
//     "<samples in the model> <1 if every rank's model is equal, else 0>".
//     With --check-total, rank 0 also fails (exit 1) unless the model counted
//     exactly N x E samples (true when no batch was voided).
//     With --partial, each step is a partial AllReduce under defer
//     (docs/partial.md): a late rank's contribution lands in a later step's
//     result, it fetches the results it missed, and every rank applies every
//     result once, in order ("skip <step>" for a plan whose result it fetched
//     already). A batch whose contribution was dropped is given back ("drop
//     <step> <count>"); a rank too far behind for the result cache
//     (ResyncError) asks for its restart, which re-syncs it ("resync <step>").
//     A step broken by a lost arbiter (the coordinator restarted) is "lost"
//     as above.
//   agent_trainer sleep --out DIR [--fork] [--ignore-term]
//     Writes DIR/pid.<rank> ("<pid> [<forked child pid>]") and sleeps 60 s.
//   agent_trainer fail --out DIR --rank R --code C
//     Like sleep, but rank R exits with C once every rank wrote its pid file.
#include <antdt/agent.hpp>
#include <antdt/comm.hpp>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

namespace {

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 2; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0) continue;
    if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0)
      args[key] = argv[++i];
    else
      args[key] = "1";
  }
  return args;
}

std::uint64_t number(const std::map<std::string, std::string>& args, const std::string& key, std::uint64_t fallback) {
  auto it = args.find(key);
  return it == args.end() ? fallback : std::stoull(it->second);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// Logs a batch's lease, then commits it (`commit` returns whether the
// coordinator took it) and logs "commit" or "void". The lease goes first: a
// process killed between the coordinator's durable commit and its answer
// leaves the lease in doubt (commit_log.hpp).
template <class Commit>
void commit_logged(std::ostream& log, std::uint64_t step, const antdt::SampleBatch& batch, Commit commit) {
  log << "lease " << step;
  for (auto id : batch) log << ' ' << id;
  log << std::endl;
  if (commit()) {
    log << "commit " << step;
    for (auto id : batch) log << ' ' << id;
    log << std::endl;
  } else {
    log << "void " << step << ' ' << batch.size() << std::endl;
  }
}

// A step whose collective failed: the error on stderr, "<what> <step>[ <samples>]" in the log.
void log_step_failure(std::ostream& log, const char* what, int rank, std::uint64_t step,
                      std::optional<std::size_t> samples, const antdt::Error& e) {
  std::fprintf(stderr, "agent_trainer (rank %d): step %llu: %s\n", rank, static_cast<unsigned long long>(step),
               e.what());
  log << what << ' ' << step;
  if (samples) log << ' ' << *samples;
  log << std::endl;
}

// --partial: one run of partial steps on one communicator (docs/partial.md).
class PartialRun {
 public:
  explicit PartialRun(std::array<double, 2>& model) : model_(model) {}

  std::uint64_t done_through = 0;  // the results applied: plan steps up to this one
  bool resync_pending = false;     // too far behind: waits for its ordered restart

  // One step: contributes `grad` (weight: its samples) and applies the results
  // up to the newest one decided. Returns the contribution's fate.
  antdt::Fate step(antdt::Communicator& comm, const std::array<double, 2>& grad, std::uint64_t samples) {
    comm_ = &comm;
    antdt::PartialOptions o;
    o.policy = antdt::LatePolicy::defer;
    o.staleness = 2;
    // An empty batch still arrives with weight 1: a step closes only with an
    // on-time contribution of weight > 0 (the epoch's tail may leave every
    // rank at a step without samples).
    o.weight = samples > 0 ? static_cast<double>(samples) : 1.0;
    o.samples = samples;
    const antdt::PartialResult r = call(grad, o);
    catch_up(r.steps_behind);
    return samples > 0 ? r.fate : antdt::Fate::none;
  }

  // Ends the run (before a rebuild, an exit or the end): every rank then holds
  // the same results. The communicator of a run broken by a lost arbiter is
  // not asked (a new generation replaces it).
  void finish(bool broken) {
    if (comm_ == nullptr) return;
    antdt::Communicator* comm = std::exchange(comm_, nullptr);
    if (broken) return;
    catch_up(comm->partial_finish().steps_behind, comm);
  }

 private:
  antdt::PartialResult call(const std::array<double, 2>& send, const antdt::PartialOptions& o,
                            antdt::Communicator* comm = nullptr) {
    std::array<double, 2> result{0, 0};
    const antdt::PartialResult r = (comm ? *comm : *comm_).partial_allreduce(
        send.data(), result.data(), result.size(), antdt::DataType::f64, antdt::ReduceOp::sum, o);
    if (r.step == 0) return r;  // the run ended with every result applied
    model_[0] += result[0];
    model_[1] += result[1];
    ++done_through;
    return r;
  }

  void catch_up(std::uint64_t behind, antdt::Communicator* comm = nullptr) {
    antdt::PartialOptions o;
    o.policy = antdt::LatePolicy::defer;
    o.staleness = 2;
    o.weight = 0;
    const std::array<double, 2> nothing{0, 0};
    for (; behind > 0; behind = call(nothing, o, comm).steps_behind) {}
  }

  std::array<double, 2>& model_;
  antdt::Communicator* comm_ = nullptr;  // of the open run
};

int train(const std::map<std::string, std::string>& args) {
  const std::string out = args.at("--out");
  antdt::AgentOptions options;
  options.dataset_size = number(args, "--dataset", 1000);
  options.epochs = static_cast<std::uint32_t>(number(args, "--epochs", 1));
  options.global_batch = number(args, "--global-batch", 40);
  options.shard_size = number(args, "--shard-size", 0);
  auto step_time = std::chrono::milliseconds(number(args, "--step-ms", 2));
  const int slow_rank = static_cast<int>(number(args, "--slow-rank", 1u << 30));
  const int restart_rank = static_cast<int>(number(args, "--restart-rank", 1u << 30));
  const std::uint64_t restart_step = number(args, "--restart-step", 0);

  antdt::Agent agent = antdt::Agent::from_env(options);
  if (agent.rank() == slow_rank && agent.incarnation() == 0)
    step_time = std::chrono::milliseconds(number(args, "--slow-ms", 10));
  std::ofstream log(out + "/rank" + std::to_string(agent.rank()) + ".inc" + std::to_string(agent.incarnation()) +
                        ".log",
                    std::ios::trunc);
  log << "pid " << ::getpid() << std::endl;
  std::array<double, 2> model{0, 0};  // sum of sample ids, samples
  bool resynced = false;
  const bool partial = args.count("--partial") != 0;
  PartialRun run(model);
  bool run_broken = false;  // its arbiter was lost: the run cannot be finished
  // Ends the open partial run; a failure there (a rank or the arbiter lost
  // meanwhile) leaves the re-sync of the next generation to make replicas equal.
  auto finish_run = [&] {
    try {
      run.finish(run_broken);
    } catch (const antdt::Error& e) {
      std::fprintf(stderr, "agent_trainer (rank %d): ending the partial run: %s\n", agent.rank(), e.what());
    }
    run_broken = false;
  };
  for (;;) {
    const antdt::StepPlan plan = agent.next_step();
    if (agent.should_exit()) {
      finish_run();
      log << "exit " << plan.step << std::endl;
      return agent.exit_code();
    }
    log << "plan " << plan.step << ' ' << plan.local_batch << ' ' << plan.generation << std::endl;
    if (partial && plan.rebuild) finish_run();  // on the communicator being replaced
    try {
      antdt::Communicator& comm = agent.communicator();
      if (plan.rebuild) {
        // Re-sync from the lowest rank that kept its state (a restarted rank
        // starts from nothing). Communicator ranks: once a rank is lost for good
        // the communicator is smaller than the job.
        const bool fresh = agent.incarnation() > 0 && !resynced;
        std::array<std::int32_t, 1> source{fresh ? comm.size() : comm.rank()};
        comm.allreduce(std::span<std::int32_t>(source), antdt::ReduceOp::min);
        // Every member restarted (none kept a model): they all start from nothing alike.
        if (source[0] < comm.size()) comm.broadcast(std::span<double>(model), source[0]);
        resynced = true;
        run.done_through = plan.step - 1;
        log << "rebuild " << plan.step << ' ' << agent.generation() << std::endl;
      }
    } catch (const antdt::PeerLostError& e) {
      log_step_failure(log, "lost", agent.rank(), plan.step, 0, e);
      continue;  // the next plan moves to a new generation
    }
    if (plan.stop) {
      if (partial) finish_run();
      break;
    }
    if (partial && (run.resync_pending || plan.step <= run.done_through)) {
      // Its result was fetched already (this rank was late), or this rank
      // waits for its restart: no batch.
      log << "skip " << plan.step << std::endl;
      continue;
    }
    antdt::Communicator& comm = agent.communicator();
    if (agent.rank() == restart_rank && agent.incarnation() == 0 && plan.step == restart_step) agent.request_restart();
    const antdt::SampleBatch batch = agent.next_samples();
    std::array<double, 2> grad{0, static_cast<double>(batch.size())};
    for (auto id : batch) grad[0] += static_cast<double>(id);
    std::this_thread::sleep_for(step_time);  // the step's "compute"
    if (partial) {
      antdt::Fate fate = antdt::Fate::none;
      try {
        fate = run.step(comm, grad, batch.size());
      } catch (const antdt::ResyncError& e) {
        // Behind by more than the result cache: its model cannot catch up
        // here. Restarted, it re-syncs from a rank that kept its model.
        log_step_failure(log, "resync", agent.rank(), plan.step, std::nullopt, e);
        run.resync_pending = true;
        agent.request_restart();
        continue;  // its batch goes back
      } catch (const antdt::PeerLostError& e) {
        log_step_failure(log, "lost", agent.rank(), plan.step, batch.size(), e);
        run_broken = true;
        continue;  // its batch goes back; the next plan moves to a new generation
      }
      agent.report_step({.compute_s = std::chrono::duration<double>(step_time).count(), .samples = batch.size(),
                         .fate = fate});
      if (batch.empty()) continue;
      if (fate == antdt::Fate::dropped) {
        agent.settle(fate);  // given back: served again
        log << "drop " << plan.step << ' ' << batch.size() << std::endl;
        continue;
      }
      commit_logged(log, plan.step, batch, [&] { return agent.settle(fate); });
      continue;
    }
    try {
      comm.allreduce(std::span<double>(grad), antdt::ReduceOp::sum);
    } catch (const antdt::PeerLostError& e) {
      // A rank died: this step's result is not applied, its batch goes back
      // (next_step gives back an unsettled batch), and the Agent tells the coordinator.
      log_step_failure(log, "lost", agent.rank(), plan.step, batch.size(), e);
      continue;
    }
    model[0] += grad[0];
    model[1] += grad[1];
    agent.report_step({.compute_s = std::chrono::duration<double>(step_time).count(), .samples = batch.size()});
    if (!batch.empty()) commit_logged(log, plan.step, batch, [&] { return agent.commit(); });
  }
  // Every replica must hold the same model: compare min and max over ranks.
  antdt::Communicator& comm = agent.communicator();
  std::array<double, 2> low = model, high = model;
  comm.allreduce(std::span<double>(low), antdt::ReduceOp::min);
  comm.allreduce(std::span<double>(high), antdt::ReduceOp::max);
  const bool consistent = low == high;
  bool total_ok = true;
  if (comm.rank() == 0) {  // job rank 0, or the lowest survivor once it is lost for good
    std::ofstream total(out + "/total.txt");
    total << static_cast<std::uint64_t>(model[1]) << ' ' << (consistent ? 1 : 0) << std::endl;
    const double expected = static_cast<double>(options.dataset_size) * options.epochs;
    if (args.count("--check-total") && model[1] != expected) {
      std::fprintf(stderr, "agent_trainer: the model counted %.0f samples, expected %.0f\n", model[1], expected);
      total_ok = false;
    }
  }
  agent.close();
  return consistent && total_ok ? 0 : 1;
}

int sleeper(const std::map<std::string, std::string>& args, bool fail) {
  const std::string out = args.at("--out");
  const int rank = env_int("ANTDT_RANK", -1);
  const int world = env_int("ANTDT_WORLD_SIZE", 1);
  if (args.count("--ignore-term")) ::signal(SIGTERM, SIG_IGN);
  std::string line = std::to_string(::getpid());
  if (args.count("--fork")) {
    const pid_t child = ::fork();
    if (child == 0) {
      // A helper process the rank started: it must not outlive the job.
      for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ::_exit(0);
    }
    line += " " + std::to_string(child);
  }
  {
    const std::string path = out + "/pid." + std::to_string(rank);
    std::ofstream(path + ".tmp") << line << std::endl;
    std::filesystem::rename(path + ".tmp", path);
  }
  if (fail && rank == static_cast<int>(number(args, "--rank", 0))) {
    for (int i = 0; i < 200; ++i) {
      int written = 0;
      for (int r = 0; r < world; ++r) written += std::filesystem::exists(out + "/pid." + std::to_string(r)) ? 1 : 0;
      if (written == world) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return static_cast<int>(number(args, "--code", 1));
  }
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s train|sleep|fail --out DIR [options]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const auto args = parse(argc, argv);
  try {
    if (mode == "train") return train(args);
    if (mode == "sleep") return sleeper(args, false);
    if (mode == "fail") return sleeper(args, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agent_trainer (rank %s): %s\n", std::getenv("ANTDT_RANK"), e.what());
    return 1;
  }
  std::fprintf(stderr, "agent_trainer: unknown mode '%s'\n", mode.c_str());
  return 2;
}
