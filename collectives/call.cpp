#include "collectives/call.hpp"

#include "collectives/telemetry/step_timing.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "core/shm_channel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace antdt::coll {
namespace {

// How long a failed transfer waits for a peer's abort message before it is
// reported as a transport failure (failure path only).
constexpr auto kRootCauseLinger = std::chrono::milliseconds(100);
// How often a contained call's wait runs its loss watch (a dead rank is then
// noticed by every survivor of the step within about this much plus the
// arbiter's round trip).
constexpr auto kWatchEvery = std::chrono::milliseconds(10);
// Where a contained call's generation goes in its tag: above the communicator
// id (24 bits) and the kind (8 bits), inside the transport's 40 user bits.
constexpr unsigned kGenerationShift = 32;
static_assert(kGenerationShift + 8 <= transport::kTagBits);

// Whether the trainer has a step open, which the call's time then belongs to.
bool in_marked_step(const detail::CommImpl& comm) noexcept {
  const telemetry::StepTiming* timing = comm.started_step_timing();
  return timing != nullptr && timing->in_step();
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce: return "allreduce";
    case Kind::broadcast: return "broadcast";
    case Kind::barrier: return "barrier";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::allgather: return "allgather";
    case Kind::allgatherv: return "allgatherv";
    case Kind::reduce: return "reduce";
    case Kind::alltoall: return "alltoall";
    case Kind::point_to_point: return "send/recv";
    case Kind::partial: return "partial_allreduce";
    case Kind::partial_catchup: return "partial_allreduce catch-up";
    case Kind::push: return "push";
    case Kind::pull: return "pull";
    case Kind::partial_deposit: return "partial_allreduce deposit";
    case Kind::partial_ahead: return "partial_allreduce push ahead";
  }
  return "?";
}



}  // namespace

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::none: return "none";
    case Algo::ring: return "ring";
    case Algo::chain: return "chain";
    case Algo::binomial_tree: return "binomial-tree";
    case Algo::dissemination: return "dissemination";
    case Algo::recursive_doubling: return "recursive-doubling";
    case Algo::pairwise: return "pairwise";
    case Algo::shm: return "shared-memory";
    case Algo::shm_bulk: return "shared-memory-bulk";
    case Algo::hierarchical: return "hierarchical";
    case Algo::rabenseifner: return "rabenseifner";
    case Algo::recursive_halving: return "recursive-halving";
  }
  return "?";
}

std::uint64_t Signature::hash() const noexcept {
  std::uint64_t h = hash::mix(hash::kSeed, static_cast<std::uint64_t>(kind));
  h = hash::mix(h, count);
  h = hash::mix(h, static_cast<std::uint64_t>(dtype));
  h = hash::mix(h, static_cast<std::uint64_t>(op));
  h = hash::mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(root)));
  h = hash::mix(h, static_cast<std::uint64_t>(algo));
  if (salt != 0) h = hash::mix(h, salt);
  return h;
}

std::string Signature::describe() const {
  std::string s = cat(kind_name(kind), "(count=", count, ", ", dtype_name(dtype));
  if (kind == Kind::allreduce || kind == Kind::reduce_scatter || kind == Kind::reduce || kind == Kind::pull)
    s += cat(", ", op_name(op));
  if (root >= 0) s += cat(", root=", root);
  return s + cat(", ", algo_name(algo), ")");
}

Call::Call(detail::CommImpl& comm, const Signature& sig) : Call(comm, sig, comm.next_seq()) {
  sequenced_ = true;
  // Every channel, so that a rank waiting in any can tell a peer that took another path.
  if (auto* shm = comm.shm(detail::ShmArea::mailbox)) shm->announce(seq_, hash_);
  if (auto* shm = comm.shm(detail::ShmArea::bulk)) shm->announce(seq_, hash_);
  if (auto* shm = comm.shm(detail::ShmArea::pushpull)) shm->announce(seq_, hash_);
}

void Call::check_aborted() {
  comm_.transport().progress();
  throw_if_aborted();
  if (watch_ != nullptr) watch_->check(*this);
}

