// A rank killed with SIGKILL in the middle of Agent training under antdt-run
// (issue 16, docs/scheduler.md "A rank that crashes"): 4 ranks of
// agent_trainer, 2 epochs; once rank 2 has committed some batches the driver
// kills it (kill -9 from outside, at whatever point of its step it is).
//
//   restart    --restarts 1: antdt-run starts rank 2 again; the survivors
//              learn of the death (PeerLostError, the coordinator's closed
//              connection), every rank moves to a new communicator generation
//              that the new incarnation joins, and the job finishes: exit 0.
//   survivors  --restarts 0: rank 2 is lost for good; the 3 survivors move to
//              a 3-rank generation and finish the data: exit 0 (documented:
//              the survivors finished the job). From the rebuild on, the
//              survivors' plans add up to the global batch.
//
//   external-restart, external-survivors
//              the same with rank 0 as the victim and antdt-coordinator
//              running apart (ANTDT_MAX_RESTARTS in its environment): the
//              arbiter of the job's data is not in the dead process.
//
// All check, from the ranks' logs: every sample committed exactly once per
// epoch (a bitmap of commit counts = epochs), every replica ends with the same
// model, and the model counted each sample at least once and at most once more
// for the batches of the steps the death broke.
//
// Usage: antdt_agent_kill_driver <antdt-run> <antdt-coordinator> <agent_trainer>
//          restart|survivors|external-restart|external-survivors
#include "agent_driver_common.hpp"
#include "commit_log.hpp"

#include <map>

using namespace agent_test;

