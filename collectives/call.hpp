// One collective call in flight on a communicator: its sequence number, its
// signature, its deadline, and the operations it posted. Every algorithm posts
// messages through a Call, which is the one place where arriving headers are
// checked (mismatched calls across ranks), waits are bounded (ANTDT_TIMEOUT_MS),
// and failures are turned into typed errors on this rank and aborts at the peers.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace antdt::coll {

// The kind is part of the message tag: point-to-point transfers never match a
// collective's receives (and the reverse), whatever the order of calls.
enum class Kind : std::uint8_t {
  allreduce = 1, broadcast = 2, barrier = 3, reduce_scatter = 4, allgather = 5, allgatherv = 6, reduce = 7,
  alltoall = 8, point_to_point = 9, partial = 10, partial_catchup = 11, push = 12, pull = 13,
  partial_deposit = 14, partial_ahead = 15,  // stale-synchronous defer (collectives/partial/async_sends.hpp)
};
enum class Algo : std::uint8_t {
  none = 0, ring = 1, chain = 2, binomial_tree = 3, dissemination = 4, recursive_doubling = 5, pairwise = 6,
  shm = 7, shm_bulk = 8, hierarchical = 9, rabenseifner = 10, recursive_halving = 11,
};

// The algorithm's name in messages and traces ("ring", "shared-memory", ...).
const char* algo_name(Algo a);

// What every rank must agree on for one call.
struct Signature {
  Kind kind = Kind::barrier;
  std::size_t count = 0;
  DataType dtype = DataType::u8;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  Algo algo = Algo::none;
  // What else the ranks must agree on, hashed (core/hash.hpp; 0: nothing):
  // the per-rank counts of a v-variant, so ranks that disagree on any rank's
  // count are caught at the first message; a push-pull key and direction; a
  // protocol phase of the device paths or partial collectives.
  std::uint64_t salt = 0;

  std::uint64_t hash() const noexcept;
  std::string describe() const;  // "allreduce(count=10, f32, sum, ring)"
};

class Call;

// How a call treats a lost peer when it is *contained* (partial collectives,
// docs/partial.md#dead-ranks): instead of failing the communicator for good
// and aborting every peer, the call throws PeerLostError on this rank only, so
// that the arbiter can run the step again among the survivors. While the call
// waits, check() runs every few milliseconds; it throws (a contained
// PeerLostError) when the step must be given up: a rank of the step is reported
// lost, or the arbiter said so (a survivor blocked on another survivor that
// already gave up would otherwise wait for it until ANTDT_TIMEOUT_MS).
class LossWatch {
 public:
  virtual ~LossWatch() = default;
  virtual void check(Call& call) = 0;
};

// Where a call's buffers live and what copies and reduces them: host memory
// and the CPU kernels for every call, unless it carries device payloads (the
// direct GPU path: device memory and the device kernels, asynchronous on a
// stream). Algorithms that may run on either copy and reduce through
// Call::memory() and settle() before they send what they copied or reduced.
class CallMemory {
 public:
  virtual ~CallMemory() = default;
  // Receive slots of `bytes` (host: the call's scratch).
  virtual std::span<std::byte> scratch(Call& call, std::size_t bytes) = 0;
  virtual void copy(std::byte* dst, const std::byte* src, std::size_t bytes) = 0;
  // dst = a (op) b, elementwise; avg reduces as sum.
  virtual void reduce_into(DataType dtype, ReduceOp op, std::span<std::byte> dst, std::span<const std::byte> a,
                           std::span<const std::byte> b) = 0;
  virtual void finish_avg(DataType dtype, std::span<std::byte> data, std::size_t nranks) = 0;
  // Returns once the copies and reductions so far have landed, so that the
  // transport may read them (host: at once).
  virtual void settle() = 0;
};
CallMemory& host_memory() noexcept;

class Call {
 public:
  Call(detail::CommImpl& comm, const Signature& sig);
  // Partial collectives: the arbiter's step number is the sequence number
  // (ranks make different numbers of calls), and the communicator's own
  // sequence of ordinary collectives is left alone.
  Call(detail::CommImpl& comm, const Signature& sig, std::uint64_t seq);
  // A call outside the collective sequence (point-to-point): `seq` is the
  // caller's own count (transfers between this pair of ranks so far), and the
  // operations live in `slots`, owned by the caller, instead of the
  // communicator's pool, so they may stay in flight while collectives run.
  Call(detail::CommImpl& comm, const Signature& sig, std::uint64_t seq, std::span<detail::OpSlot> slots);
  // Cancels whatever is still pending, so no buffer is touched after the call returns.
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  int rank() const noexcept { return comm_.rank(); }
  int size() const noexcept { return comm_.size(); }
  const Config& config() const noexcept { return comm_.config(); }
  detail::CommImpl& comm() noexcept { return comm_; }
  const Signature& signature() const noexcept { return sig_; }
  std::uint64_t signature_hash() const noexcept { return hash_; }  // signature().hash(), computed once
  std::uint64_t seq() const noexcept { return seq_; }
  // ANTDT_TIMEOUT_MS from the first wait that needed it (or restart_deadline()):
  // calls that never block read no clock for it.
  transport::Deadline deadline();
  // True for calls numbered by the communicator's collective sequence (they
  // announce themselves in the shared-memory mailbox, see allreduce_shm.cpp).
  bool sequenced() const noexcept { return sequenced_; }
  std::span<std::byte> scratch(std::size_t bytes) { return comm_.scratch(bytes); }

