// antdt-run: starts the ranks of a job on this machine (docs/scheduler.md,
// "Agent and coordinator").
//
//   antdt-run -n N [--restarts K] [--min-ranks M] [--restart-code C] [--grace S] [--root host:port] -- prog args...
//
// Each rank gets ANTDT_RANK, ANTDT_WORLD_SIZE, ANTDT_LOCAL_RANK, ANTDT_LOCAL_SIZE,
// ANTDT_ROOT (a free loopback port unless --root), ANTDT_SECRET (the caller's,
// else a fresh random one), ANTDT_INCARNATION (0, then 1, 2, ... for restarts),
// ANTDT_MAX_RESTARTS (K, so that the coordinator knows whether a crashed rank
// comes back) and ANTDT_COORDINATOR: the caller's (an external
// antdt-coordinator), else a free loopback port at which rank 0's Agent hosts
// the embedded coordinator (ANTDT_COORDINATOR_EMBEDDED=1), so that a restarted
// rank can find it. Each rank also gets torchrun's env:// variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = the host of
// ANTDT_ROOT, MASTER_PORT = another free port), except those the caller set.
//
// A rank that ends other than with exit code 0 (the restart code
// ANTDT_RESTART_EXIT_CODE, default 75, another non-zero code, or a signal) is
// started again, at most K times per rank. A rank that fails with no restarts
// left is lost for good: the others go on without it (Agent training
// continues with the survivors) as long as at least M ranks (default 1) are
// not lost; below that the job stops. Rank 0 hosting the embedded coordinator
// is never restarted: the coordinator's state went with it, so its failure
// stops the job. Stopping: the other ranks get SIGTERM, then SIGKILL after
// the grace period, and antdt-run exits with the first failure's code (128 +
// signal for a signal). A job that lost ranks for good exits 0 when every
// other rank exited 0 (they finished the job without them; the lost ranks are
// listed on stderr), else with the first failure's code. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded
// to every rank the same way. Every rank runs in its own process group (so the
// whole group, helpers it forked included, is signalled) and dies with
// antdt-run (PR_SET_PDEATHSIG), so nothing is left behind.
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDefaultRestartCode = 75;  // EX_TEMPFAIL: "try again"

template <class... Args>
void say(const char* format, Args... args) {
  std::fprintf(stderr, "antdt-run: ");
  std::fprintf(stderr, format, args...);
  std::fputc('\n', stderr);
}

// A loopback port nothing listens on right now (the kernel's choice for an ephemeral bind).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// A free loopback port other than those in `taken`. The job's ports are all
// probed before any rank binds one, so the kernel may hand the same port out
// twice; -1 with errno set if 8 probes found none.
int free_port_except(const std::vector<int>& taken) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int port = free_port();
    if (port < 0) return -1;
    if (std::find(taken.begin(), taken.end(), port) == taken.end()) return port;
  }
  errno = EADDRINUSE;  // every probe gave a port the job already uses
  return -1;
}

// The port of a host:port address (-1 if it has none that parses).
int port_of(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    return std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

std::optional<std::string> random_secret() {
  unsigned char raw[16];
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) return std::nullopt;
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex.push_back(digits[b >> 4]);
    hex.push_back(digits[b & 15]);
  }
  return hex;
}

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// The caller's environment without the variables that name a rank (ours or a
// launcher's: an antdt-run started under mpirun must not leak mpirun's rank).
std::vector<std::string> inherited_environment() {
  static constexpr std::string_view dropped[] = {
      "ANTDT_RANK=", "ANTDT_WORLD_SIZE=", "ANTDT_LOCAL_RANK=", "ANTDT_LOCAL_SIZE=", "ANTDT_ROOT=",
      "ANTDT_SECRET=", "ANTDT_INCARNATION=", "ANTDT_COORDINATOR=", "ANTDT_COORDINATOR_EMBEDDED=",
      "ANTDT_MAX_RESTARTS=",
      "OMPI_", "PMIX_", "PMI_", "SLURM_"};
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    bool drop = false;
    for (auto prefix : dropped) drop = drop || text.starts_with(prefix);
    if (!drop) out.emplace_back(text);
  }
  return out;
}

