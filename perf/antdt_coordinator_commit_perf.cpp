// antdt_coordinator_commit_perf: the commit rate the coordinator sustains with
// its SQLite store (docs/dds.md "Durable state", docs/benchmarks.md
// "Coordinator commit rate").
//
// A CoordinatorService (the real one: poll loop, wire, group commit per round)
// with a database in --dir, and N clients (CoordinatorClient, one TCP
// connection each, one thread each) that do what an Agent does every step:
// fetch a batch (a lease: a durable change) and commit it (another). A reply is
// sent only once its round's transaction is durable, so each client has at
// most one request in flight and the rate is bounded by transactions/s times
// requests per transaction; the table shows both.
//
// Checks (exit 1 when broken): every commit was acknowledged ok, and the
// samples the Dds counts as committed equal the samples of the acknowledged
// commits.
#include "core/error.hpp"
#include "core/log.hpp"
#include "scheduler/coordinator/client.hpp"
#include "scheduler/coordinator/service.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace coord = antdt::sched::coord;

struct Options {
  std::string clients = "4,64,256";
  double seconds = 3.0;
  double warmup = 0.5;
  std::uint64_t batch = 32;
  std::string sync = "full";
  std::string dir = ".";
  bool keep = false;
};

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const int n = std::stoi(item);
    ANTDT_CHECK_ARG(n >= 1 && n <= 4096, "--clients: each count must be in [1, 4096], got ", n);
    out.push_back(n);
  }
  ANTDT_CHECK_ARG(!out.empty(), "--clients: name at least one client count");
  return out;
}

struct Result {
  std::uint64_t commits = 0, fetches = 0, transactions = 0;
  double seconds = 0, p50_ms = 0, p99_ms = 0;
  bool ok = true;
  std::string problem;
};

Result measure(const Options& o, int clients) {
  const std::array<std::byte, 16> secret{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  coord::CoordinatorOptions copts;
  copts.world_size = clients;
  copts.dataset_size = std::uint64_t{1} << 20;
  copts.dds.shard_size = 4 * o.batch;
  copts.dds.epochs = 0;  // no end: the clients stop by time
  copts.grace = std::chrono::hours(1);
  std::filesystem::path db;
  if (o.sync != "none") {
    db = std::filesystem::path(o.dir) / ("antdt-commit-perf-" + std::to_string(::getpid()) + ".db");
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
    copts.database_path = db.string();
  }
  ANTDT_CHECK_ARG(o.sync == "full" || o.sync == "none",
                  "--sync: full (the coordinator's setting) or none (no database), got '", o.sync, "'");

  Result r;
  {
    coord::CoordinatorService service(copts, antdt::net::Endpoint{"127.0.0.1", 0}, secret);
    std::atomic<bool> measuring{false}, stop{false};
    std::atomic<std::uint64_t> commits{0}, fetches{0}, committed_samples{0}, failures{0};
    std::mutex latency_mu;
    std::vector<double> latencies_ms;
    std::mutex problem_mu;
    std::string problem;
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (int rank = 0; rank < clients; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          coord::CoordinatorClient client(service.address(), secret, rank, clients, 0, 0, std::chrono::seconds(60));
          ready.fetch_add(1);
          std::vector<double> mine;
          while (!stop.load()) {
            const auto t0 = Clock::now();
            const coord::BatchReply batch = client.fetch(o.batch);
            if (batch.lease == 0) {
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
              continue;
            }
            const bool counted = measuring.load();
            if (counted) fetches.fetch_add(1);
            const bool ok = client.commit(batch.lease);
            if (!ok) failures.fetch_add(1);
            committed_samples.fetch_add(batch.samples.size());
            if (counted) {
              commits.fetch_add(1);
              mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            }
          }
          client.bye(false);
          std::lock_guard lock(latency_mu);
          latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
        } catch (const std::exception& e) {
          failures.fetch_add(1);
          std::lock_guard lock(problem_mu);
          problem = e.what();
          ready.fetch_add(1);
        }
      });
    }
    while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::duration<double>(o.warmup));
    const auto tx0 = service.coordinator().stats().database_writes;
    const auto t0 = Clock::now();
    measuring.store(true);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
    measuring.store(false);
    const auto t1 = Clock::now();
    const auto tx1 = service.coordinator().stats().database_writes;
    stop.store(true);
    for (auto& t : threads) t.join();

    r.commits = commits.load();
    r.fetches = fetches.load();
    r.transactions = tx1 - tx0;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    std::sort(latencies_ms.begin(), latencies_ms.end());
    if (!latencies_ms.empty()) {
      r.p50_ms = latencies_ms[latencies_ms.size() / 2];
      r.p99_ms = latencies_ms[std::min(latencies_ms.size() - 1, latencies_ms.size() * 99 / 100)];
    }
    const auto progress = service.coordinator().progress();
    if (failures.load() > 0) {
      r.ok = false;
      r.problem = antdt::cat(failures.load(), " commit(s) refused or client(s) failed", problem.empty() ? "" : ": ",
                             problem);
    } else if (progress.total_committed != committed_samples.load()) {
      r.ok = false;
      r.problem = antdt::cat("the Dds counts ", progress.total_committed, " committed samples, the clients had ",
                             committed_samples.load(), " acknowledged");
    } else if (r.commits == 0) {
      r.ok = false;
      r.problem = "no commit in the measured interval";
    }
  }
  if (!db.empty() && !o.keep)
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"antdt_coordinator_commit_perf: commits/s through the coordinator wire with its SQLite store"};
  app.add_option("-c,--clients", o.clients, "comma-separated client (rank) counts, one run each");
  app.add_option("-t,--seconds", o.seconds, "measured seconds per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "seconds before measuring")->check(CLI::NonNegativeNumber);
  app.add_option("-b,--batch", o.batch, "samples per fetch")->check(CLI::PositiveNumber);
  app.add_option("--sync", o.sync, "full: SQLite WAL, synchronous=FULL (the coordinator's); none: no database");
  app.add_option("-d,--dir", o.dir, "directory of the database (its file system's fsync is measured)");
  app.add_flag("--keep", o.keep, "keep the database files");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto counts = parse_list(o.clients);
    std::printf("# coordinator commit rate: fetch + commit per client loop, %s, database in %s\n",
                o.sync == "none" ? "no database" : "SQLite WAL synchronous=FULL", o.dir.c_str());
    std::printf("# %7s %9s %10s %11s %9s %14s %11s %8s %8s\n", "clients", "commits", "commits/s", "requests/s",
                "txn/s", "commits/txn", "reqs/txn", "p50_ms", "p99_ms");
    bool all_ok = true;
    for (int clients : counts) {
      const Result r = measure(o, clients);
      const double txn = static_cast<double>(std::max<std::uint64_t>(r.transactions, 1));
      std::printf("  %7d %9llu %10.0f %11.0f %9.0f %14.2f %11.2f %8.3f %8.3f\n", clients,
                  static_cast<unsigned long long>(r.commits), r.commits / r.seconds,
                  (r.commits + r.fetches) / r.seconds, r.transactions / r.seconds,
                  o.sync == "none" ? 0.0 : r.commits / txn, o.sync == "none" ? 0.0 : (r.commits + r.fetches) / txn,
                  r.p50_ms, r.p99_ms);
      std::fflush(stdout);
      if (!r.ok) {
        std::fprintf(stderr, "antdt_coordinator_commit_perf: %d clients: %s\n", clients, r.problem.c_str());
        all_ok = false;
      }
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt_coordinator_commit_perf: %s\n", e.what());
    return 2;
  }
}