void Call::contain_peer_loss(LossWatch& watch, std::uint8_t generation) {
  ANTDT_ASSERT(high_water_ == 0);
  watch_ = &watch;
  tag_ = (tag_ & ((std::uint64_t{1} << kGenerationShift) - 1)) |
         (static_cast<std::uint64_t>(generation) << kGenerationShift);
}

Call::Call(detail::CommImpl& comm, const Signature& sig, std::uint64_t seq)
    : comm_(comm),
      sig_(sig),
      hash_(sig.hash()),
      seq_(seq),
      // Within one communicator and one sender, messages match in send order,
      // so the tag only separates communicators and collective kinds; the
      // sequence number travels in the header, where a skipped call is caught.
      tag_((static_cast<std::uint64_t>(comm.id() & 0xffffffu) << 8) | static_cast<std::uint64_t>(sig.kind)),
      timed_(in_marked_step(comm)) {
  comm_.check_usable();
  throw_if_aborted();
}

void Call::throw_if_aborted() {
  auto info = comm_.transport().abort_info();
  if (!info) return;
  // A mismatch found by any rank is a mismatch on every rank; anything else
  // is, from here, a remote abort carrying the origin's reason.
  // A lost peer too: every survivor raises PeerLostError with the origin's
  // words, which name the dead rank, its host and pid.
  Status status = info->status == static_cast<int>(Status::mismatch)    ? Status::mismatch
                  : info->status == static_cast<int>(Status::peer_lost) ? Status::peer_lost
                                                                         : Status::remote_abort;
  std::string reason = info->origin_rank == rank()
                           ? info->reason
                           : cat("rank ", info->origin_rank, " aborted the communicator: ", info->reason);
  comm_.mark_failed(status, reason);
  throw_status(status, reason);
}

Call::Call(detail::CommImpl& comm, const Signature& sig, std::uint64_t seq, std::span<detail::OpSlot> slots)
    : comm_(comm),
      own_slots_(slots),
      sig_(sig),
      hash_(sig.hash()),
      seq_(seq),
      tag_((static_cast<std::uint64_t>(comm.id() & 0xffffffu) << 8) | static_cast<std::uint64_t>(sig.kind)),
      timed_(in_marked_step(comm)) {
  ANTDT_ASSERT(!slots.empty());
  comm_.check_usable();
  throw_if_aborted();
}

void Call::cancel_pending() {
  for (std::size_t i = 0; i < high_water_; ++i) {
    auto& s = op_slot(i);
    if (s.seq == seq_ && s.completion.pending()) comm_.transport().cancel(s.completion);
  }
}

Call::~Call() {
  cancel_pending();
  // The Monitor's view of this rank's step: time inside collectives. Partial
  // collectives report their own split (waiting for the arbiter vs moving data).
  // timed_: the step timing was started when the call began, and stays.
  if (timed_ && sig_.kind != Kind::partial && sig_.kind != Kind::partial_catchup &&
      sig_.kind != Kind::partial_deposit && sig_.kind != Kind::partial_ahead) {
    comm_.started_step_timing()->record_collective(
        0.0, std::chrono::duration<double>(transport::Clock::now() - started_).count());
  }
}

detail::OpSlot& Call::op_slot(std::size_t index) {
  if (own_slots_.empty()) return comm_.slot(index);
  ANTDT_ASSERT(index < own_slots_.size());
  return own_slots_[index];
}

void Call::restart_deadline() {
  deadline_ = transport::Clock::now() + config().timeout;
  has_deadline_ = true;
}

transport::Deadline Call::deadline() {
  if (!has_deadline_) restart_deadline();
  return deadline_;
}

bool Call::cancel(std::size_t index) {
  auto& s = op_slot(index + base_);
  ANTDT_ASSERT(s.seq == seq_);
  if (s.completion.pending()) comm_.transport().cancel(s.completion);
  if (s.completion.state.load(std::memory_order_acquire) == transport::State::cancelled) return true;
  check(s);
  return false;
}

