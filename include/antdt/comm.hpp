// AntDT comm — C++ API.
//
// A Communicator is a group of `size()` ranks that call collectives in the same
// order (NCCL semantics). Every collective call gets a sequence number; a rank
// whose call differs from its peers' (count, dtype, op, root) makes every rank
// fail with antdt::MismatchError instead of corrupting data or hanging. Every
// blocking wait is bounded by ANTDT_TIMEOUT_MS (antdt::TimeoutError).
//
// Errors are reported as exceptions derived from antdt::Error; each carries a
// Status (the same codes as the C API in comm.h) and a message naming the cause.
#pragma once

#include <antdt/comm.h>
#include <antdt/export.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace antdt {

// ---------------------------------------------------------------------------
// Status and errors
// ---------------------------------------------------------------------------
enum class Status : int {
  ok = ANTDT_OK,
  invalid_argument = ANTDT_ERR_INVALID_ARGUMENT,
  config = ANTDT_ERR_CONFIG,
  bootstrap = ANTDT_ERR_BOOTSTRAP,
  transport = ANTDT_ERR_TRANSPORT,
  timeout = ANTDT_ERR_TIMEOUT,
  mismatch = ANTDT_ERR_MISMATCH,
  remote_abort = ANTDT_ERR_REMOTE_ABORT,
  aborted = ANTDT_ERR_ABORTED,
  unsupported = ANTDT_ERR_UNSUPPORTED,
  internal = ANTDT_ERR_INTERNAL,
  resync = ANTDT_ERR_RESYNC,
  peer_lost = ANTDT_ERR_PEER_LOST,
};

ANTDT_API const char* status_name(Status s) noexcept;

class ANTDT_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

#define ANTDT_DECLARE_ERROR(Name, code)                                           \
  class ANTDT_API Name : public Error {                                           \
   public:                                                                        \
    explicit Name(const std::string& what) : Error(Status::code, what) {}         \
  }
ANTDT_DECLARE_ERROR(InvalidArgument, invalid_argument);
ANTDT_DECLARE_ERROR(ConfigError, config);
ANTDT_DECLARE_ERROR(BootstrapError, bootstrap);
ANTDT_DECLARE_ERROR(TransportError, transport);
ANTDT_DECLARE_ERROR(TimeoutError, timeout);
ANTDT_DECLARE_ERROR(MismatchError, mismatch);
ANTDT_DECLARE_ERROR(RemoteAbortError, remote_abort);
ANTDT_DECLARE_ERROR(AbortedError, aborted);
ANTDT_DECLARE_ERROR(UnsupportedError, unsupported);
ANTDT_DECLARE_ERROR(InternalError, internal);
ANTDT_DECLARE_ERROR(ResyncError, resync);
// A peer rank is gone (its process died, or UCX or its connection reported it
// failed): the message names its rank, host and pid. Raised on every survivor.
ANTDT_DECLARE_ERROR(PeerLostError, peer_lost);
#undef ANTDT_DECLARE_ERROR

// ---------------------------------------------------------------------------
// Data types and reduction operations
// ---------------------------------------------------------------------------
enum class DataType : std::uint8_t {
  f32 = ANTDT_F32, f64 = ANTDT_F64, f16 = ANTDT_F16, bf16 = ANTDT_BF16,
  i8 = ANTDT_I8, u8 = ANTDT_U8, i32 = ANTDT_I32, u32 = ANTDT_U32,
  i64 = ANTDT_I64, u64 = ANTDT_U64,
};
enum class ReduceOp : std::uint8_t {
  sum = ANTDT_SUM, prod = ANTDT_PROD, min = ANTDT_MIN, max = ANTDT_MAX, avg = ANTDT_AVG,
};

ANTDT_API std::size_t dtype_size(DataType t);
ANTDT_API std::string_view dtype_name(DataType t) noexcept;
ANTDT_API std::string_view op_name(ReduceOp op) noexcept;

