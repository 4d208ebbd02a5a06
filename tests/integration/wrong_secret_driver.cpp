// Launches two ranks by hand (ANTDT_RANK / ANTDT_WORLD_SIZE / ANTDT_ROOT /
// ANTDT_SECRET) and checks the bootstrap's secret handling:
//   1. control: both ranks share the secret -> both join (proves the setup);
//   2. rank 1 presents another secret -> the root refuses it: rank 1 fails with
//      BootstrapError before ANTDT_TIMEOUT_MS, rank 0 fails with an antdt error,
//      and neither runs past ANTDT_TIMEOUT_MS plus a grace period (killed then).
// Usage: antdt_wrong_secret_driver <path to antdt_fault_probe>
#include <antdt/comm.h>

#include "child_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace child_process;
using Clock = std::chrono::steady_clock;

constexpr int kTimeoutMs = 4000;
constexpr int kGraceMs = 10000;
constexpr int kJoinErrorBase = 10;  // antdt_fault_probe join: exit 10 + status

struct Outcome {
  bool exited = false;   // false: killed at the deadline (or by a signal)
  int exit_code = -1;
  int signal = 0;
  double seconds = 0;
};

// Waits for both children until `deadline_ms`; kills whoever is still running.
std::array<Outcome, 2> wait_all(const std::array<pid_t, 2>& pids, Clock::time_point start, int deadline_ms) {
  std::array<Outcome, 2> outcomes{};
  std::array<bool, 2> done{pids[0] <= 0, pids[1] <= 0};
  const auto deadline = start + std::chrono::milliseconds(deadline_ms);
  while (!(done[0] && done[1])) {
    for (std::size_t i = 0; i < 2; ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[i], &status, WNOHANG);
      if (got != pids[i]) continue;
      done[i] = true;
      outcomes[i].seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (WIFEXITED(status)) {
        outcomes[i].exited = true;
        outcomes[i].exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        outcomes[i].signal = WTERMSIG(status);
      }
    }
    if (Clock::now() >= deadline) {
      for (std::size_t i = 0; i < 2; ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        done[i] = true;
        outcomes[i].seconds = std::chrono::duration<double>(Clock::now() - start).count();
        std::fprintf(stderr, "wrong_secret_driver: rank %zu still running after %d ms: killed\n", i, deadline_ms);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return outcomes;
}

std::array<Outcome, 2> run_pair(const std::string& program, int port, const std::string& secret0,
                                 const std::string& secret1) {
  const std::string root = "ANTDT_ROOT=127.0.0.1:" + std::to_string(port);
  const std::vector<std::string> common{root, "ANTDT_WORLD_SIZE=2", "ANTDT_TIMEOUT_MS=" + std::to_string(kTimeoutMs),
                                        "UCX_WARN_UNUSED_ENV_VARS=n"};
  auto env_for = [&](int rank, const std::string& secret) {
    std::vector<std::string> extra = common;
    extra.push_back("ANTDT_RANK=" + std::to_string(rank));
    extra.push_back("ANTDT_SECRET=" + secret);
    return child_environment(extra);
  };
  const auto start = Clock::now();
  const pid_t rank0 = launch({program, "join"}, env_for(0, secret0));
  const pid_t rank1 = launch({program, "join"}, env_for(1, secret1));
  if (rank0 < 0 || rank1 < 0) std::perror("fork");
  return wait_all({rank0, rank1}, start, kTimeoutMs + kGraceMs);
}

std::string describe(const Outcome& o) {
  if (o.exited) return "exit code " + std::to_string(o.exit_code) + " after " + std::to_string(o.seconds) + " s";
  if (o.signal != 0) return "killed by signal " + std::to_string(o.signal) + " after " + std::to_string(o.seconds) + " s";
  return "did not finish";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <path to antdt_fault_probe>\n", argv[0]);
    return 2;
  }
  const std::string program = argv[1];
  const std::string secret = "0123456789abcdef0123456789abcdef";
  const std::string other_secret = "fedcba9876543210fedcba9876543210";
  int failures = 0;

  // 1. Control. A second attempt covers the rare case of the probed port being taken meanwhile.
  bool control_ok = false;
  for (int attempt = 0; attempt < 2 && !control_ok; ++attempt) {
    const int port = free_port();
    const auto control = run_pair(program, port, secret, secret);
    std::printf("wrong_secret_driver: control (same secret, port %d): rank 0 %s; rank 1 %s\n", port,
                describe(control[0]).c_str(), describe(control[1]).c_str());
    control_ok = control[0].exited && control[0].exit_code == 0 && control[1].exited && control[1].exit_code == 0;
  }
  if (!control_ok) {
    std::printf("wrong_secret_driver: FAIL: two ranks with the same secret did not both join\n");
    return 1;
  }

  // 2. Rank 1 with another secret.
  const int port = free_port();
  const auto refused = run_pair(program, port, secret, other_secret);
  std::printf("wrong_secret_driver: wrong secret (port %d): rank 0 %s; rank 1 %s\n", port,
              describe(refused[0]).c_str(), describe(refused[1]).c_str());
  const int bootstrap_exit = kJoinErrorBase + ANTDT_ERR_BOOTSTRAP;
  if (!(refused[1].exited && refused[1].exit_code == bootstrap_exit)) {
    std::printf("wrong_secret_driver: FAIL: rank 1 (wrong secret) must fail with BootstrapError (exit %d)\n",
                bootstrap_exit);
    ++failures;
  } else if (refused[1].seconds * 1000 >= kTimeoutMs) {
    std::printf("wrong_secret_driver: FAIL: rank 1 was refused only after %.2f s, not before ANTDT_TIMEOUT_MS=%d\n",
                refused[1].seconds, kTimeoutMs);
    ++failures;
  }
  if (!(refused[0].exited && refused[0].exit_code > kJoinErrorBase)) {
    std::printf("wrong_secret_driver: FAIL: rank 0 must end with an antdt error (exit > %d), not join or hang\n",
                kJoinErrorBase);
    ++failures;
  }
  std::printf("wrong_secret_driver: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
