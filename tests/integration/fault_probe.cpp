// One rank of a failure scenario. Each process decides alone whether it saw
// what the scenario requires, and exits 0 only then (so under mpirun the test
// passes only when every rank does):
//
//   mismatch  rank 1 calls allreduce with one more element than the others;
//             every rank must get MismatchError (or RemoteAbortError naming the
//             mismatch), not a timeout, not a result.
//   timeout   rank 1 joins but never calls the collective (it sleeps past
//             ANTDT_TIMEOUT_MS, then exits 0); the other ranks must get
//             TimeoutError within the bound given by --max-seconds (default 10).
//   shm-kill  every rank runs shared-memory AllReduces of --bytes bytes (8: the
//             mailbox; 1 MiB: the bulk area) until one fails, and after 200 of
//             them creates <--ready-dir>/ready.<rank>. The driver
//             (shm_kill_driver.cpp) then kills rank --victim with SIGKILL; a
//             survivor exits 0 only when its error is a PeerLostError that
//             names the dead rank. (The driver also runs it over UCX alone,
//             shared memory off, the same way.)
//   join      join the job (from_env) and pass a barrier; prints the outcome and
//             exits 0 when joined, or 10 + the antdt status code of the error
//             (the wrong-secret driver reads this).
#include <antdt/comm.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using antdt::Communicator;
using antdt::DataType;
using antdt::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr int kJoinErrorBase = 10;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

long env_long(const char* name, long fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return (end != nullptr && *end == '\0') ? parsed : fallback;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

void say(int rank, const std::string& text) {
  std::printf("fault_probe: rank %d: %s\n", rank, text.c_str());
  std::fflush(stdout);
}

std::string error_text(const antdt::Error& e) {
  return std::string(antdt::status_name(e.status())) + ": " + e.what();
}

int scenario_mismatch(Communicator& comm) {
  const int rank = comm.rank();
  if (comm.size() < 2) {
    say(rank, "FAIL: the mismatch scenario needs at least 2 ranks");
    return 1;
  }
  std::vector<float> send(9, 1.0f), recv(9, 0.0f);
  // A matching call first: the communicator works, so the failure below is the mismatch.
  comm.allreduce(send.data(), recv.data(), 8, DataType::f32, ReduceOp::sum);
  if (recv[0] != static_cast<float>(comm.size())) {
    say(rank, "FAIL: the matching allreduce gave " + std::to_string(recv[0]));
    return 1;
  }
  const std::size_t count = rank == 1 ? 9 : 8;
  const auto start = Clock::now();
  try {
    comm.allreduce(send.data(), recv.data(), count, DataType::f32, ReduceOp::sum);
    say(rank, "FAIL: allreduce with count " + std::to_string(count) + " on this rank and a different count on " +
                  "another completed without an error");
    return 1;
  } catch (const antdt::MismatchError& e) {
    say(rank, "ok: MismatchError after " + std::to_string(seconds_since(start)) + " s: " + e.what());
    return 0;
  } catch (const antdt::RemoteAbortError& e) {
    if (lowercase(e.what()).find("mismatch") != std::string::npos) {
      say(rank, "ok: RemoteAbortError naming the mismatch after " + std::to_string(seconds_since(start)) +
                    " s: " + e.what());
      return 0;
    }
    say(rank, "FAIL: RemoteAbortError that does not mention the mismatch: " + std::string(e.what()));
    return 1;
  } catch (const antdt::Error& e) {
    say(rank, "FAIL: expected MismatchError, got " + error_text(e));
    return 1;
  }
}

int scenario_timeout(Communicator& comm, double max_seconds) {
  const int rank = comm.rank();
  if (comm.size() < 2) {
    say(rank, "FAIL: the timeout scenario needs at least 2 ranks");
    return 1;
  }
  const long timeout_ms = env_long("ANTDT_TIMEOUT_MS", 60000);
  if (rank == 1) {
    // Joined, but never calls the collective; outlives the others' timeout.
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms + 3000));
    say(rank, "ok: slept through the collective");
    return 0;
  }
  std::vector<double> data(4, 1.0);
  const auto start = Clock::now();
  try {
    comm.allreduce(data.data(), data.data(), data.size(), DataType::f64, ReduceOp::sum);
    say(rank, "FAIL: allreduce completed although rank 1 never called it");
    return 1;
  } catch (const antdt::TimeoutError& e) {
    const double elapsed = seconds_since(start);
    if (elapsed > max_seconds) {
      say(rank, "FAIL: TimeoutError only after " + std::to_string(elapsed) + " s (bound " +
                    std::to_string(max_seconds) + " s): " + e.what());
      return 1;
    }
    say(rank, "ok: TimeoutError after " + std::to_string(elapsed) + " s (ANTDT_TIMEOUT_MS=" +
                  std::to_string(timeout_ms) + "): " + e.what());
    return 0;
  } catch (const antdt::RemoteAbortError& e) {
    // A rank other than 0 may hear first from a rank that already timed out.
    if (rank != 0 && seconds_since(start) <= max_seconds) {
      say(rank, "ok: RemoteAbortError from a rank that timed out: " + std::string(e.what()));
      return 0;
    }
    say(rank, "FAIL: expected TimeoutError, got " + error_text(e));
    return 1;
  } catch (const antdt::Error& e) {
    say(rank, "FAIL: expected TimeoutError, got " + error_text(e));
    return 1;
  }
}