template <class T> constexpr DataType dtype_of();
template <> constexpr DataType dtype_of<float>() { return DataType::f32; }
template <> constexpr DataType dtype_of<double>() { return DataType::f64; }
template <> constexpr DataType dtype_of<std::int8_t>() { return DataType::i8; }
template <> constexpr DataType dtype_of<std::uint8_t>() { return DataType::u8; }
template <> constexpr DataType dtype_of<std::int32_t>() { return DataType::i32; }
template <> constexpr DataType dtype_of<std::uint32_t>() { return DataType::u32; }
template <> constexpr DataType dtype_of<std::int64_t>() { return DataType::i64; }
template <> constexpr DataType dtype_of<std::uint64_t>() { return DataType::u64; }

// ---------------------------------------------------------------------------
// Bootstrap identity
// ---------------------------------------------------------------------------
// 128 opaque bytes, like ncclUniqueId: the root's address and port plus a
// random 128-bit job secret. Rank 0 makes one (UniqueId::create) and hands it
// to the others out of band; ranks that cannot prove the secret are refused.
struct UniqueId {
  std::array<std::byte, ANTDT_UNIQUE_ID_BYTES> bytes{};
  ANTDT_API static UniqueId create();                      // binds a listener address for rank 0
  ANTDT_API std::string to_string() const;                 // hex, for env vars and files
  ANTDT_API static UniqueId from_string(std::string_view hex);
};

// ---------------------------------------------------------------------------
// Partial collectives: skipping laggards (docs/partial.md)
// ---------------------------------------------------------------------------
// What happens to a contribution that arrives after its step closed.
enum class LatePolicy : std::uint8_t {
  wait = 0,   // never late: every step waits for every rank (BSP, equal to a plain allreduce)
  drop = 1,   // discarded and reported (the data loader puts the samples back)
  defer = 2,  // added into the next open step, if no more than `staleness` steps late; else dropped
};

struct PartialOptions {
  LatePolicy policy = LatePolicy::wait;
  double weight = 1.0;            // this contribution's weight (its sample count); 0 = contribute nothing
  std::uint32_t staleness = 1;    // defer: how many steps late a contribution may still be included
  std::uint64_t samples = 0;      // samples behind this contribution (for the Monitor's throughput)
  // defer, for callers whose late ranks compute every step instead of catching
  // up with weight-0 calls (the NCCL shim): a step does not close while closing
  // it would leave a rank more than `staleness` steps behind (stale-synchronous;
  // docs/partial.md#stale-synchronous-defer), so no contribution is dropped and
  // no ResyncError can occur. Must be the same on every rank.
  bool stale_synchronous = false;
};

// The fate of the contribution passed in one call.
enum class Fate : std::uint8_t {
  included = 0,  // in the result of its own step
  deferred = 1,  // in the result of a later step (contribution_step)
  dropped = 2,   // in no result (too late); the caller should give the samples back
  none = 3,      // nothing was contributed (weight 0)
};

struct PartialResult {
  std::uint64_t step = 0;               // the step whose result is in recv (results come in order 1, 2, ...)
  Fate fate = Fate::none;
  std::uint64_t contribution_step = 0;  // included/deferred: the step whose result holds the contribution
  int participants = 0;                 // contributors to `step`'s result
  double total_weight = 0;              // their total weight
  std::uint64_t steps_behind = 0;       // results still to fetch: call again with weight 0 to get them
  // Ranks the arbiter knew were gone when it decided `step` (straggler_class() says which: lost).
  // Their contributions since are in no result: a data loader serves their samples again.
  int lost_ranks = 0;
};

// lost: the rank's process is gone (docs/partial.md#dead-ranks); the steps go on without it.
enum class StragglerClass : std::uint8_t { healthy = 0, leader = 1, deterministic = 2, transient = 3, persistent = 4, lost = 5 };
ANTDT_API std::string_view straggler_class_name(StragglerClass c) noexcept;

namespace detail { class CommImpl; }

struct CommOptions {
  // Transport: "ucx" (default) or "inproc" (ranks as threads of one process).
  std::string transport = "ucx";
};

// ---------------------------------------------------------------------------
// Collective suite: non-blocking requests (docs/collectives.md#requests)
// ---------------------------------------------------------------------------
namespace detail { class RequestState; }

