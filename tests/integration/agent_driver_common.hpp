// Process helpers shared by the agent drivers (agent_*_driver.cpp,
// coordinator_kill_driver.cpp, tests/fault/fault_campaign.cpp): start a
// program, wait for it with a deadline, check whether a pid is gone, free
// ports, temporary directories; the job secret and the programs they start.
#pragma once

#include "child_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace agent_test {

using child_process::free_port;
using child_process::wait_listening;

using Clock = std::chrono::steady_clock;

// The job secret every driver gives its coordinator and ranks (ANTDT_SECRET).
inline const std::string kSecret = "00112233445566778899aabbccddeeff";

// The programs a driver starts: antdt-run, antdt-coordinator, the trainer.
struct Paths {
  std::string run, coordinator, trainer;
};

// Reaps `pid` if it has ended: true with its exit code (128 + signal for a
// signal), false while it runs. Never waits.
inline bool exited(pid_t pid, int* code) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return false;
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

inline std::string make_temp_dir(const char* tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / (std::string("antdt-") + tag + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::exit(2);
  }
  return pattern;
}

// Starts argv with the caller's environment minus ANTDT_* and launcher
// variables, plus `extra` ("NAME=value").
inline pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra) {
  return child_process::launch(argv, child_process::child_environment(extra));
}

struct Ended {
  bool exited = false;
  int code = -1;    // exit code, or 128 + signal
  double seconds = 0;
};

// Waits until `pid` ends or the deadline; kills it (SIGKILL) at the deadline: nullopt then.
inline std::optional<Ended> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  for (;;) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) {
      Ended e;
      e.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      e.exited = WIFEXITED(status);
      e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return e;
    }
    if (Clock::now() - start >= limit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// True when no live process has this pid (gone, or a zombie nobody reaped yet).
inline bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

inline bool wait_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    bool all = true;
    for (pid_t p : pids) all = all && gone(p);
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace agent_test
