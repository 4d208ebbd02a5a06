// Every ANTDT_* environment variable is parsed and validated here, and only
// here. A bad value raises ConfigError naming the variable, the value and the
// accepted values. docs/configuration.md documents each one.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace antdt {

struct InjectSpec;  // core/inject.hpp

enum class LogLevel { error = 0, warn = 1, info = 2, trace = 3 };
enum class ProgressMode { automatic, spin, wake };  // ANTDT_PROGRESS
enum class BindMode { automatic, none, cores, numa };  // ANTDT_BIND
enum class AllreduceAlgo { automatic, ring, recursive_doubling, shm, hierarchical, rabenseifner };  // ANTDT_ALGO (docs/collectives.md)
enum class GpuPath { automatic, ipc, staged, direct };  // ANTDT_GPU_PATH (docs/gpu.md)
// Where the partial collectives' arbiter runs (ANTDT_PARTIAL_ARBITER, docs/partial.md#where-the-arbiter-runs).
enum class PartialArbiter { automatic, rank0, coordinator };
// Whether UCX's shared-memory transports carry messages between ranks of a
// node (ANTDT_UCX_SHM, docs/configuration.md#dead-ranks): fast, or safe from
// a rank killed in the middle of a send (TCP loopback).
enum class UcxShm { fast, safe };

struct Config {
  LogLevel log_level = LogLevel::warn;                       // ANTDT_DEBUG=ERROR|WARN|INFO|TRACE
  std::chrono::milliseconds timeout{60000};                  // ANTDT_TIMEOUT_MS, 1..86400000
  std::string transport = "ucx";                             // ANTDT_TRANSPORT=ucx|inproc
  AllreduceAlgo allreduce_algo = AllreduceAlgo::automatic;   // ANTDT_ALGO=auto|ring|recursive_doubling|shm|hierarchical|rabenseifner
  std::string node_id;                                       // ANTDT_NODE_ID: this rank's node (empty: host name + boot id)
  std::size_t shm_max_bytes = 4u << 10;                      // ANTDT_SHM_MAX_BYTES, 0..1M: node-local shared-memory AllReduce up to this size (0: off)
  std::size_t shm_bulk_bytes = 512u << 10;                   // ANTDT_SHM_BULK_BYTES, 0 or 4K..64M: block of the node-local shared-memory AllReduce above ANTDT_SHM_MAX_BYTES (0: off)
  std::size_t chunk_bytes = 256u << 10;                      // ANTDT_CHUNK_BYTES, 4K..1G, K/M/G suffixes
  ProgressMode progress = ProgressMode::automatic;           // ANTDT_PROGRESS=auto|spin|wake
  std::chrono::microseconds spin_before_sleep{50};           // ANTDT_SPIN_US, 0..1000000
  BindMode bind = BindMode::automatic;                       // ANTDT_BIND=auto|none|cores|numa
  bool progress_thread = true;                               // ANTDT_ASYNC_PROGRESS=thread|caller: who runs non-blocking collectives
  std::size_t ucx_split_bytes = 64u << 10;                   // ANTDT_UCX_SPLIT_BYTES, 0..1G: payloads this large go as a contiguous UCX message of their own (0: never)
  UcxShm ucx_shm = UcxShm::fast;                             // ANTDT_UCX_SHM=fast|safe

  // Job membership (bootstrap). Unset optionals mean "not given".
  std::optional<int> rank;                                   // ANTDT_RANK
  std::optional<int> world_size;                             // ANTDT_WORLD_SIZE
  std::optional<int> local_rank;                             // ANTDT_LOCAL_RANK
  std::optional<int> local_size;                             // ANTDT_LOCAL_SIZE
  std::string root;                                          // ANTDT_ROOT=host:port
  std::string secret;                                        // ANTDT_SECRET (32 hex digits)
  std::string bootstrap_dir = "/tmp";                        // ANTDT_BOOTSTRAP_DIR

  // Monitor (collectives/telemetry/monitor.hpp, docs/monitor.md), traces and straggler injection.
  std::size_t monitor_window = 64;                           // ANTDT_MONITOR_WINDOW, 4..65536 steps
  double monitor_alpha = 0.3;                                // ANTDT_MONITOR_ALPHA, (0, 1]
  double monitor_theta = 1.5;                                // ANTDT_MONITOR_THETA, (1, 100]
  int monitor_short_steps = 10;                              // ANTDT_MONITOR_SHORT_STEPS, 1..100000
  double monitor_grace_margin = 2.0;                         // ANTDT_MONITOR_GRACE_MARGIN, [1, 100]
  std::string trace_dir;                                     // ANTDT_TRACE_DIR (empty: no trace)
  int trace_flush_steps = 100;                               // ANTDT_TRACE_FLUSH_STEPS, 1..1000000
  std::shared_ptr<const InjectSpec> inject;                  // ANTDT_INJECT (null: nothing injected)
  bool nvtx = false;                                         // ANTDT_NVTX=0|1 (NVTX ranges; CUDA builds only)
  GpuPath gpu_path = GpuPath::automatic;                     // ANTDT_GPU_PATH=auto|ipc|staged|direct (device buffers)