// A non-blocking operation started by one of Communicator's i* methods. Its
// buffers must stay valid, and unread/unwritten by the caller, until it completed.
//
// A non-blocking collective is queued and runs in issue order. With
// ANTDT_ASYNC_PROGRESS=thread (the default) the communicator's progress thread
// runs it while the caller computes; test() only reports, wait() sleeps until
// it ran; blocking collectives, group_end(), partial collectives, push-pull
// and destruction first wait for everything queued before them. With
// ANTDT_ASYNC_PROGRESS=caller it runs when it or a later request is waited for
// or tested, or when the communicator's next blocking collective or
// group_end() runs. isend/irecv post their transfer at once; it completes
// while the peer takes part. A failure in the background fails the
// communicator: the request's wait()/test() and the next blocking call throw it.
// Every blocking wait is bounded by ANTDT_TIMEOUT_MS (TimeoutError).
class ANTDT_API Request {
 public:
  Request() noexcept;  // an empty request: complete, nothing to wait for
  explicit Request(std::shared_ptr<detail::RequestState> state) noexcept;
  // Destroying a request that has not completed: a collective still runs in
  // order (every rank expects it); a transfer is cancelled.
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;

  // True once the operation completed. Never blocks for a transfer, nor for a
  // collective with the progress thread; in caller mode a queued collective is
  // run to completion first (see above). Throws the operation's error.
  bool test();
  // Returns once the operation completed; throws its error (every time it is asked).
  void wait();
  // Withdraws a transfer that has not completed: true when it was withdrawn
  // (the pair's later transfers are then out of step: the next one between
  // them reports MismatchError). Collectives cannot be withdrawn (every rank
  // expects them): false, and the collective still runs.
  bool cancel();
  bool cancelled() const noexcept;

 private:
  std::shared_ptr<detail::RequestState> state_;
};

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------
class ANTDT_API Communicator {
 public:
  // Joins the job described by the environment: ANTDT_RANK / ANTDT_WORLD_SIZE /
  // ANTDT_ROOT (+ ANTDT_SECRET), or the variables set by mpirun (Open MPI / PMIx / PMI).
  static Communicator from_env();
  // Joins the job identified by `id` (made by UniqueId::create on one rank).
  static Communicator create(const UniqueId& id, int rank, int size, const CommOptions& opts = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  int rank() const noexcept;
  int size() const noexcept;
  std::string_view transport_name() const noexcept;

  // AllReduce of `count` elements. In place when send == recv.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
  // Broadcast `count` elements from `root`'s send buffer into every rank's recv buffer.
  void broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root);
  void barrier();