  // From here on this call's payloads are in device memory (the direct GPU
  // path) and `device` copies and reduces them: send and recv post bare
  // device-payload messages (Transport::post_send_device), and a receive is
  // checked by its length alone, since bare messages carry no header. So only
  // for a call that every rank makes right after a headed exchange that
  // checked the signature (the direct path's record exchange).
  // UnsupportedError when the transport cannot move device memory.
  void carry_device_payloads(CallMemory& device);
  CallMemory& memory() noexcept { return *memory_; }

  // Posts into pool slot `index` (the algorithm numbers its operations; indexes
  // must be unique within the call). Returns the slot index for wait().
  std::size_t send(std::size_t index, int peer, std::span<const std::byte> payload);
  std::size_t recv(std::size_t index, int peer, std::span<std::byte> payload);
  // Waits until that operation completed and, for a receive, checks its header.
  void wait(std::size_t index);
  bool done(std::size_t index);  // non-blocking test (drives progress once)
  // Waits for every operation posted so far.
  void wait_all();
  // Shifts the slot indexes of later send/recv/wait calls by `base`, so that an
  // algorithm numbering from 0 can run after operations this call already posted.
  void set_index_base(std::size_t base) noexcept { base_ = base; }
  std::size_t next_free_index() const noexcept { return high_water_; }
  // Withdraws a pending operation without failing the call. Returns true when
  // it was withdrawn, false when it had completed (then checked like wait()).
  bool cancel(std::size_t index);
  // Cancels every operation of this call that is still pending; on return the
  // transport touches none of their buffers. ~Call does it too, but buffers
  // that live in the algorithm's own scope go before the Call does: their
  // owner calls this first when it leaves by an exception (shm_common.cpp).
  void cancel_pending();
  // Gives waits a fresh ANTDT_TIMEOUT_MS from now (an operation posted early
  // and waited for much later).
  void restart_deadline();

  // For algorithms that wait outside the transport (shared memory): the same
  // failure handling as the transport waits (mark failed, abort the peers, throw).
  [[noreturn]] void fail_mismatch(const std::string& reason) { fail(Status::mismatch, reason); }
  [[noreturn]] void fail_timeout(const std::string& reason) { fail(Status::timeout, reason); }
  [[noreturn]] void fail_transport(const std::string& reason) { fail(Status::transport, reason); }
  // A peer that is gone: PeerLostError here and at every peer (the reason names its rank, host and pid).
  [[noreturn]] void fail_peer_lost(const std::string& reason) { fail(Status::peer_lost, reason); }
  // Drives the transport once and throws when this rank or a peer aborted
  // (and, when contained, runs the loss watch).
  void check_aborted();

  // Partial collectives: from here on a lost peer fails this call alone (see
  // LossWatch), and its messages carry `generation` in their tag, so that none
  // left over from an attempt given up under an older generation can match.
  // Before the first operation is posted.
  void contain_peer_loss(LossWatch& watch, std::uint8_t generation);
  bool contained() const noexcept { return watch_ != nullptr; }

 private:
  [[noreturn]] void fail(Status status, const std::string& reason);
  void throw_if_aborted();  // throws when this rank or a peer aborted the transport
  void check(detail::OpSlot& slot);
  detail::OpSlot& op_slot(std::size_t index);  // absolute index (base_ already added)
  void wait_slot(detail::OpSlot& slot);
  transport::WaitResult wait_watched(transport::Completion* op);

  detail::CommImpl& comm_;
  std::span<detail::OpSlot> own_slots_;  // empty: the communicator's pool
  Signature sig_;
  std::uint64_t hash_;
  std::uint64_t seq_;
  std::uint64_t tag_;
  transport::Deadline deadline_{};
  bool has_deadline_ = false;
  // Time spent in the collective, for the Monitor, only while the trainer
  // marks a step (clock reads cost tens of ns: small collectives notice).
  bool timed_;
  transport::Clock::time_point started_ = timed_ ? transport::Clock::now() : transport::Clock::time_point{};
  std::size_t high_water_ = 0;  // slots [0, high_water_) may have been posted
  std::size_t base_ = 0;
  bool sequenced_ = false;
  bool device_payloads_ = false;
  CallMemory* memory_ = &host_memory();
  LossWatch* watch_ = nullptr;  // contained: a lost peer fails this call alone
};

}  // namespace antdt::coll
