// kill -9 of antdt-coordinator during a 4-rank Agent job (docs/dds.md,
// "Durable state"): the coordinator keeps the data-sharding state in SQLite
// (--db) and is killed at random moments and started again on the same
// address and database; the ranks ride through (they reconnect). Checked from
// the ranks' logs with a bitmap of sample ids: every sample committed exactly
// once (0 duplicated, 0 lost), the replicas equal, antdt-run and the last
// coordinator exit 0.
//
// Usage: antdt_coordinator_kill_driver <antdt-run> <antdt-coordinator> <agent_trainer> <scenario> [options]
//   kills  [--kills K] [--seed S] [--dataset N]   K kills -9 (default 4) at random moments
//   gone   every rank is killed (kill -9 of antdt-run, whose ranks die with it): the
//          coordinator exits by itself, non-zero, once ANTDT_COORDINATOR_GRACE_S is over
#include "agent_driver_common.hpp"
#include "commit_log.hpp"

#include <random>

using namespace agent_test;

namespace {

constexpr int kWorld = 4;

pid_t start_coordinator(const Paths& p, int port, std::uint64_t n, const std::string& db, double grace_s) {
  const pid_t pid =
      spawn({p.coordinator, "--listen", "127.0.0.1:" + std::to_string(port), "-n", std::to_string(kWorld),
             "--dataset-size", std::to_string(n), "--global-batch", "40", "--shard-size", "40", "--db", db,
             "--grace-s", std::to_string(grace_s)},
            {"ANTDT_SECRET=" + kSecret, "ANTDT_TIMEOUT_MS=30000"});
  wait_listening(port);  // before antdt-run probes ports of its own
  return pid;
}

pid_t start_job(const Paths& p, int port, std::uint64_t n, const std::string& dir) {
  return spawn({p.run, "-n", std::to_string(kWorld), "--", p.trainer, "train", "--out", dir, "--dataset",
                std::to_string(n), "--global-batch", "40", "--shard-size", "40", "--step-ms", "2"},
               {"ANTDT_TIMEOUT_MS=30000", "ANTDT_SECRET=" + kSecret, "ANTDT_COORDINATOR=127.0.0.1:" + std::to_string(port)});
}

void kills(const Paths& p, int wanted, std::uint64_t seed, std::uint64_t n) {
  const std::string dir = make_temp_dir("coordinator-kill");
  const std::string db = dir + "/coordinator.db";
  const int port = free_port();
  std::mt19937_64 random(seed);
  pid_t coordinator = start_coordinator(p, port, n, db, 60);
  const pid_t job = start_job(p, port, n, dir);
  int done = 0, job_code = -1;
  bool job_over = false;
  const auto start = Clock::now();
  while (done < wanted && !job_over) {
    // A random moment: 50..400 ms after the (re)start, so that some kills land
    // before the ranks are back and most while commits are in flight.
    const auto wait = std::chrono::milliseconds(50 + random() % 351);
    const auto until = Clock::now() + wait;
    while (Clock::now() < until && !(job_over = exited(job, &job_code)))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (job_over) break;
    ::kill(coordinator, SIGKILL);
    ::waitpid(coordinator, nullptr, 0);
    ++done;
    coordinator = start_coordinator(p, port, n, db, 60);
  }
  const double killing_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::optional<Ended> ended;
  if (!job_over) ended = wait_for(job, std::chrono::seconds(150));
  else ended = Ended{true, job_code, 0};
  check(done == wanted, "killed the coordinator " + std::to_string(done) + " of " + std::to_string(wanted) +
                            " times before the job ended (a larger --dataset gives room for more)");
  check(ended && ended->code == 0, "antdt-run finished with exit code 0" +
                                       (ended ? " (got " + std::to_string(ended->code) + ")" : std::string(" (killed)")));
  // A kill just before the job's end leaves the last coordinator with no rank to
  // come back: it exits 0 (its database says the job completed) after the grace
  // period, 60 s, so wait longer than that.
  const auto last = wait_for(coordinator, std::chrono::seconds(90));
  check(last && last->code == 0, "the last antdt-coordinator exited 0 (the job completed)" +
                                     (last ? " (got " + std::to_string(last->code) + ")" : std::string(" (killed)")));
  const commit_log::CommitLog c = commit_log::read(dir, n);
  const std::uint64_t duplicated = c.duplicated(), lost = c.lost();
  std::printf("kills %d in %.1f s, dataset %llu: %llu committed batches, duplicated %llu, lost %llu, "
              "voided (trained again) %llu samples\n",
              done, killing_s, static_cast<unsigned long long>(n), static_cast<unsigned long long>(c.batches),
              static_cast<unsigned long long>(duplicated), static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(c.voided));
  check(duplicated == 0, "no sample committed twice (" + std::to_string(duplicated) + " were)");
  check(lost == 0, "no sample left uncommitted (" + std::to_string(lost) + " were)");
  const auto total = read_lines(dir + "/total.txt");
  check(total.size() == 1 && total[0].ends_with(" 1"), "every rank ends with the same model");
  // As after a kill at the job's very end: a coordinator started again on the
  // finished job's database sees no rank come back (their byes went to the
  // process before); the data is all committed, so it exits 0 after the grace.
  const pid_t after_end = start_coordinator(p, port, n, db, 1);
  const auto ended_again = wait_for(after_end, std::chrono::seconds(30));
  check(ended_again && ended_again->code == 0,
        "a coordinator started again on the finished job's database exits 0 after the grace period" +
            (ended_again ? " (got " + std::to_string(ended_again->code) + ")" : std::string(" (killed)")));
  if (failures == 0) std::filesystem::remove_all(dir);
  else std::printf("logs kept in %s\n", dir.c_str());
}

void gone(const Paths& p) {
  const std::string dir = make_temp_dir("coordinator-gone");
  const std::uint64_t n = 200000;  // far more than the job gets through before it is killed
  const int port = free_port();
  const double grace_s = 1.0;
  const pid_t coordinator = start_coordinator(p, port, n, dir + "/coordinator.db", grace_s);
  const pid_t job = start_job(p, port, n, dir);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && commit_log::read(dir, n).batches < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(job, SIGKILL);  // its ranks die with it (PR_SET_PDEATHSIG): none says bye
  ::waitpid(job, nullptr, 0);
  const auto killed = Clock::now();
  const auto ended = wait_for(coordinator, std::chrono::seconds(30));
  const double after = std::chrono::duration<double>(Clock::now() - killed).count();
  check(ended.has_value(), "antdt-coordinator exited by itself once every rank was gone");
  check(ended && ended->code == 4, "its exit code says the job did not complete (4; got " +
                                       (ended ? std::to_string(ended->code) : std::string("none")) + ")");
  check(ended && after >= grace_s && after < grace_s + 10,
        "it waited the grace period first (" + std::to_string(after) + " s after the kill, grace " +
            std::to_string(grace_s) + " s)");
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <antdt-run> <antdt-coordinator> <agent_trainer> kills|gone [--kills K] [--seed S] "
                 "[--dataset N]\n", argv[0]);
    return 2;
  }
  const Paths paths{argv[1], argv[2], argv[3]};
  const std::string scenario = argv[4];
  int wanted = 4;
  std::uint64_t seed = 1, dataset = 0;
  for (int i = 5; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--kills") wanted = std::stoi(argv[i + 1]);
    else if (key == "--seed") seed = std::stoull(argv[i + 1]);
    else if (key == "--dataset") dataset = std::stoull(argv[i + 1]);
  }
  // Room for every kill: each waits up to 400 ms plus the ranks' return. 1 200
  // samples a kill left a 4-kill job ending after 0.9 s on a fast machine,
  // before its last kill in about half the runs (2026-12-06).
  if (dataset == 0) dataset = 2000 + 4000 * static_cast<std::uint64_t>(wanted);
  if (scenario == "kills")
    kills(paths, wanted, seed, dataset);
  else if (scenario == "gone")
    gone(paths);
  else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