namespace {

class HostMemory final : public CallMemory {
 public:
  std::span<std::byte> scratch(Call& call, std::size_t bytes) override { return call.scratch(bytes); }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  void reduce_into(DataType dtype, ReduceOp op, std::span<std::byte> dst, std::span<const std::byte> a,
                   std::span<const std::byte> b) override {
    antdt::reduce_into(dtype, op, dst, a, b);
  }
  void finish_avg(DataType dtype, std::span<std::byte> data, std::size_t nranks) override {
    antdt::finish_avg(dtype, data, nranks);
  }
  void settle() override {}
};

}  // namespace

CallMemory& host_memory() noexcept {
  static HostMemory host;
  return host;
}

void Call::carry_device_payloads(CallMemory& device) {
  if (!comm_.transport().device_payloads())
    raise<UnsupportedError>(sig_.describe(), ": the ", comm_.transport().name(),
                            " transport cannot move device memory");
  device_payloads_ = true;
  memory_ = &device;
}

std::size_t Call::send(std::size_t index, int peer, std::span<const std::byte> payload) {
  index += base_;
  auto& slot = op_slot(index);
  ANTDT_ASSERT(!slot.completion.pending());
  slot.completion.reset();
  slot.completion.header = transport::MessageHeader{transport::MessageHeader::kMagic, comm_.id(), seq_, hash_,
                                                    payload.size()};
  slot.peer = peer;
  slot.is_recv = false;
  slot.bare = device_payloads_;
  slot.expected_bytes = payload.size();
  slot.seq = seq_;
  high_water_ = std::max(high_water_, index + 1);
  if (device_payloads_)
    comm_.transport().post_send_device(peer, tag_, payload, slot.completion);
  else
    comm_.transport().post_send(peer, tag_, payload, slot.completion);
  return index - base_;
}

std::size_t Call::recv(std::size_t index, int peer, std::span<std::byte> payload) {
  index += base_;
  auto& slot = op_slot(index);
  ANTDT_ASSERT(!slot.completion.pending());
  slot.completion.reset();
  slot.peer = peer;
  slot.is_recv = true;
  slot.bare = device_payloads_;
  slot.expected_bytes = payload.size();
  slot.seq = seq_;
  high_water_ = std::max(high_water_, index + 1);
  if (device_payloads_)
    comm_.transport().post_recv_device(peer, tag_, payload, slot.completion);
  else
    comm_.transport().post_recv(peer, tag_, payload, slot.completion);
  return index - base_;
}

bool Call::done(std::size_t index) {
  auto& slot = op_slot(index + base_);
  if (slot.completion.pending()) comm_.transport().progress();
  if (slot.completion.pending()) return false;
  check(slot);
  return true;
}

void Call::wait(std::size_t index) { wait_slot(op_slot(index + base_)); }

void Call::wait_slot(detail::OpSlot& slot) {
  ANTDT_ASSERT(slot.seq == seq_);
  if (slot.completion.pending()) {
    switch (wait_watched(&slot.completion)) {
      case transport::WaitResult::done: break;
      case transport::WaitResult::timeout:
        fail(Status::timeout, cat("rank ", rank(), " timed out after ", config().timeout.count(),
                                  " ms (ANTDT_TIMEOUT_MS) in ", sig_.describe(), " #", seq_, " waiting to ",
                                  slot.is_recv ? "receive from" : "send to", " rank ", slot.peer));
      case transport::WaitResult::aborted: throw_if_aborted(); break;
    }
  }
  check(slot);
}

transport::WaitResult Call::wait_watched(transport::Completion* op) {
  transport::Completion* ops[] = {op};
  if (watch_ == nullptr) return comm_.transport().wait(ops, deadline());
  // Contained: wait in slices, running the loss watch between them.
  for (;;) {
    const auto now = transport::Clock::now();
    const auto until = std::min(deadline(), now + kWatchEvery);
    const auto result = comm_.transport().wait(ops, until);
    if (result != transport::WaitResult::timeout || until >= deadline()) return result;
    watch_->check(*this);
  }
}

