// antdt-run's process handling, with agent_trainer's sleep / fail modes:
//   signal    SIGTERM to antdt-run reaches every rank and the helpers they
//             forked; antdt-run exits 143 and nothing is left running;
//   failure   one rank exits 7 under --min-ranks 3 (no restarts): the others
//             are stopped, antdt-run exits 7, nothing is left running;
//   stubborn  ranks that ignore SIGTERM are killed after --grace; SIGINT ->
//             exit 130, nothing left;
//   restarts  a rank that keeps exiting with the restart code is started
//             again --restarts times, then (--min-ranks 2) the job stops with that code;
//   crashes   a rank that keeps exiting with code 9 is started again too.
// Usage: antdt_agent_launcher_driver <antdt-run> <agent_trainer>
#include "agent_driver_common.hpp"

using namespace agent_test;

namespace {

// Waits for pid.<rank> files of `world` ranks; returns every pid they name.
std::vector<pid_t> wait_pid_files(const std::string& dir, int world, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    std::vector<pid_t> pids;
    int found = 0;
    for (int r = 0; r < world; ++r) {
      const auto lines = read_lines(dir + "/pid." + std::to_string(r));
      if (lines.empty()) continue;
      ++found;
      std::istringstream in(lines[0]);
      for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
    }
    if (found == world || Clock::now() >= deadline) return pids;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string describe(const std::optional<Ended>& e) {
  return e ? "exit code " + std::to_string(e->code) + " after " + std::to_string(e->seconds) + " s" : "killed at the limit";
}

void signal_forwarding(const std::string& run, const std::string& trainer) {
  const std::string dir = make_temp_dir("launcher-signal");
  const pid_t launcher = spawn({run, "-n", "3", "--", trainer, "sleep", "--out", dir, "--fork"}, {});
  const auto pids = wait_pid_files(dir, 3, std::chrono::seconds(20));
  check(pids.size() == 6, "3 ranks and their 3 helpers started (" + std::to_string(pids.size()) + " pids)");
  ::kill(launcher, SIGTERM);
  const auto ended = wait_for(launcher, std::chrono::seconds(20));
  check(ended && ended->code == 128 + SIGTERM, "antdt-run exits 143 on SIGTERM (" + describe(ended) + ")");
  check(wait_gone(pids, std::chrono::seconds(5)), "no rank or helper outlives antdt-run");
  std::filesystem::remove_all(dir);
}

void failure(const std::string& run, const std::string& trainer) {
  const std::string dir = make_temp_dir("launcher-failure");
  const pid_t launcher =
      spawn({run, "-n", "3", "--min-ranks", "3", "--", trainer, "fail", "--out", dir, "--rank", "1", "--code", "7",
             "--fork"},
            {});
  const auto pids = wait_pid_files(dir, 3, std::chrono::seconds(20));
  const auto ended = wait_for(launcher, std::chrono::seconds(20));
  check(ended && ended->code == 7, "antdt-run exits with the failed rank's code 7 (" + describe(ended) + ")");
  check(wait_gone(pids, std::chrono::seconds(5)), "the other ranks and every helper were stopped");
  std::filesystem::remove_all(dir);
}

void stubborn(const std::string& run, const std::string& trainer) {
  const std::string dir = make_temp_dir("launcher-stubborn");
  const pid_t launcher =
      spawn({run, "-n", "2", "--grace", "1", "--", trainer, "sleep", "--out", dir, "--ignore-term"}, {});
  const auto pids = wait_pid_files(dir, 2, std::chrono::seconds(20));
  ::kill(launcher, SIGINT);
  const auto ended = wait_for(launcher, std::chrono::seconds(20));
  // SIGINT reaches the ranks (they ignore only SIGTERM) or, failing that, SIGKILL after the grace.
  check(ended && ended->code == 128 + SIGINT, "antdt-run exits 130 on SIGINT (" + describe(ended) + ")");
  check(wait_gone(pids, std::chrono::seconds(5)), "no rank is left running");

  // Ranks that ignore the forwarded signal itself: SIGTERM, then SIGKILL after --grace 1.
  const std::string dir2 = make_temp_dir("launcher-stubborn2");
  const pid_t launcher2 =
      spawn({run, "-n", "2", "--grace", "1", "--", trainer, "sleep", "--out", dir2, "--ignore-term"}, {});
  const auto pids2 = wait_pid_files(dir2, 2, std::chrono::seconds(20));
  ::kill(launcher2, SIGTERM);
  const auto ended2 = wait_for(launcher2, std::chrono::seconds(20));
  check(ended2 && ended2->code == 128 + SIGTERM, "antdt-run exits 143 after killing ranks that ignore SIGTERM (" +
                                                     describe(ended2) + ")");
  check(ended2 && ended2->seconds >= 0.9, "the ranks got their grace period before SIGKILL");
  check(wait_gone(pids2, std::chrono::seconds(5)), "ranks that ignored SIGTERM were killed");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

void restarts(const std::string& run, const std::string& trainer) {
  const std::string dir = make_temp_dir("launcher-restarts");
  for (const char* code : {"75", "9"}) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directory(dir);
    const pid_t launcher = spawn({run, "-n", "2", "--restarts", "2", "--min-ranks", "2", "--", trainer, "fail", "--out",
                                  dir, "--rank", "1", "--code", code},
                                 {});
    const auto ended = wait_for(launcher, std::chrono::seconds(30));
    check(ended && ended->code == std::atoi(code), std::string("a rank that exits with ") + code +
                                                       " until it exhausts its restarts stops the job with that code (" +
                                                       describe(ended) + ")");
    const auto pids = wait_pid_files(dir, 2, std::chrono::seconds(1));
    check(wait_gone(pids, std::chrono::seconds(5)), "no rank is left running");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <antdt-run> <agent_trainer>\n", argv[0]);
    return 2;
  }
  signal_forwarding(argv[1], argv[2]);
  failure(argv[1], argv[2]);
  stubborn(argv[1], argv[2]);
  restarts(argv[1], argv[2]);
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