struct Rank {
  pid_t pid = -1;          // -1 when not running
  int incarnation = 0;
  int restarts = 0;
  bool finished = false;   // exited 0
  bool lost = false;       // failed with no restarts left
};

class Launcher {
 public:
  Launcher(std::vector<std::string> command, int world_size, int restarts, int min_ranks, int restart_code,
           double grace_s, bool embedded_coordinator, std::vector<std::string> job_env)
      : command_(std::move(command)), ranks_(static_cast<std::size_t>(world_size)), max_restarts_(restarts),
        min_ranks_(min_ranks), restart_code_(restart_code),
        grace_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s))),
        embedded_coordinator_(embedded_coordinator), job_env_(std::move(job_env)),
        torch_rank_(!env("RANK")), torch_local_rank_(!env("LOCAL_RANK")) {}

  int run() {
    sigset_t mask;
    sigemptyset(&mask);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&mask, s);
    if (::sigprocmask(SIG_BLOCK, &mask, &old_mask_) != 0) {
      say("sigprocmask failed: %s", std::strerror(errno));
      return 1;
    }
    signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC);
    if (signal_fd_ < 0) {
      say("signalfd failed: %s", std::strerror(errno));
      return 1;
    }
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
      if (!start(r)) {
        stop_all(SIGTERM, 127);
        break;
      }
    }
    while (running() > 0) wait_event();
    if (stopping_) kill_groups(SIGKILL);  // helpers a rank forked and left behind
    ::close(signal_fd_);
    if (!stopping_ && first_failure_) {
      std::string lost;
      for (int r = 0; r < static_cast<int>(ranks_.size()); ++r)
        if (ranks_[static_cast<std::size_t>(r)].lost) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
      say("the other ranks finished without rank(s) %s, lost for good", lost.c_str());
    }
    return exit_code_;
  }

 private:
  int running() const {
    int n = 0;
    for (const auto& r : ranks_) n += r.pid > 0 ? 1 : 0;
    return n;
  }

  bool start(int rank) {
    Rank& slot = ranks_[static_cast<std::size_t>(rank)];
    std::vector<std::string> env_strings = job_env_;
    env_strings.push_back("ANTDT_RANK=" + std::to_string(rank));
    env_strings.push_back("ANTDT_LOCAL_RANK=" + std::to_string(rank));
    env_strings.push_back("ANTDT_INCARNATION=" + std::to_string(slot.incarnation));
    if (torch_rank_) env_strings.push_back("RANK=" + std::to_string(rank));
    if (torch_local_rank_) env_strings.push_back("LOCAL_RANK=" + std::to_string(rank));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (auto& s : command_) argv.push_back(s.data());
    argv.push_back(nullptr);

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      say("fork failed for rank %d: %s", rank, std::strerror(errno));
      return false;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // antdt-run died before the line above
      ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      ::execvpe(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "antdt-run: rank %d: cannot run %s: %s\n", rank, argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that the group exists before any signal is sent to it
    slot.pid = pid;
    return true;
  }

  void wait_event() {
    int timeout_ms = -1;
    if (kill_at_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, left));
    }
    pollfd p{signal_fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc < 0 && errno != EINTR) {
      say("poll failed: %s; killing the ranks", std::strerror(errno));
      stop_all(SIGKILL, 1);
    }
    if (rc > 0) {
      signalfd_siginfo info{};
      if (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD)
          reap();
        else
          on_signal(sig);
      }
    }
    if (kill_at_ && Clock::now() >= *kill_at_ && running() > 0) {
      say("%d rank(s) still running %.1f s after SIGTERM: sending SIGKILL", running(),
          std::chrono::duration<double>(grace_).count());
      kill_groups(SIGKILL);
      kill_at_.reset();
    }
  }

  void on_signal(int sig) {
    if (stopping_) {
      // A second signal: the user does not want to wait for the grace period.
      say("%s again: killing the ranks", strsignal(sig));
      kill_groups(SIGKILL);
      kill_at_.reset();
      return;
    }
    say("%s: forwarding it to the ranks", strsignal(sig));
    stop_all(sig, 128 + sig);
  }

  // Reaps every child that ended (SIGCHLD coalesces).
  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
        Rank& slot = ranks_[static_cast<std::size_t>(r)];
        if (slot.pid != pid) continue;
        slot.pid = -1;
        ended_groups_.push_back(pid);
        on_exit(r, status);
        break;
      }
    }
  }

  void on_exit(int rank, int status) {
    Rank& slot = ranks_[static_cast<std::size_t>(rank)];
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      slot.finished = true;
      return;
    }
    if (stopping_) return;  // an effect of the stop, not its cause
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const bool asked = WIFEXITED(status) && code == restart_code_;
    const std::string what = asked ? "exited with the restart code " + std::to_string(code)
                             : WIFEXITED(status) ? "exited with code " + std::to_string(code)
                                                 : "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    if (rank == 0 && embedded_coordinator_ && !asked) {
      // Its coordinator (the job's data state) went with it: nothing to rejoin.
      say("rank 0 %s: it hosted the embedded coordinator, so the job cannot go on; stopping the other ranks",
          what.c_str());
      stop_all(SIGTERM, code);
      return;
    }
    if (slot.restarts < max_restarts_) {
      ++slot.restarts;
      ++slot.incarnation;
      say("rank %d %s: starting it again (incarnation %d, restart %d of %d)", rank, what.c_str(), slot.incarnation,
          slot.restarts, max_restarts_);
      if (!start(rank)) stop_all(SIGTERM, 127);
      return;
    }
    slot.lost = true;
    if (!first_failure_) first_failure_ = code;
    int left = 0;
    for (const auto& r : ranks_) left += r.lost ? 0 : 1;
    if (left < min_ranks_) {
      say("rank %d %s with no restarts left (--restarts %d): %d rank(s) left, fewer than --min-ranks %d; stopping "
          "the other ranks",
          rank, what.c_str(), max_restarts_, left, min_ranks_);
      stop_all(SIGTERM, *first_failure_);
      return;
    }
    say("rank %d %s with no restarts left (--restarts %d): it is lost for good; the other %d rank(s) go on", rank,
        what.c_str(), max_restarts_, left);
  }

  void stop_all(int sig, int exit_code) {
    if (!stopping_) exit_code_ = exit_code;
    stopping_ = true;
    kill_groups(sig);
    kill_at_ = Clock::now() + grace_;
  }

  // Signals every rank's process group, and the groups of ranks that already
  // ended (helpers they forked may still live there; ESRCH when empty).
  void kill_groups(int sig) {
    for (const auto& slot : ranks_)
      if (slot.pid > 0) ::kill(-slot.pid, sig);
    for (pid_t group : ended_groups_) ::kill(-group, sig);
  }

  std::vector<std::string> command_;
  std::vector<Rank> ranks_;
  int max_restarts_;
  int min_ranks_;
  int restart_code_;
  Clock::duration grace_;
  bool embedded_coordinator_;
  std::optional<int> first_failure_;  // the code of the first rank lost for good
  std::vector<std::string> job_env_;
  bool torch_rank_, torch_local_rank_;  // set RANK / LOCAL_RANK per rank (the caller did not set them)
  sigset_t old_mask_{};
  int signal_fd_ = -1;
  bool stopping_ = false;
  int exit_code_ = 0;
  std::optional<Clock::time_point> kill_at_;
  std::vector<pid_t> ended_groups_;  // process groups of ranks that ended (one per start)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"antdt-run: starts N ranks of an antdt job on this machine, restarts ranks that fail (up to "
               "--restarts times each), goes on without a rank that has no restarts left while --min-ranks remain, "
               "and stops every rank otherwise"};
  int world_size = 0;
  int restarts = 0;
  int min_ranks = 1;
  std::optional<int> restart_code_option;
  double grace_s = 10;
  std::string root;
  std::vector<std::string> command;
  app.add_option("-n,--np", world_size, "number of ranks")->required()->check(CLI::Range(1, 4096));
  app.add_option("--restarts", restarts,
                 "times each rank may be started again after it failed (the restart code, another non-zero exit "
                 "or a signal)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--min-ranks", min_ranks,
                 "stop the job once fewer ranks than this are left (ranks that failed with no restarts left are "
                 "lost for good); default 1")
      ->check(CLI::Range(1, 4096));
  app.add_option("--restart-code", restart_code_option,
                 "exit code that asks for a restart (default: ANTDT_RESTART_EXIT_CODE, else 75)")
      ->check(CLI::Range(1, 255));
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when the job stops")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--root", root, "host:port of rank 0's bootstrap listener (default: a free loopback port)");
  app.add_option("command", command, "the program and its arguments (after --)")->required();
  CLI11_PARSE(app, argc, argv);
  if (min_ranks > world_size) {
    say("--min-ranks %d is above the number of ranks %d", min_ranks, world_size);
    return 2;
  }

  int restart_code = kDefaultRestartCode;
  if (restart_code_option) {
    restart_code = *restart_code_option;
  } else if (auto text = env("ANTDT_RESTART_EXIT_CODE")) {
    char* end = nullptr;
    const long value = std::strtol(text->c_str(), &end, 10);
    if (end == text->c_str() || *end != '\0' || value < 1 || value > 255) {
      say("ANTDT_RESTART_EXIT_CODE='%s' is invalid: expected an integer in [1, 255]", text->c_str());
      return 2;
    }
    restart_code = static_cast<int>(value);
  }

  std::vector<std::string> job_env = inherited_environment();
  std::vector<int> job_ports;  // the loopback ports this launch hands out, each once
  if (root.empty()) {
    const int port = free_port_except(job_ports);
    if (port < 0) {
      say("cannot find a free port for ANTDT_ROOT: %s", std::strerror(errno));
      return 1;
    }
    root = "127.0.0.1:" + std::to_string(port);
  }
  job_ports.push_back(port_of(root));
  auto secret = env("ANTDT_SECRET");
  if (!secret) secret = random_secret();
  if (!secret) {
    say("cannot make a job secret: getrandom failed: %s", std::strerror(errno));
    return 1;
  }
  const bool embedded = !env("ANTDT_COORDINATOR");
  if (auto external = env("ANTDT_COORDINATOR")) {
    job_env.push_back("ANTDT_COORDINATOR=" + *external);
  } else {
    const int port = free_port_except(job_ports);
    if (port < 0) {
      say("cannot find a free port for the coordinator: %s", std::strerror(errno));
      return 1;
    }
    job_env.push_back("ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(port));
    job_env.push_back("ANTDT_COORDINATOR_EMBEDDED=1");
    job_ports.push_back(port);
  }
  job_env.push_back("ANTDT_WORLD_SIZE=" + std::to_string(world_size));
  job_env.push_back("ANTDT_LOCAL_SIZE=" + std::to_string(world_size));
  job_env.push_back("ANTDT_ROOT=" + root);
  job_env.push_back("ANTDT_SECRET=" + *secret);
  job_env.push_back("ANTDT_RESTART_EXIT_CODE=" + std::to_string(restart_code));
  job_env.push_back("ANTDT_MAX_RESTARTS=" + std::to_string(restarts));
  // torchrun's env:// variables, for torch.distributed (docs/torch.md); the caller's own win.
  if (!env("WORLD_SIZE")) job_env.push_back("WORLD_SIZE=" + std::to_string(world_size));
  if (!env("LOCAL_WORLD_SIZE")) job_env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world_size));
  if (!env("MASTER_ADDR")) {
    std::string host = root.substr(0, root.rfind(':'));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    job_env.push_back("MASTER_ADDR=" + host);
  }
  if (!env("MASTER_PORT")) {
    // Not ANTDT_ROOT's or the coordinator's port: rank 0 listens on all of
    // them (antdt's bootstrap, the embedded coordinator, torch's TCPStore).
    const int port = free_port_except(job_ports);
    if (port < 0) {
      say("cannot find a free port for MASTER_PORT: %s", std::strerror(errno));
      return 1;
    }
    job_env.push_back("MASTER_PORT=" + std::to_string(port));
  }

  Launcher launcher(std::move(command), world_size, restarts, min_ranks, restart_code, grace_s, embedded,
                    std::move(job_env));
  return launcher.run();
}
