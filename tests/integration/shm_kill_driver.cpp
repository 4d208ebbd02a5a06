// Kills one rank with SIGKILL in the middle of a loop of AllReduces and checks
// that every survivor fails promptly with PeerLostError naming the dead rank,
// instead of waiting out ANTDT_TIMEOUT_MS: through shared memory (a dead peer
// never publishes, so only its missing process can tell) and over UCX alone
// (UCX_TLS=tcp,self, shared-memory paths off: UCX's endpoint error).
//   For each path (8 B: the mailbox; 1 MiB: the bulk area; 8 B and 1 MiB over
//   UCX alone): four ranks of antdt_fault_probe shm-kill, launched by hand
//   (ANTDT_RANK / ANTDT_ROOT); once each made 200 calls, rank 2 is killed;
//   every other rank must exit 0 (a PeerLostError naming rank 2) within kBoundS.
// Usage: antdt_shm_kill_driver <path to antdt_fault_probe>
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
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace child_process;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kTimeoutMs = 30000;  // what the survivors must not wait for
constexpr double kBoundS = 2.0;    // every survivor must know within this (docs/configuration.md#dead-ranks)
constexpr auto kStartBound = std::chrono::seconds(60);

// One run; true when every survivor failed as required within the bound.
bool run(const std::string& probe, std::size_t bytes, bool ucx_only) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("antdt-shm-kill-" + std::to_string(::getpid()) + "-" + std::to_string(bytes) +
                            (ucx_only ? "-ucx" : "")))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int port = free_port();
  std::array<pid_t, kRanks> pids{};
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> vars = {"ANTDT_ROOT=127.0.0.1:" + std::to_string(port),
                                     "ANTDT_WORLD_SIZE=" + std::to_string(kRanks), "ANTDT_RANK=" + std::to_string(r),
                                     "ANTDT_TIMEOUT_MS=" + std::to_string(kTimeoutMs),
                                     "ANTDT_SECRET=0123456789abcdef0123456789abcdef", "UCX_WARN_UNUSED_ENV_VARS=n"};
    if (ucx_only) {
      vars.push_back("UCX_TLS=tcp,self");
      vars.push_back("ANTDT_SHM_MAX_BYTES=0");
      vars.push_back("ANTDT_SHM_BULK_BYTES=0");
    }
    const std::vector<std::string> env = child_environment(vars);
    pids[static_cast<std::size_t>(r)] = launch({probe, "shm-kill", "--bytes", std::to_string(bytes), "--victim",
                                                std::to_string(kVictim), "--ready-dir", dir},
                                               env);
  }
  auto all_ready = [&] {
    for (int r = 0; r < kRanks; ++r)
      if (!std::filesystem::exists(dir + "/ready." + std::to_string(r))) return false;
    return true;
  };
  std::array<bool, kRanks> done{};
  std::array<int, kRanks> early_status{};
  auto any_ended = [&] {  // a rank that ended before the kill will never be ready
    bool ended = false;
    for (int r = 0; r < kRanks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (!done[i] && ::waitpid(pids[i], &early_status[i], WNOHANG) == pids[i]) done[i] = true;
      ended = ended || done[i];
    }
    return ended;
  };
  bool ok = true;
  const auto start = Clock::now();
  while (!all_ready() && !any_ended() && Clock::now() - start < kStartBound)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!all_ready()) {
    std::printf("shm_kill_driver: FAIL (%zu B): the ranks did not all make 200 calls within %lld s\n", bytes,
                static_cast<long long>(kStartBound.count()));
    ok = false;
  }
  const auto killed_at = Clock::now();
  if (!done[kVictim]) {
    ::kill(pids[kVictim], SIGKILL);
    ::waitpid(pids[kVictim], nullptr, 0);
  }
  int left = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim || !done[static_cast<std::size_t>(r)]) continue;
    std::printf("shm_kill_driver: FAIL (%zu B): rank %d ended before rank %d was killed\n", bytes, r, kVictim);
    ok = false;
  }
  done[kVictim] = true;
  for (bool d : done) left += d ? 0 : 1;
  const auto give_up = killed_at + std::chrono::milliseconds(kTimeoutMs + 10000);
  while (left > 0) {
    for (int r = 0; r < kRanks; ++r) {
      if (done[static_cast<std::size_t>(r)]) continue;
      int status = 0;
      const bool late = Clock::now() >= give_up;
      if (late) ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
      if (::waitpid(pids[static_cast<std::size_t>(r)], &status, late ? 0 : WNOHANG) != pids[static_cast<std::size_t>(r)])
        continue;
      done[static_cast<std::size_t>(r)] = true;
      --left;
      const double seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
      const bool exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const bool in_time = seconds <= kBoundS;
      std::printf("shm_kill_driver: %zu B%s: rank %d %s %.3f s after rank %d was killed%s\n", bytes,
                  ucx_only ? " over UCX alone" : "", r,
                  exited_ok ? "failed as required" : "did NOT fail as required (see its output)", seconds, kVictim,
                  in_time ? "" : " (over the bound)");
      ok = ok && exited_ok && in_time;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::filesystem::remove_all(dir);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <path to antdt_fault_probe>\n", argv[0]);
    return 2;
  }
  std::fflush(stdout);
  bool ok = true;
  for (const bool ucx_only : {false, true}) {
    ok = run(argv[1], 8, ucx_only) && ok;
    ok = run(argv[1], std::size_t{1} << 20, ucx_only) && ok;
  }
  std::printf("shm_kill_driver: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
