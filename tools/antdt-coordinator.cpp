// antdt-coordinator: the job's coordinator as its own process (docs/scheduler.md,
// "Agent and coordinator"), for jobs that must survive the loss of rank 0 or
// restart rank 0. Ranks find it through ANTDT_COORDINATOR=host:port and prove
// ANTDT_SECRET. With ANTDT_COORDINATOR_CHECKPOINT (or --checkpoint) it saves the
// data-sharding state periodically and at exit, and restores it when started
// again, so it can itself be restarted while the ranks keep running (they
// reconnect within ANTDT_TIMEOUT_MS).
//
// With ANTDT_COORDINATOR_DB (or --db) every change of the data-sharding state is
// in an SQLite database before the request that made it is answered: a kill -9
// and a restart on the same database repeat and lose no commit (docs/dds.md).
//
// Exit codes (docs/scheduler.md): 0 the job completed (the data consumed and
// every rank said bye); 3 every rank said bye, or SIGINT/SIGTERM came, before
// the data was consumed; 4 no rank was connected for ANTDT_COORDINATOR_GRACE_S;
// 1 an error (configuration, the database could not be written); 2 usage.
#include <CLI/CLI.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/net.hpp"
#include "scheduler/coordinator/service.hpp"

#include <signal.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"antdt-coordinator: serves the data sharding, Monitor and Controller of an antdt job to its ranks' "
               "Agents (address ANTDT_COORDINATOR, secret ANTDT_SECRET)"};
  std::string listen;
  int world_size = 0;
  std::uint64_t dataset_size = 0;
  std::uint32_t epochs = 1;
  std::uint64_t global_batch = 0;
  std::uint64_t shard_size = 0;
  std::string policy;
  std::string checkpoint;
  double checkpoint_s = 0;
  std::string database;
  double grace_s = 0;
  app.add_option("--listen", listen, "host:port to listen on (default: ANTDT_COORDINATOR)");
  app.add_option("-n,--world-size", world_size, "ranks in the job (default: ANTDT_WORLD_SIZE)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--dataset-size", dataset_size, "samples to shard (0: no data sharding)");
  app.add_option("--epochs", epochs, "epochs to serve (0: no end)");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks (0: 32 per rank)");
  app.add_option("--shard-size", shard_size, "samples per shard (default: ANTDT_DDS_SHARD_SIZE)");
  app.add_option("--policy", policy, "scheduling policy (default: ANTDT_POLICY)");
  app.add_option("--checkpoint", checkpoint, "checkpoint file (default: ANTDT_COORDINATOR_CHECKPOINT)");
  app.add_option("--checkpoint-s", checkpoint_s, "seconds between checkpoints (default: ANTDT_COORDINATOR_CHECKPOINT_S)")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--db", database, "SQLite database of the data-sharding state (default: ANTDT_COORDINATOR_DB)");
  app.add_option("--grace-s", grace_s, "exit once no rank was connected this long (default: ANTDT_COORDINATOR_GRACE_S)")
      ->check(CLI::Range(0.001, 86400.0));
  CLI11_PARSE(app, argc, argv);

  try {
    const antdt::Config& cfg = antdt::config();
    if (listen.empty()) listen = cfg.coordinator;
    if (listen.empty()) {
      std::fprintf(stderr, "antdt-coordinator: give --listen host:port or ANTDT_COORDINATOR\n");
      return 2;
    }
    if (world_size == 0) world_size = cfg.world_size.value_or(0);
    if (world_size == 0) {
      std::fprintf(stderr, "antdt-coordinator: give -n or ANTDT_WORLD_SIZE\n");
      return 2;
    }
    if (cfg.secret.empty()) {
      std::fprintf(stderr, "antdt-coordinator: ANTDT_SECRET (32 hex digits, the job's secret) is required\n");
      return 2;
    }
    auto options = antdt::sched::coord::CoordinatorOptions::from(cfg, world_size, dataset_size, epochs, global_batch);
    if (shard_size > 0) options.dds.shard_size = shard_size;
    if (!policy.empty()) {
      options.policy = policy;
      options.policy_config = cfg.policy_config;
    }
    if (!checkpoint.empty()) options.checkpoint_path = checkpoint;
    if (checkpoint_s > 0)
      options.checkpoint_interval = std::chrono::milliseconds(static_cast<long long>(checkpoint_s * 1000 + 0.5));
    if (!database.empty()) options.database_path = database;
    if (grace_s > 0) options.grace = std::chrono::milliseconds(static_cast<long long>(grace_s * 1000 + 0.5));
    if (dataset_size > 0 && options.database_path.empty() && !options.checkpoint_path.empty())
      std::fprintf(stderr, "antdt-coordinator: note: without ANTDT_COORDINATOR_DB (--db) a kill -9 repeats every "
                           "commit made after the last checkpoint\n");

    // SIGINT / SIGTERM end the service through sigtimedwait below.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before the service thread starts: it inherits the mask

    const auto secret = antdt::sched::coord::job_secret(cfg);
    antdt::sched::coord::CoordinatorService service(options, antdt::net::parse_endpoint(listen), secret, cfg.timeout);
    std::printf("antdt-coordinator: listening on %s for %d ranks (dataset %llu samples, %u epoch(s))\n",
                service.address().to_string().c_str(), world_size, static_cast<unsigned long long>(dataset_size),
                epochs);
    std::fflush(stdout);

    int got_signal = 0;
    std::string why_stopped;
    while (!service.coordinator().all_exited()) {
      if (const std::string failure = service.failure(); !failure.empty()) {
        std::fprintf(stderr, "antdt-coordinator: stopped: the data sharding state could not be written: %s\n",
                     failure.c_str());
        return 1;
      }
      if (const auto gone = service.coordinator().all_gone_for(); gone && *gone >= options.grace) {
        why_stopped = antdt::cat("no rank was connected for ", options.grace.count() / 1000.0,
                                 " s (ANTDT_COORDINATOR_GRACE_S)");
        break;
      }
      timespec wait{0, 100 * 1000 * 1000};
      const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
      if (sig > 0) {
        got_signal = sig;
        break;
      }
    }
    service.stop();
    service.coordinator().sync();
    service.coordinator().maybe_checkpoint(true);
    // Gone for the grace period with all the data committed: the job ended
    // (its byes went to an earlier process of this coordinator, killed at the end).
    const bool complete = service.coordinator().job_complete() ||
                          (!why_stopped.empty() && service.coordinator().data_finished());
    const auto progress = service.coordinator().progress();
    const auto stats = service.coordinator().stats();
    std::printf("antdt-coordinator: %s; %llu samples committed, %llu epoch(s) completed, generation %llu, "
                "%llu rank(s) lost, %llu restart(s)\n",
                got_signal != 0 ? strsignal(got_signal) : !why_stopped.empty() ? why_stopped.c_str() : "every rank said bye",
                static_cast<unsigned long long>(progress.total_committed),
                static_cast<unsigned long long>(progress.epochs_completed),
                static_cast<unsigned long long>(stats.generation), static_cast<unsigned long long>(stats.ranks_lost),
                static_cast<unsigned long long>(stats.restarts_done));
    if (complete) return 0;
    if (!why_stopped.empty()) {
      std::fprintf(stderr, "antdt-coordinator: the job did not complete: %s; %llu rank(s) lost\n", why_stopped.c_str(),
                   static_cast<unsigned long long>(stats.ranks_lost));
      return 4;
    }
    std::fprintf(stderr, "antdt-coordinator: the job did not complete (%s before the data was consumed: epoch %u, %llu "
                         "of %llu samples of it committed)\n",
                 got_signal != 0 ? strsignal(got_signal) : "every rank said bye", progress.epoch,
                 static_cast<unsigned long long>(progress.committed),
                 static_cast<unsigned long long>(progress.epoch_samples));
    return 3;
  } catch (const antdt::Error& e) {
    std::fprintf(stderr, "antdt-coordinator: %s\n", e.what());
    return 1;
  }
}
