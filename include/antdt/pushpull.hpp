// AntDT comm — push-pull (parameter-server mode), C++ API. See docs/collectives.md#push-pull
// and docs/pushpull.md (device buffers).
//
// A PushPull serves a table of keys over a Communicator. Each key is one
// tensor (count elements of one dtype), the table identical on every rank.
// The tensors are cut into partitions of at most ANTDT_PS_PARTITION_BYTES and
// the partitions are spread by range over the server ranks: dedicated servers
// (ranks that only serve), or every rank serving a shard (the default).
//
// push(key, data, weight) adds weight * data into the servers' aggregate of
// the key; pull(key, out) returns the aggregate (its sum, or the weighted
// average sum(w_i * g_i) / sum(w_i)). A round is: every worker pushes, then
// pulls; the first push after a pull starts a new round (the aggregate starts
// from zero), pushes before the pull add up.
//
// push and pull are collective over the communicator: every rank calls them
// for the same keys in the same order, servers included (a dedicated server
// passes no data: its calls are where it serves). Messages go through the
// communicator's checked calls: a rank whose table differs fails the
// constructor with MismatchError on every rank, and every wait is bounded by
// ANTDT_TIMEOUT_MS.
//
// Device buffers (docs/pushpull.md#device-buffers): data, out and result may
// be device memory (cudaMalloc), as in the collectives. Such a call is
// ordered after the work already enqueued on a CUDA stream (the legacy
// default stream, or the one named by the overloads taking `void* stream`)
// and makes that stream wait for its result (as NCCL does): synchronise the
// stream before reading a pulled result on the host. The data moves through
// pinned host memory; the servers' aggregates stay in host memory. Each rank
// and each call may place its buffers as it likes (device push, host pull;
// one rank on device memory, another on host memory). With host buffers and
// a non-null stream, the stream's work is waited for first.
#pragma once

#include <antdt/comm.hpp>
#include <antdt/export.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace antdt {

// One tensor of the table.
struct PushPullKey {
  std::uint64_t key = 0;
  std::size_t count = 0;  // elements (0 allowed: pushes and pulls move nothing)
  DataType dtype = DataType::f32;
};

struct PushPullOptions {
  // Dedicated servers: these ranks only serve (they push no data and get no
  // results); the others are the workers. Empty: every rank is a worker and
  // serves a shard.
  std::vector<int> servers;
  // Partition size in bytes (at least 4096); 0: ANTDT_PS_PARTITION_BYTES (default 4 MiB).
  std::size_t partition_bytes = 0;
};

// Where one partition of a key lives (for tests, tools and docs).
struct PushPullPartition {
  std::uint64_t key = 0;
  std::size_t first = 0;  // first element of the key in this partition
  std::size_t count = 0;  // elements
  int server = -1;        // the rank that aggregates it
};

namespace detail { class PushPullState; }

class ANTDT_API PushPull {
 public:
  // Collective: every rank passes the same keys (any order; keys unique) and
  // the same options. The communicator must outlive this object.
  PushPull(Communicator& comm, std::span<const PushPullKey> keys, const PushPullOptions& opts = {});
  ~PushPull();
  PushPull(PushPull&&) noexcept;
  PushPull& operator=(PushPull&&) noexcept;
  PushPull(const PushPull&) = delete;
  PushPull& operator=(const PushPull&) = delete;

  bool is_worker() const noexcept;
  bool is_server() const noexcept;
  int workers() const noexcept;
  std::vector<int> servers() const;
  // The key's partitions in element order (empty for a count-0 key).
  std::vector<PushPullPartition> partitions(std::uint64_t key) const;

  // Adds weight * data (the key's count elements) into the aggregate. Floating
  // dtypes take any finite weight >= 0; integer dtypes an integral one (sums
  // wrap, two's complement). On a dedicated server `data` is ignored.
  void push(std::uint64_t key, const void* data, double weight = 1.0);
  // out (the key's count elements) gets the aggregate: op sum, or avg
  // (floating dtypes; zeros when nothing was pushed this round). f16/bf16 are
  // aggregated in f32 and rounded once. Every rank passes the same op. On a
  // dedicated server `out` is ignored.
  void pull(std::uint64_t key, void* out, ReduceOp op = ReduceOp::sum);

  // Non-blocking variants: queued and run in issue order with the
  // communicator's other non-blocking collectives (see Request).
  Request ipush(std::uint64_t key, const void* data, double weight = 1.0);
  Request ipull(std::uint64_t key, void* out, ReduceOp op = ReduceOp::sum);

  // Partial push (docs/partial.md#partial-push): push and pull in one round
  // that the partial-collective arbiter closes without waiting for laggards
  // (opts.policy drop/defer; wait is the plain round). The round's partitions
  // are aggregated by its contributors (the ranks that arrived in time), so
  // it needs every rank to be a worker (no dedicated servers). `result` gets
  // the next result in this rank's order: sum or avg of weight * data over the
  // included contributions; the returned PartialResult says what happened to
  // this call's contribution. End a run with Communicator::partial_finish().
  PartialResult partial_push(std::uint64_t key, const void* data, void* result, ReduceOp op = ReduceOp::avg,
                             const PartialOptions& opts = {});

  // The same calls on a named CUDA stream (a cudaStream_t; nullptr: the
  // legacy default stream), for device buffers (see the top of this file).
  // Host waits are bounded by ANTDT_TIMEOUT_MS. A queued ipush/ipull is
  // ordered after the stream's work as of when it runs.
  void push(std::uint64_t key, const void* data, double weight, void* stream);
  void pull(std::uint64_t key, void* out, ReduceOp op, void* stream);
  Request ipush(std::uint64_t key, const void* data, double weight, void* stream);
  Request ipull(std::uint64_t key, void* out, ReduceOp op, void* stream);
  PartialResult partial_push(std::uint64_t key, const void* data, void* result, ReduceOp op,
                             const PartialOptions& opts, void* stream);

 private:
  std::shared_ptr<detail::PushPullState> state_;  // shared with queued non-blocking calls
};

}  // namespace antdt