struct KillOptions {
  std::size_t bytes = 8;
  int victim = 2;
  std::string ready_dir;
};

int scenario_shm_kill(Communicator& comm, const KillOptions& o) {
  const int rank = comm.rank();
  std::vector<float> data(std::max<std::size_t>(1, o.bytes / sizeof(float)), 1.0f);
  const std::string dead = "rank " + std::to_string(o.victim);
  std::uint64_t calls = 0;
  try {
    for (;; ++calls) {
      comm.allreduce(data.data(), data.data(), data.size(), DataType::f32, ReduceOp::max);
      if (calls == 200 && !o.ready_dir.empty()) {
        const std::string path = o.ready_dir + "/ready." + std::to_string(rank);
        if (std::FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
      }
    }
  } catch (const antdt::Error& e) {
    const bool typed = e.status() == antdt::Status::peer_lost && dynamic_cast<const antdt::PeerLostError*>(&e);
    const bool named = std::string(e.what()).find(dead) != std::string::npos;
    say(rank, std::string(typed && named ? "ok" : "FAIL") + ": after " + std::to_string(calls) + " calls: " +
                  error_text(e));
    return typed && named ? 0 : 1;
  }
}

int scenario_join() {
  const int rank = static_cast<int>(env_long("ANTDT_RANK", -1));
  const auto start = Clock::now();
  try {
    Communicator comm = Communicator::from_env();
    comm.barrier();
    say(rank, "joined a communicator of " + std::to_string(comm.size()) + " ranks after " +
                  std::to_string(seconds_since(start)) + " s");
    return 0;
  } catch (const antdt::Error& e) {
    say(rank, "error after " + std::to_string(seconds_since(start)) + " s: " + error_text(e));
    return kJoinErrorBase + static_cast<int>(e.status());
  }
}

int usage() {
  std::fprintf(stderr, "usage: antdt_fault_probe mismatch | timeout [--max-seconds S] | join |\n"
               "       shm-kill [--bytes B] [--victim R] [--ready-dir D]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view scenario = argv[1];
  if (scenario == "join") return scenario_join();
  double max_seconds = 10.0;
  KillOptions kill;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--max-seconds") == 0 && i + 1 < argc)
      max_seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
      kill.bytes = static_cast<std::size_t>(std::atol(argv[++i]));
    else if (std::strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
      kill.victim = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--ready-dir") == 0 && i + 1 < argc)
      kill.ready_dir = argv[++i];
    else
      return usage();
  }
  if (scenario != "mismatch" && scenario != "timeout" && scenario != "shm-kill") return usage();

  std::optional<Communicator> comm;
  try {
    comm.emplace(Communicator::from_env());
    if (scenario == "shm-kill") return scenario_shm_kill(*comm, kill);
    return scenario == "mismatch" ? scenario_mismatch(*comm) : scenario_timeout(*comm, max_seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_probe: rank %d: unexpected error: %s\n", comm ? comm->rank() : -1, e.what());
    return 1;
  }
}
