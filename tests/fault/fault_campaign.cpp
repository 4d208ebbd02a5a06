// The fault campaign (issue 16 item 9; docs/testing.md "Fault campaign"):
// randomized faults against 4-rank Agent training under antdt-run with an
// external antdt-coordinator (SQLite database), one fault per run, each run
// bounded in time. After every run it checks, from the ranks' logs:
//   no hang          antdt-run and the coordinator end within their limits
//   truthful exits   antdt-run 0 and the coordinator 0 (the job completed)
//   exactly once     a bitmap of sample ids: each committed once (0 lost, 0 twice)
//   one model        every rank ends with the same replica (total.txt)
// and prints one table row per fault, then a summary; exit 1 on any failure.
//
// Usage: antdt_fault_campaign <antdt-run> <antdt-coordinator> <agent_trainer>
//          [--faults K] [--seed S] [--kinds a,b,...] [--max-stop-s T] [--dataset N] [--partial] [--keep-logs]
// --keep-logs: every run's logs stay (their directory in the row), not only a failed run's.
// --partial: the trainer's steps are partial AllReduces under defer, their
// arbiter in the coordinator (docs/partial.md#where-the-arbiter-runs), so the
// faults also land in partial steps: a killed rank is a straggler that never
// returns, a killed coordinator takes the arbiter with it (the steps in flight
// fail with PeerLostError and the job moves to a new generation).
// Fault kinds (all by default):
//   rank-kill         kill -9 of any rank, rank 0 too (antdt-run --restarts 1 starts it
//                     again; with the coordinator apart, rank 0 holds nothing the job needs)
//   rank-stop         SIGSTOP of any rank for 1..T s (default 10), then SIGCONT
//   coordinator-kill  kill -9 of antdt-coordinator, started again on its address and database
//   flood-coordinator 300 unauthenticated connections to the coordinator (idle, one byte
//                     per 200 ms, a partial frame head) held for 3 s
//   flood-root        the same against the bootstrap root while the job starts
#include "agent_driver_common.hpp"
#include "commit_log.hpp"

#include <fcntl.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>

using namespace agent_test;

namespace {

constexpr int kWorld = 4;

struct Settings {
  int faults = 10;
  std::uint64_t seed = 1;
  std::vector<std::string> kinds{"rank-kill", "rank-stop", "coordinator-kill", "flood-coordinator", "flood-root"};
  int max_stop_s = 10;
  std::uint64_t dataset = 12000;  // ~1.5 s of training: faults land mid-job
  bool partial = false;           // the trainer's steps are partial AllReduces (defer)
  bool keep_logs = false;         // keep every run's logs, not only a failed run's
};

// The pid of `rank` among antdt-run's children (read from /proc: children of
// every thread, ANTDT_RANK of each child's environment); -1 when not found.
pid_t rank_pid(pid_t launcher, int rank) {
  const std::string want = "ANTDT_RANK=" + std::to_string(rank);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(launcher) + "/task", ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) {
      std::ifstream environ_file("/proc/" + std::to_string(child) + "/environ");
      std::string entry;
      while (std::getline(environ_file, entry, '\0'))
        if (entry == want) return child;
    }
  }
  return -1;
}

// Connections that never authenticate: a third idle, a third trickling one
// byte every 200 ms, a third sending half of a frame head. For the bootstrap
// root, refused connections are tried again until the flood is complete (the
// root is not listening yet when the job starts).
class Flood {
 public:
  Flood(int port, int connections, std::chrono::milliseconds hold)
      : thread_([this, port, connections, hold] { run(port, connections, hold); }) {}
  ~Flood() {
    stop_ = true;
    thread_.join();
  }
  int opened() const { return opened_.load(); }

 private:
  static int connect_once(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return -1;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
  }

