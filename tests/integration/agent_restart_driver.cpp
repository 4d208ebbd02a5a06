// End-to-end rejoin tests: antdt-run starts agent_trainer ranks; one rank is
// ordered to restart (it asks for it at a given step), the launcher starts it
// again, every rank rebuilds its communicator, and the job finishes. Checked
// from the ranks' logs: every sample id committed exactly once (a bitmap), the
// restarted rank got samples after its restart, every rank rebuilt at the same
// step, and every replica ends with the same model, which counted each sample
// once (plus the samples of batches a restarted coordinator voided).
//
// Usage: antdt_agent_restart_driver <antdt-run> <antdt-coordinator> <agent_trainer> <scenario>
//   embedded        4 ranks, rank 0 hosts the coordinator, rank 2 restarts
//   external-rank0  3 ranks, antdt-coordinator runs apart, rank 0 restarts
//   coordinator     3 ranks, antdt-coordinator is stopped mid-job (SIGTERM)
//                   and started again from its checkpoint; the ranks reconnect
//   policy          4 ranks under ANTDT_POLICY=antdt-nd, rank 3 4x slower from
//                   the start: the policy orders its restart (no request)
#include "agent_driver_common.hpp"
#include "commit_log.hpp"

#include <map>

using namespace agent_test;

namespace {

constexpr auto kJobLimit = std::chrono::seconds(150);

struct LogSummary : commit_log::CommitLog {
  std::size_t commit_lines(const std::string& file) const {
    std::size_t n = 0;
    if (auto it = files.find(file); it != files.end())
      for (const auto& l : it->second) n += l.rfind("commit ", 0) == 0 ? 1 : 0;
    return n;
  }
  bool has_line_starting(const std::string& file, const std::string& prefix) const {
    if (auto it = files.find(file); it != files.end())
      for (const auto& l : it->second)
        if (l.rfind(prefix, 0) == 0) return true;
    return false;
  }
  std::vector<std::string> rebuild_steps(const std::string& file) const {
    std::vector<std::string> steps;
    if (auto it = files.find(file); it != files.end())
      for (const auto& l : it->second)
        if (l.rfind("rebuild ", 0) == 0) steps.push_back(l.substr(8, l.find(' ', 8) - 8));
    return steps;
  }
};

LogSummary read_logs(const std::string& dir, std::uint64_t dataset) {
  LogSummary s;
  static_cast<commit_log::CommitLog&>(s) = commit_log::read(dir, dataset);
  for (const auto& bad : s.out_of_range) check(false, "sample id out of range: " + bad);
  return s;
}

void check_exactly_once(const LogSummary& s) {
  const std::uint64_t bad = s.wrong();
  check(bad == 0, "every sample committed exactly once" +
                      (bad ? " (" + std::to_string(bad) + " wrong; " + s.first_problem() + ")" : std::string()));
}

void check_total(const std::string& dir, std::uint64_t expected) {
  const auto lines = read_lines(dir + "/total.txt");
  check(lines.size() == 1, "rank 0 wrote total.txt");
  if (lines.size() != 1) return;
  std::istringstream in(lines[0]);
  std::uint64_t total = 0;
  int consistent = 0;
  in >> total >> consistent;
  check(consistent == 1, "every rank ends with the same model");
  check(total == expected, "the model counted " + std::to_string(total) + " samples, expected " + std::to_string(expected));
}

void check_restart(const LogSummary& s, int world, int restarted) {
  const std::string before = "rank" + std::to_string(restarted) + ".inc0.log";
  const std::string after = "rank" + std::to_string(restarted) + ".inc1.log";
  check(s.has_line_starting(before, "exit "), "rank " + std::to_string(restarted) + " exited on its restart order");
  check(s.commit_lines(after) > 0, "rank " + std::to_string(restarted) + " got samples after its restart (" +
                                       std::to_string(s.commit_lines(after)) + " batches)");
  // Every rank (the restarted one in its new incarnation) rebuilt once, at the same step.
  std::vector<std::string> steps;
  for (int r = 0; r < world; ++r) {
    const std::string file = "rank" + std::to_string(r) + (r == restarted ? ".inc1.log" : ".inc0.log");
    const auto rebuilds = s.rebuild_steps(file);
    check(rebuilds.size() == 1, file + " rebuilt once (" + std::to_string(rebuilds.size()) + " times)");
    if (!rebuilds.empty()) steps.push_back(rebuilds[0]);
  }
  bool same = !steps.empty();
  for (const auto& step : steps) same = same && step == steps[0];
  check(same, "every rank rebuilt at the same step" + (steps.empty() ? std::string() : " (" + steps[0] + ")"));
}

std::vector<std::string> trainer_args(const Paths& p, const std::string& dir, std::uint64_t dataset,
                                      std::uint64_t global_batch, std::uint64_t shard, int step_ms,
                                      std::optional<std::pair<int, int>> restart,
                                      std::optional<std::pair<int, int>> slow = std::nullopt) {
  std::vector<std::string> a = {p.trainer, "train", "--out", dir, "--dataset", std::to_string(dataset),
                                "--global-batch", std::to_string(global_batch), "--shard-size", std::to_string(shard),
                                "--step-ms", std::to_string(step_ms)};
  if (restart) {
    a.insert(a.end(), {"--restart-rank", std::to_string(restart->first), "--restart-step", std::to_string(restart->second)});
  }
  if (slow) a.insert(a.end(), {"--slow-rank", std::to_string(slow->first), "--slow-ms", std::to_string(slow->second)});
  return a;
}

void embedded(const Paths& p) {
  const std::string dir = make_temp_dir("agent-embedded");
  const std::uint64_t n = 2000;
  std::vector<std::string> argv = {p.run, "-n", "4", "--restarts", "1", "--"};
  const auto trainer = trainer_args(p, dir, n, 40, 50, 2, std::pair{2, 10});
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  const auto ended = wait_for(spawn(argv, {"ANTDT_TIMEOUT_MS=30000"}), kJobLimit);
  check(ended && ended->code == 0, "antdt-run finished with exit code 0" +
                                       (ended ? " (got " + std::to_string(ended->code) + ")" : std::string(" (killed)")));
  const LogSummary s = read_logs(dir, n);
  check_exactly_once(s);
  check_restart(s, 4, 2);
  check_total(dir, n + s.voided);
  std::filesystem::remove_all(dir);
}

void policy_restart(const Paths& p) {
  const std::string dir = make_temp_dir("agent-policy");
  const std::uint64_t n = 4000;
  std::vector<std::string> argv = {p.run, "-n", "4", "--restarts", "2", "--"};
  const auto trainer = trainer_args(p, dir, n, 40, 40, 2, std::nullopt, std::pair{3, 8});
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  const auto ended = wait_for(spawn(argv, {"ANTDT_TIMEOUT_MS=30000", "ANTDT_POLICY=antdt-nd"}), kJobLimit);
  check(ended && ended->code == 0, "antdt-run finished with exit code 0" +
                                       (ended ? " (got " + std::to_string(ended->code) + ")" : std::string(" (killed)")));
  const LogSummary s = read_logs(dir, n);
  check_exactly_once(s);
  check_restart(s, 4, 3);
  check_total(dir, n + s.voided);
  std::filesystem::remove_all(dir);
}

pid_t start_coordinator(const Paths& p, int port, int world, std::uint64_t n, std::uint64_t global_batch,
                        std::uint64_t shard, const std::string& checkpoint) {
  std::vector<std::string> argv = {p.coordinator, "--listen", "127.0.0.1:" + std::to_string(port), "-n",
                                   std::to_string(world), "--dataset-size", std::to_string(n), "--global-batch",
                                   std::to_string(global_batch), "--shard-size", std::to_string(shard)};
  if (!checkpoint.empty()) argv.insert(argv.end(), {"--checkpoint", checkpoint, "--checkpoint-s", "0.05"});
  const pid_t pid = spawn(argv, {"ANTDT_SECRET=" + kSecret, "ANTDT_TIMEOUT_MS=30000"});
  wait_listening(port);  // before antdt-run probes ports of its own
  return pid;
}

void external_rank0(const Paths& p) {
  const std::string dir = make_temp_dir("agent-external");
  const std::uint64_t n = 1500;
  const int port = free_port();
  const pid_t coordinator = start_coordinator(p, port, 3, n, 30, 50, "");
  std::vector<std::string> argv = {p.run, "-n", "3", "--restarts", "1", "--"};
  const auto trainer = trainer_args(p, dir, n, 30, 50, 2, std::pair{0, 8});
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  const auto ended = wait_for(spawn(argv, {"ANTDT_TIMEOUT_MS=30000", "ANTDT_SECRET=" + kSecret,
                                           "ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(port)}),
                              kJobLimit);
  check(ended && ended->code == 0, "antdt-run finished with exit code 0" +
                                       (ended ? " (got " + std::to_string(ended->code) + ")" : std::string(" (killed)")));
  const auto coordinator_ended = wait_for(coordinator, std::chrono::seconds(30));
  check(coordinator_ended && coordinator_ended->code == 0, "antdt-coordinator exited 0 once every rank said bye");
  const LogSummary s = read_logs(dir, n);
  check_exactly_once(s);
  check_restart(s, 3, 0);
  check_total(dir, n + s.voided);
  std::filesystem::remove_all(dir);
}

void coordinator_restart(const Paths& p) {
  const std::string dir = make_temp_dir("agent-coordinator");
  const std::uint64_t n = 1500;
  const int port = free_port();
  const std::string checkpoint = dir + "/coordinator.json";
  pid_t coordinator = start_coordinator(p, port, 3, n, 30, 30, checkpoint);
  std::vector<std::string> argv = {p.run, "-n", "3", "--"};
  const auto trainer = trainer_args(p, dir, n, 30, 30, 20, std::nullopt);
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  const pid_t job = spawn(argv, {"ANTDT_TIMEOUT_MS=30000", "ANTDT_SECRET=" + kSecret,
                                 "ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(port)});
  // Let a few steps commit, then stop the coordinator and start it again.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::size_t committed_batches = 0;
  while (Clock::now() < deadline && committed_batches < 15) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    committed_batches = 0;
    const LogSummary now = read_logs(dir, n);
    for (const auto& [file, lines] : now.files) committed_batches += now.commit_lines(file);
  }
  check(committed_batches >= 15, "the job committed batches before the coordinator restart");
  ::kill(coordinator, SIGTERM);
  const auto first = wait_for(coordinator, std::chrono::seconds(10));
  check(first && first->code == 3, "antdt-coordinator stopped on SIGTERM (with a last checkpoint), exit 3: the job was not complete");
  check(std::filesystem::exists(checkpoint), "the coordinator wrote its checkpoint");
  coordinator = start_coordinator(p, port, 3, n, 30, 30, checkpoint);
  const auto ended = wait_for(job, kJobLimit);
  check(ended && ended->code == 0, "antdt-run finished with exit code 0 after the coordinator restart" +
                                       (ended ? " (got " + std::to_string(ended->code) + ")" : std::string(" (killed)")));
  const auto second = wait_for(coordinator, std::chrono::seconds(30));
  check(second && second->code == 0, "the restarted antdt-coordinator exited 0 once every rank said bye");
  const LogSummary s = read_logs(dir, n);
  check_exactly_once(s);
  check_total(dir, n + s.voided);
  std::printf("note: %llu samples were in batches voided by the restart (served again)\n",
              static_cast<unsigned long long>(s.voided));
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <antdt-run> <antdt-coordinator> <agent_trainer> embedded|external-rank0|coordinator|policy\n",
                 argv[0]);
    return 2;
  }
  const Paths paths{argv[1], argv[2], argv[3]};
  const std::string scenario = argv[4];
  if (scenario == "embedded")
    embedded(paths);
  else if (scenario == "external-rank0")
    external_rank0(paths);
  else if (scenario == "coordinator")
    coordinator_restart(paths);
  else if (scenario == "policy")
    policy_restart(paths);
  else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