namespace {

constexpr auto kJobLimit = std::chrono::seconds(150);
constexpr std::uint64_t kDataset = 3000;
constexpr std::uint32_t kEpochs = 2;
constexpr std::uint64_t kGlobalBatch = 40;
constexpr int kWorld = 4;
int victim_rank = 2;

using Logs = commit_log::CommitLog;

Logs read_all(const std::string& dir) {
  Logs s = commit_log::read(dir, kDataset);
  for (const auto& bad : s.out_of_range) check(false, "sample id out of range: " + bad);
  return s;
}

std::size_t count_lines(const Logs& s, const std::string& file, const std::string& prefix) {
  std::size_t n = 0;
  if (auto it = s.files.find(file); it != s.files.end())
    for (const auto& l : it->second) n += l.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

std::string log_name(int rank, int incarnation) {
  return "rank" + std::to_string(rank) + ".inc" + std::to_string(incarnation) + ".log";
}

// The pid on the first line of a rank's log, once it has `batches` commits; 0 at the deadline.
pid_t wait_for_victim(const std::string& dir, std::size_t batches, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  const std::string path = dir + "/" + log_name(victim_rank, 0);
  while (Clock::now() < deadline) {
    const auto lines = read_lines(path);
    std::size_t commits = 0;
    for (const auto& l : lines) commits += l.rfind("commit ", 0) == 0 ? 1 : 0;
    if (commits >= batches && !lines.empty() && lines[0].rfind("pid ", 0) == 0)
      return static_cast<pid_t>(std::stol(lines[0].substr(4)));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

void check_common(const std::string& dir, const Logs& s) {
  const int epochs = static_cast<int>(kEpochs);
  const std::uint64_t bad = s.wrong(epochs);
  const std::string first = s.first_problem(epochs);
  check(bad == 0, "every sample committed exactly once per epoch (" + std::to_string(kEpochs) + " epochs)" +
                      (bad ? " (" + std::to_string(bad) + " wrong; " + first + ")" : std::string()));
  const auto total_lines = read_lines(dir + "/total.txt");
  check(total_lines.size() == 1, "rank 0 wrote total.txt");
  if (total_lines.size() != 1) return;
  std::istringstream in(total_lines[0]);
  std::uint64_t total = 0;
  int consistent = 0;
  in >> total >> consistent;
  check(consistent == 1, "every replica ends with the same model");
  const std::uint64_t low = kDataset * kEpochs + s.voided;
  // Trained twice at most: the samples of steps broken by the death on a survivor,
  // those of the dead rank's last lease when it died before committing it, and
  // those of its last plan when it died after the step's allreduce and before
  // its lease line (the survivors applied them; nobody committed them).
  const auto victim_log = s.unleased_plan.find(log_name(victim_rank, 0));
  const std::uint64_t unleased = victim_log != s.unleased_plan.end() ? victim_log->second : 0;
  const std::uint64_t again = s.broken + s.in_doubt_samples() + unleased;
  check(total >= low && total <= low + again,
        "the model counted " + std::to_string(total) + " samples: each one at least once (" + std::to_string(low) +
            ") and at most once more for the " + std::to_string(s.broken) + " samples of broken steps, the " +
            std::to_string(s.in_doubt_samples()) + " of the dead rank's lease in doubt and the " +
            std::to_string(unleased) + " of its last plan without a lease");
  std::size_t broken_steps = 0;
  for (const auto& [file, lines] : s.files) broken_steps += count_lines(s, file, "lost ");
  std::printf("note: %zu step(s) broken by the death on the survivors (%llu samples served again), %llu samples "
              "voided\n",
              broken_steps, static_cast<unsigned long long>(s.broken), static_cast<unsigned long long>(s.voided));
}

// The survivors' plans of every step from the first one in a generation without the victim.
void check_survivor_plans(const Logs& s) {
  std::map<std::uint64_t, std::pair<int, std::uint64_t>> per_step;  // step -> (plans seen, Σ local batch)
  std::uint64_t first_after = 0;
  const int first_survivor = victim_rank == 0 ? 1 : 0;
  for (int r = 0; r < kWorld; ++r) {
    if (r == victim_rank) continue;
    auto it = s.files.find(log_name(r, 0));
    if (it == s.files.end()) continue;
    for (const auto& line : it->second) {
      std::istringstream in(line);
      std::string word;
      std::uint64_t step = 0, batch = 0, generation = 0;
      in >> word >> step >> batch >> generation;
      if (word == "rebuild" && r == first_survivor && first_after == 0) first_after = step;
      if (word != "plan") continue;
      auto& entry = per_step[step];
      ++entry.first;
      entry.second += batch;
    }
  }
  check(first_after > 0, "the survivors rebuilt their communicator after the death (at step " +
                             std::to_string(first_after) + ")");
  std::size_t steps = 0, wrong = 0;
  std::string example;
  for (const auto& [step, entry] : per_step) {
    if (first_after == 0 || step < first_after) continue;
    // Rank 0 may have asked a plan the others never reached: the last one, stop.
    if (entry.first != kWorld - 1) continue;
    ++steps;
    if (entry.second != kGlobalBatch && wrong++ == 0)
      example = "step " + std::to_string(step) + ": " + std::to_string(entry.second);
  }
  check(steps > 0 && wrong == 0, "the 3 survivors' local batches add up to the global batch " +
                                     std::to_string(kGlobalBatch) + " in each of the " + std::to_string(steps) +
                                     " steps after the death" + (wrong ? " (" + example + ")" : std::string()));
}

int run_case(const std::string& run, const std::string& coordinator_program, const std::string& trainer, bool restart,
             bool external) {
  const std::string dir = make_temp_dir(restart ? "agent-kill-restart" : "agent-kill-survivors");
  std::vector<std::string> job_env = {"ANTDT_TIMEOUT_MS=30000"};
  pid_t coordinator = -1;
  if (external) {
    const int port = free_port();
    coordinator = spawn({coordinator_program, "--listen", "127.0.0.1:" + std::to_string(port), "-n",
                         std::to_string(kWorld), "--dataset-size", std::to_string(kDataset), "--epochs",
                         std::to_string(kEpochs), "--global-batch", std::to_string(kGlobalBatch), "--shard-size", "50"},
                        {"ANTDT_SECRET=" + kSecret, "ANTDT_TIMEOUT_MS=30000",
                         std::string("ANTDT_MAX_RESTARTS=") + (restart ? "1" : "0")});
    wait_listening(port);  // before antdt-run probes ports of its own
    job_env.push_back("ANTDT_SECRET=" + kSecret);
    job_env.push_back("ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(port));
  }
  std::vector<std::string> argv = {run,
                                   "-n",
                                   std::to_string(kWorld),
                                   "--restarts",
                                   restart ? "1" : "0",
                                   "--",
                                   trainer,
                                   "train",
                                   "--out",
                                   dir,
                                   "--dataset",
                                   std::to_string(kDataset),
                                   "--epochs",
                                   std::to_string(kEpochs),
                                   "--global-batch",
                                   std::to_string(kGlobalBatch),
                                   "--shard-size",
                                   "50",
                                   "--step-ms",
                                   "5"};
  const pid_t job = spawn(argv, job_env);
  const pid_t victim = wait_for_victim(dir, 20, std::chrono::seconds(60));
  check(victim > 0, "rank " + std::to_string(victim_rank) + " committed 20 batches (pid " + std::to_string(victim) + ")");
  if (victim > 0) ::kill(victim, SIGKILL);
  const auto ended = wait_for(job, kJobLimit);
  check(ended && ended->code == 0, std::string("antdt-run finished with exit code 0") +
                                       (ended ? " (got " + std::to_string(ended->code) + " after " +
                                                    std::to_string(ended->seconds) + " s)"
                                              : std::string(" (killed at the limit)")));
  if (external) {
    const auto coordinator_ended = wait_for(coordinator, std::chrono::seconds(30));
    check(coordinator_ended && coordinator_ended->code == 0,
          "antdt-coordinator exited 0: the job completed" +
              (coordinator_ended ? " (got " + std::to_string(coordinator_ended->code) + ")" : std::string(" (killed)")));
  }
  const Logs s = read_all(dir);
  check_common(dir, s);
  const std::string again = log_name(victim_rank, 1);
  if (restart) {
    check(count_lines(s, again, "commit ") > 0,
          "rank " + std::to_string(victim_rank) + "'s second incarnation committed batches (" +
              std::to_string(count_lines(s, again, "commit ")) + ")");
    bool all_rebuilt = count_lines(s, again, "rebuild ") == 1;
    for (int r = 0; r < kWorld; ++r)
      if (r != victim_rank) all_rebuilt = all_rebuilt && count_lines(s, log_name(r, 0), "rebuild ") >= 1;
    check(all_rebuilt, "every survivor and the new incarnation rebuilt their communicator");
  } else {
    check(s.files.count(again) == 0, "rank " + std::to_string(victim_rank) + " was not started again");
    check_survivor_plans(s);
  }
  if (failures == 0) std::filesystem::remove_all(dir);
  else std::printf("logs kept in %s\n", dir.c_str());
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: %s <antdt-run> <antdt-coordinator> <agent_trainer> "
                 "restart|survivors|external-restart|external-survivors\n",
                 argv[0]);
    return 2;
  }
  std::string scenario = argv[4];
  const bool external = scenario.rfind("external-", 0) == 0;
  if (external) scenario = scenario.substr(9);
  if (scenario != "restart" && scenario != "survivors") {
    std::fprintf(stderr, "unknown scenario '%s'\n", argv[4]);
    return 2;
  }
  if (external) victim_rank = 0;
  run_case(argv[1], argv[2], argv[3], scenario == "restart", external);
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