  void run(int port, int connections, std::chrono::milliseconds hold) {
    std::vector<int> fds;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    while (!stop_ && static_cast<int>(fds.size()) < connections && Clock::now() < give_up) {
      const int fd = connect_once(port);
      if (fd < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (fds.size() % 3 == 2) {
        const unsigned char half_head[3] = {0x41, 0x4e, 0x54};
        (void)::send(fd, half_head, sizeof half_head, MSG_NOSIGNAL);
      }
      fds.push_back(fd);
      opened_ = static_cast<int>(fds.size());
    }
    const auto until = Clock::now() + hold;
    while (!stop_ && Clock::now() < until) {
      for (std::size_t i = 1; i < fds.size(); i += 3) {
        const unsigned char byte = 0x5a;
        (void)::send(fds[i], &byte, 1, MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (const int fd : fds) ::close(fd);
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> opened_{0};
  std::thread thread_;
};

// Starts argv with its output appended to `log` (the table stays readable; a
// failed run keeps its logs). /bin/sh execs the program: the pid is its pid.
pid_t spawn_logged(std::vector<std::string> argv, const std::vector<std::string>& extra, const std::string& log) {
  argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" >>'" + log + "' 2>&1"});
  return spawn(argv, extra);
}

pid_t start_coordinator(const Paths& p, int port, std::uint64_t n, const std::string& db) {
  return spawn_logged({p.coordinator, "--listen", "127.0.0.1:" + std::to_string(port), "-n", std::to_string(kWorld),
                "--dataset-size", std::to_string(n), "--global-batch", "40", "--shard-size", "40", "--db", db,
                "--grace-s", "5"},
               // The coordinator must know a crashed rank comes back (antdt-run --restarts 1).
               {"ANTDT_SECRET=" + kSecret, "ANTDT_TIMEOUT_MS=30000", "ANTDT_MAX_RESTARTS=1"}, db + ".out");
}

pid_t start_job(const Paths& p, const Settings& s, int coordinator_port, int root_port, const std::string& dir) {
  std::vector<std::string> argv{p.run, "-n", std::to_string(kWorld), "--restarts", "1", "--root",
                                "127.0.0.1:" + std::to_string(root_port), "--", p.trainer, "train", "--out", dir,
                                "--dataset", std::to_string(s.dataset), "--global-batch", "40", "--shard-size", "40",
                                "--step-ms", "2"};
  std::vector<std::string> env{"ANTDT_TIMEOUT_MS=30000", "ANTDT_SECRET=" + kSecret,
                               "ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(coordinator_port)};
  if (s.partial) {
    argv.emplace_back("--partial");
    // A stopped rank catches up from the others' result caches (16-byte
    // results); one stopped longer than this many steps restarts to re-sync.
    env.emplace_back("ANTDT_RESULT_CACHE=1024");
    // The partial steps go on past a kill -9 on the same communicator: UCX's
    // shared memory would leave a peer's FIFO blocked by a rank killed in the
    // middle of a send (docs/configuration.md#dead-ranks).
    env.emplace_back("ANTDT_UCX_SHM=safe");
  }
  return spawn_logged(argv, env, dir + "/job.out");
}

struct Outcome {
  std::string kind, target, detail;
  double at_s = 0, job_s = 0;
  bool hang = false;
  int job_code = -1, coordinator_code = -1;
  std::uint64_t lost = 0, duplicated = 0;
  std::uint64_t unlogged = 0;  // committed by a rank killed before it logged it (commit_log.hpp)
  bool one_model = false;
  bool ok() const { return !hang && job_code == 0 && coordinator_code == 0 && lost == 0 && duplicated == 0 && one_model; }
};

Outcome run_one(const Paths& p, const Settings& s, const std::string& kind, std::mt19937_64& random) {
  Outcome o;
  o.kind = kind;
  const std::string dir = make_temp_dir("fault");
  const int coordinator_port = free_port(), root_port = free_port();
  pid_t coordinator = start_coordinator(p, coordinator_port, s.dataset, dir + "/coordinator.db");
  std::unique_ptr<Flood> flood;
  if (kind == "flood-root") {
    flood = std::make_unique<Flood>(root_port, 300, std::chrono::seconds(3));
    o.target = "root";
  }
  const auto start = Clock::now();
  const pid_t job = start_job(p, s, coordinator_port, root_port, dir);
  // The fault lands 20..700 ms into the job: during start-up (the first
  // communicator is made in the first ~0.4 s) or training.
  const auto at = start + std::chrono::milliseconds(20 + random() % 681);
  int job_code = -1;
  bool job_over = false;
  while (Clock::now() < at && !(job_over = exited(job, &job_code)))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  o.at_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (job_over) {
    o.detail = "the job ended before the fault";
  } else if (kind == "rank-kill" || kind == "rank-stop") {
    const int rank = static_cast<int>(random() % kWorld);
    o.target = "rank " + std::to_string(rank);
    pid_t pid = -1;
    for (int tries = 0; tries < 200 && (pid = rank_pid(job, rank)) < 0; ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // A kill may land at any moment, while the first communicator is made too
    // (a rank 0 killed then used to cost the others ANTDT_TIMEOUT_MS).
    if (pid < 0) {
      o.detail = "rank not found";
    } else if (kind == "rank-kill") {
      ::kill(pid, SIGKILL);
    } else {
      const int stop_s = 1 + static_cast<int>(random() % static_cast<unsigned>(s.max_stop_s));
      o.detail = "stopped " + std::to_string(stop_s) + " s";
      ::kill(pid, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::seconds(stop_s));
      ::kill(pid, SIGCONT);
    }
  } else if (kind == "coordinator-kill") {
    o.target = "coordinator";
    ::kill(coordinator, SIGKILL);
    ::waitpid(coordinator, nullptr, 0);
    coordinator = start_coordinator(p, coordinator_port, s.dataset, dir + "/coordinator.db");
  } else if (kind == "flood-coordinator") {
    o.target = "coordinator";
    flood = std::make_unique<Flood>(coordinator_port, 300, std::chrono::seconds(3));
  }
  std::optional<Ended> ended;
  if (job_over) ended = Ended{true, job_code, 0};
  else ended = wait_for(job, std::chrono::seconds(120));
  o.job_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (flood) {
    if (o.detail.empty()) o.detail = std::to_string(flood->opened()) + " connections";
    flood.reset();
  }
  const auto last = wait_for(coordinator, std::chrono::seconds(30));
  o.hang = !ended || !last;
  o.job_code = ended ? ended->code : -1;
  o.coordinator_code = last ? last->code : -1;
  const commit_log::CommitLog log = commit_log::read(dir, s.dataset);
  o.duplicated = log.duplicated();
  o.lost = log.lost();
  o.unlogged = log.unlogged();
  const auto total = read_lines(dir + "/total.txt");
  o.one_model = total.size() == 1 && total[0].ends_with(" 1");
  if (o.ok() && !s.keep_logs) std::filesystem::remove_all(dir);
  else o.detail += (o.detail.empty() ? "" : "; ") + std::string("logs in ") + dir;
  return o;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s <antdt-run> <antdt-coordinator> <agent_trainer> [--faults K] [--seed S] "
                 "[--kinds a,b] [--max-stop-s T] [--dataset N] [--partial] [--keep-logs]\n",
                 argv[0]);
    return 2;
  }
  const Paths paths{argv[1], argv[2], argv[3]};
  Settings s;
  const std::set<std::string> known(s.kinds.begin(), s.kinds.end());
  for (int i = 4; i < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--partial" || key == "--keep-logs") {  // flags: no value
      if (key == "--partial") s.partial = true;
      else s.keep_logs = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "antdt_fault_campaign: %s needs a value\n", key.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (key == "--faults") s.faults = std::stoi(value);
    else if (key == "--seed") s.seed = std::stoull(value);
    else if (key == "--kinds") s.kinds = split_list(value);
    else if (key == "--max-stop-s") s.max_stop_s = std::max(1, std::stoi(value));
    else if (key == "--dataset") s.dataset = std::stoull(value);
    else {
      std::fprintf(stderr, "antdt_fault_campaign: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  for (const auto& k : s.kinds)
    if (!known.count(k)) {
      std::fprintf(stderr, "antdt_fault_campaign: unknown fault kind '%s'\n", k.c_str());
      return 2;
    }
  if (s.kinds.empty() || s.faults < 1) {
    std::fprintf(stderr, "antdt_fault_campaign: nothing to do (--faults and --kinds)\n");
    return 2;
  }
  std::mt19937_64 random(s.seed);
  if (s.partial) std::printf("# trainer steps: partial AllReduce (defer), the arbiter in antdt-coordinator\n");
  std::printf("%-4s %-18s %-12s %6s %7s %5s %5s %5s %5s %6s %-5s %s\n", "run", "fault", "target", "at s", "job s",
              "exit", "coord", "lost", "twice", "doubt", "model", "outcome");
  std::map<std::string, std::pair<int, int>> by_kind;  // kind -> (ok, runs)
  int hangs = 0, not_ok = 0;
  std::uint64_t lost = 0, duplicated = 0;
  int divergent = 0;
  const auto campaign_start = Clock::now();
  std::vector<std::string> round;
  for (int run = 0; run < s.faults; ++run) {
    // Every kind once per round, in a shuffled order: K faults cover the kinds evenly.
    if (run % static_cast<int>(s.kinds.size()) == 0) {
      round = s.kinds;
      std::shuffle(round.begin(), round.end(), random);
    }
    const std::string kind = round[static_cast<std::size_t>(run) % round.size()];
    const Outcome o = run_one(paths, s, kind, random);
    std::printf("%-4d %-18s %-12s %6.2f %7.1f %5d %5d %5llu %5llu %6llu %-5s %s%s%s\n", run, o.kind.c_str(),
                o.target.c_str(), o.at_s, o.job_s, o.job_code, o.coordinator_code,
                static_cast<unsigned long long>(o.lost), static_cast<unsigned long long>(o.duplicated),
                static_cast<unsigned long long>(o.unlogged),
                o.one_model ? "same" : "DIFF", o.ok() ? "ok" : (o.hang ? "HANG" : "FAIL"),
                o.detail.empty() ? "" : "  ", o.detail.c_str());
    std::fflush(stdout);
    auto& k = by_kind[o.kind];
    ++k.second;
    k.first += o.ok() ? 1 : 0;
    hangs += o.hang ? 1 : 0;
    not_ok += o.ok() ? 0 : 1;
    lost += o.lost;
    duplicated += o.duplicated;
    divergent += o.one_model ? 0 : 1;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - campaign_start).count();
  std::printf("\n%d fault(s) in %.0f s: %d ok, %d hang(s), %llu sample(s) lost, %llu committed twice, %d run(s) "
              "with diverged replicas\n",
              s.faults, seconds, s.faults - not_ok, hangs, static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(duplicated), divergent);
  for (const auto& [kind, counts] : by_kind)
    std::printf("  %-18s %d/%d ok\n", kind.c_str(), counts.first, counts.second);
  std::printf("%s\n", not_ok == 0 ? "PASS" : "FAIL");
  return not_ok == 0 ? 0 : 1;
}