void Call::wait_all() {
  // Slots below the high-water mark that this call did not post belong to earlier calls.
  for (std::size_t i = 0; i < high_water_; ++i)
    if (op_slot(i).seq == seq_) wait_slot(op_slot(i));
}

void Call::check(detail::OpSlot& slot) {
  auto& c = slot.completion;
  const auto state = c.state.load(std::memory_order_acquire);
  if (state == transport::State::failed) {
    // A peer that aborted also closes its side, and its abort message may
    // still be on the way when our transfer to it fails: look for the abort
    // (the root cause) for a moment before blaming the transfer.
    throw_if_aborted();
    for (const auto until = transport::Clock::now() + kRootCauseLinger; transport::Clock::now() < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      check_aborted();
    }
    if (auto lost = comm_.transport().peer_failure(slot.peer))
      fail_peer_lost(cat("rank ", rank(), " in ", sig_.describe(), " #", seq_, ": peer ",
                         comm_.transport().describe_peer(slot.peer), " is lost (", *lost, ")"));
    if (slot.is_recv && c.truncated)
      fail(Status::mismatch, cat("rank ", rank(), " in ", sig_.describe(), " #", seq_, ": rank ", slot.peer,
                                 " sent more data than expected (", c.error,
                                 "); ranks called the collective with different arguments"));
    fail(Status::transport, cat("rank ", rank(), " in ", sig_.describe(), " #", seq_, ": transfer with rank ",
                                slot.peer, " failed: ", c.error));
  }
  if (state == transport::State::cancelled)
    fail(Status::internal, cat("operation with rank ", slot.peer, " was cancelled"));
  if (!slot.is_recv) return;
  if (slot.bare) {  // no header: the length is all there is to check
    if (c.received_bytes != slot.expected_bytes)
      fail(Status::mismatch, cat("rank ", rank(), " in ", sig_.describe(), " #", seq_, ": rank ", slot.peer, " sent ",
                                 c.received_bytes, " bytes of device memory where ", slot.expected_bytes,
                                 " were expected; all ranks must call collectives with the same arguments"));
    return;
  }
  const auto& h = c.header;
  if (h.magic != transport::MessageHeader::kMagic || h.comm_id != comm_.id())
    fail(Status::transport, cat("rank ", rank(), ": malformed message header from rank ", slot.peer));
  if (h.seq != seq_ && sig_.kind == Kind::point_to_point)
    fail(Status::mismatch, cat("rank ", rank(), " posted receive #", seq_, " from rank ", slot.peer,
                               " but that rank's matching send is its #", h.seq, " to this rank (",
                               sig_.describe(), "): the two ranks called send/recv in different numbers"));
  if (h.seq != seq_)
    fail(Status::mismatch, cat("rank ", rank(), " is in collective #", seq_, " (", sig_.describe(), ") but rank ",
                               slot.peer, " is in collective #", h.seq,
                               ": ranks called collectives in different orders or numbers"));
  if (h.signature != hash_ || h.payload_bytes != c.received_bytes || c.received_bytes != slot.expected_bytes)
    fail(Status::mismatch, cat("rank ", rank(), " called ", sig_.describe(), " #", seq_, " but rank ", slot.peer,
                               " called a different collective or with a different count, dtype, op or root (it sent ",
                               h.payload_bytes, " bytes where ", slot.expected_bytes,
                               " were expected); all ranks must call collectives with the same arguments"));
}

void Call::fail(Status status, const std::string& reason) {
  if (watch_ != nullptr && status == Status::peer_lost) {
    // Contained: this rank gives the step up; the communicator stays usable
    // and the peers are not aborted (the arbiter re-runs the step).
    ANTDT_INFO(reason);
    throw_status(status, reason);
  }
  // Tell the peers first, so that they fail promptly with the same cause
  // instead of each waiting out its own timeout.
  comm_.mark_failed(status, reason);
  comm_.transport().abort(static_cast<int>(status), reason);
  ANTDT_INFO(reason);
  throw_status(status, reason);
}

}  // namespace antdt::coll