  // Partial collectives (docs/partial.md).
  double partial_quorum = 0.5;          // ANTDT_PARTIAL_QUORUM, (0, 1]: on-time ranks needed before a step may close
  double partial_grace_ms = 0;          // ANTDT_PARTIAL_GRACE_MS, [0, 600000]: 0 = from the Monitor
  std::size_t result_cache = 4;         // ANTDT_RESULT_CACHE, 2..1024 results kept for late ranks
  int partial_warmup = 5;               // ANTDT_PARTIAL_WARMUP, 0..100000 steps run as BSP while the Monitor learns
  // ANTDT_PARTIAL_ARBITER=auto|rank0|coordinator: auto = the external coordinator's (ANTDT_COORDINATOR without
  // ANTDT_COORDINATOR_EMBEDDED=1) when there is one, else communicator rank 0.
  PartialArbiter partial_arbiter = PartialArbiter::automatic;
  // The arbiter is the external antdt-coordinator's (resolves `automatic`).
  bool external_arbiter() const noexcept;
  // The 16 bytes of ANTDT_SECRET; ConfigError saying `who` needs it when it is unset.
  std::array<std::byte, 16> secret_bytes(std::string_view who) const;

  // Push-pull (parameter-server mode, docs/collectives.md#push-pull).
  std::size_t ps_partition_bytes = 4u << 20;  // ANTDT_PS_PARTITION_BYTES, 4K..1G, K/M/G suffixes: tensor partition size

  // Stateful dynamic data sharding (scheduler/dds.hpp, docs/dds.md).
  std::size_t dds_shard_size = 1024;    // ANTDT_DDS_SHARD_SIZE, 1..1073741824 samples per shard
  long long dds_seed = 0;               // ANTDT_DDS_SEED, 0..9223372036854775807: the shuffle seed
  std::string dds_shuffle = "samples";  // ANTDT_DDS_SHUFFLE=samples|blocks|none

  // Scheduler policy (scheduler/controller.hpp, docs/scheduler.md).
  std::string policy = "bsp";           // ANTDT_POLICY=bsp|antdt-dd|antdt-nd|<registered name>
  std::string policy_config = "{}";     // ANTDT_POLICY_CONFIG: a JSON object, or @path of a file holding one

  // Agent and coordinator (scheduler/coordinator/service.hpp, docs/scheduler.md).
  std::string coordinator;              // ANTDT_COORDINATOR=host:port (empty: rank 0 hosts one on any port)
  bool coordinator_embedded = false;    // ANTDT_COORDINATOR_EMBEDDED=0|1: rank 0 hosts it at ANTDT_COORDINATOR
  std::string coordinator_checkpoint;   // ANTDT_COORDINATOR_CHECKPOINT: Dds checkpoint file (empty: none)
  std::chrono::milliseconds coordinator_checkpoint_interval{10000};  // ANTDT_COORDINATOR_CHECKPOINT_S, (0, 86400]
  std::string coordinator_db;           // ANTDT_COORDINATOR_DB: the Dds state in SQLite, durable per commit (empty: none)
  std::chrono::milliseconds coordinator_grace{120000};  // ANTDT_COORDINATOR_GRACE_S: antdt-coordinator exits once every rank is gone this long
  int incarnation = 0;                  // ANTDT_INCARNATION, 0..2147483647: restarts of this rank so far
  int restart_exit_code = 75;           // ANTDT_RESTART_EXIT_CODE, 1..255: the exit code asking for a restart
  int max_restarts = 0;                 // ANTDT_MAX_RESTARTS, 0..1000000: restarts the launcher grants each rank (antdt-run --restarts)
  bool agent_prefetch = true;           // ANTDT_AGENT_PREFETCH=0|1: a plan request leases the step's samples too
  bool agent_report_with_next = true;   // ANTDT_AGENT_REPORT_WITH_NEXT=0|1: a step's report goes with the next request

  // Reads the variables through `lookup` (the process environment by default).
  using Lookup = std::function<std::optional<std::string>(std::string_view name)>;
  static Config from_env(const Lookup& lookup);
  static Config from_process_env();

  // name=value lines for ANTDT_DEBUG=INFO start-up output.
  std::vector<std::string> describe() const;
};

// The process-wide configuration, parsed on first use (throws ConfigError).
const Config& config();
// Tests: re-read the environment after setenv().
void reload_config();

// Reads a launcher's environment (Open MPI, PMIx, PMI, Slurm) when ANTDT_* is absent.
struct LauncherRanks {
  int rank = -1, size = -1, local_rank = -1, local_size = -1;
  std::string job_id;  // unique per job, to name the bootstrap file
  std::string source;  // which launcher's variables were read
};
std::optional<LauncherRanks> launcher_ranks(const Config::Lookup& lookup);

}  // namespace antdt