  // One training step's gradient exchange that does not wait for laggards
  // (unless policy is wait). Every call returns the next result in order;
  // see PartialResult and docs/partial.md. For avg the result is
  // sum(w_i * g_i) / sum(w_i) over the included contributions.
  PartialResult partial_allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                  const PartialOptions& opts = {});
  // Ends a run of partial steps: returns once every rank has called it, with
  // steps_behind = results this rank must still fetch (weight-0 calls, served locally).
  PartialResult partial_finish();
  // The class the Monitor gave `rank` at the last closed step (healthy before any).
  StragglerClass straggler_class(int rank) const;

  // Step timing for the Monitor (docs/monitor.md). Mark each training step and,
  // optionally, its compute part; without compute marks, compute is the step
  // minus the time spent in collectives. `stream` (a cudaStream_t) times the
  // compute with CUDA events instead of the CPU clock. With ANTDT_TRACE_DIR set,
  // every step is written to a JSON-lines trace and a Chrome trace.
  void begin_step();
  void begin_compute(void* stream = nullptr);
  void end_compute(void* stream = nullptr);
  void end_step(std::uint64_t samples);

  // -------------------------------------------------------------------------
  // Collective suite (docs/collectives.md). Host memory; counts from 0.
  // -------------------------------------------------------------------------
  // send holds size() blocks of recv_count elements; recv gets block rank()
  // reduced over all ranks. In place when recv == send + rank() * recv_count.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op);
  // recv gets every rank's send_count elements, in rank order. In place when
  // send == recv + rank() * send_count.
  void allgather(const void* send, void* recv, std::size_t send_count, DataType dtype);
  // Rank b contributes counts[b] elements (counts: one per rank, the same on every
  // rank), placed at element displs[b] of recv; empty displs packs the blocks in
  // rank order. In place when send == recv + displs[rank()].
  void allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                  std::span<const std::size_t> displs, DataType dtype);
  // root's recv gets the reduction (recv is ignored elsewhere). In place at root when send == recv.
  void reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root);
  // Block j (count elements) of send goes to block rank() of rank j's recv. In place when send == recv.
  void alltoall(const void* send, void* recv, std::size_t count, DataType dtype);
  // Point-to-point with another rank: the n-th send to a peer matches the peer's
  // n-th recv from this rank, with the same count and dtype (else MismatchError).
  // Blocking send returns once the peer received (it may wait for the peer's recv:
  // exchange in a group, or with isend/irecv).
  void send(const void* buf, std::size_t count, DataType dtype, int peer);
  void recv(void* buf, std::size_t count, DataType dtype, int peer);
  // Group calls: the collectives and send/recv issued until the matching
  // group_end() only record themselves; group_end() runs them, every allreduce
  // of one (dtype, op) fused into one pass. Groups nest. See docs/collectives.md#group-calls.
  void group_start();
  void group_end();

  // Non-blocking variants (see Request). Not allowed inside a group, except isend/irecv.
  Request iallreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
  Request ibroadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root);
  Request ibarrier();
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op);
  Request iallgather(const void* send, void* recv, std::size_t send_count, DataType dtype);
  Request iallgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType dtype);
  Request ireduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root);
  Request ialltoall(const void* send, void* recv, std::size_t count, DataType dtype);
  Request isend(const void* buf, std::size_t count, DataType dtype, int peer);
  Request irecv(void* buf, std::size_t count, DataType dtype, int peer);

  template <class T>
  void send(std::span<const T> buf, int peer) {
    send(buf.data(), buf.size(), dtype_of<std::remove_cv_t<T>>(), peer);
  }
  template <class T>
  void recv(std::span<T> buf, int peer) {
    recv(buf.data(), buf.size(), dtype_of<T>(), peer);
  }
  // ---- end of the collective suite ----

  // -------------------------------------------------------------------------
  // Device buffers (docs/gpu.md). Every collective above also accepts device
  // memory (cudaMalloc) for its buffers; such a call is ordered after the
  // work already enqueued on a CUDA stream and makes that stream wait for its
  // result (as NCCL does), so the caller synchronises the stream before it
  // reads the result on the host. Without a stream argument that is the
  // legacy default stream. These overloads name the stream (a cudaStream_t;
  // nullptr: the legacy default stream). With host buffers and a non-null
  // stream, the stream's work is waited for first (it may be writing them),
  // then the call runs as without one. Every rank must pass the same kind of
  // memory. Host waits are bounded by ANTDT_TIMEOUT_MS; ANTDT_GPU_PATH
  // chooses between staging through host memory and CUDA IPC.
  // -------------------------------------------------------------------------
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, void* stream);
  void broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root, void* stream);
  void reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root, void* stream);
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op,
                      void* stream);
  void allgather(const void* send, void* recv, std::size_t send_count, DataType dtype, void* stream);

  template <class T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    check_same_extent(send.size(), recv.size());
    allreduce(send.data(), recv.data(), send.size(), dtype_of<std::remove_cv_t<T>>(), op);
  }
  template <class T>
  void allreduce(std::span<T> inout, ReduceOp op) {
    allreduce(inout.data(), inout.data(), inout.size(), dtype_of<T>(), op);
  }
  template <class T>
  void broadcast(std::span<T> inout, int root) {
    broadcast(inout.data(), inout.data(), inout.size(), dtype_of<T>(), root);
  }

  // Tells every peer to stop: their pending and future calls fail with
  // RemoteAbortError; this rank's with AbortedError. Safe from any thread; never blocks.
  void abort(std::string_view reason = "aborted by the application") noexcept;

  detail::CommImpl& impl() noexcept { return *impl_; }
  explicit Communicator(std::unique_ptr<detail::CommImpl> impl) noexcept;

 private:
  static void check_same_extent(std::size_t a, std::size_t b);
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace antdt
