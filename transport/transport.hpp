// The transport interface: how bytes move between the ranks of one job.
// Collectives are written against this interface only; nothing in
// collectives/ knows UCX.
//
// Model: tagged, ordered, two-sided messages. Every message is a fixed 32-byte
// MessageHeader plus a contiguous payload (device-payload messages, where the
// transport supports them, are the payload alone; see post_send_device).
// Messages from one sender with the same tag are matched in the order they
// were sent. Operations complete into a
// caller-owned Completion, so posting allocates nothing on the hot path.
#pragma once

#include "core/error.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace antdt::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Carried in front of every payload. Receivers check it against what they
// expect, which is how a collective called differently on two ranks is caught.
struct MessageHeader {
  static constexpr std::uint32_t kMagic = 0x41445443;  // "ADTC"
  std::uint32_t magic = kMagic;
  std::uint32_t comm_id = 0;    // which communicator
  std::uint64_t seq = 0;        // collective sequence number on that communicator
  std::uint64_t signature = 0;  // hash of (collective, count, dtype, op, root, algorithm)
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(MessageHeader) == 32);

// Tags: user tags must fit in kTagBits bits (transports use the rest for the
// source rank and their own control traffic).
inline constexpr unsigned kTagBits = 40;
inline constexpr std::uint64_t kMaxTag = (std::uint64_t{1} << kTagBits) - 1;

enum class State : int { pending = 0, done = 1, failed = 2, cancelled = 3 };

// One posted send or receive. Owned by the caller; must stay alive and unmoved
// until it is no longer pending (wait, or cancel then wait).
struct Completion {
  std::atomic<State> state{State::pending};
  MessageHeader header{};      // send: filled by the caller before posting; recv: filled on arrival
  std::size_t received_bytes = 0;  // recv: payload bytes that arrived
  std::string error;           // set when failed
  bool truncated = false;      // recv failed because the message was longer than the posted payload
  void* handle = nullptr;      // transport-private

  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  bool pending() const noexcept { return state.load(std::memory_order_acquire) == State::pending; }
  // Re-arms a finished completion for reuse.
  void reset() noexcept {
    state.store(State::pending, std::memory_order_relaxed);
    received_bytes = 0;
    error.clear();
    truncated = false;
    handle = nullptr;
  }
};

struct AbortInfo {
  int origin_rank = -1;  // the rank that called abort()
  int status = 0;        // antdt::Status code
  std::string reason;
};

// Why a wait returned without all its operations done.
enum class WaitResult { done, timeout, aborted };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual std::string_view name() const noexcept = 0;

  // Sends done.header + payload to `peer`. The payload must stay valid until
  // the completion leaves `pending`.
  virtual void post_send(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) = 0;
  // Receives a message from `peer` with `tag` into done.header + payload. A
  // message longer than the payload fails the completion (truncation).
  virtual void post_recv(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) = 0;

  // Payloads in device memory (cudaMalloc), for the direct GPU path
  // (docs/gpu.md#direct-path-device-memory-handed-to-the-transport). True when
  // post_send_device / post_recv_device move device memory without the
  // caller staging it through host memory: UCX built with CUDA support, or an
  // in-process fabric given a device copy.
  virtual bool device_payloads() const noexcept { return false; }
  // A device-payload message is bare: the payload alone, no MessageHeader
  // (UCX takes one memory type per operation, and the header is host memory).
  // done.header is neither sent nor filled in; received_bytes says what
  // arrived. Bare messages match only bare receives (same peer and tag, in
  // send order). Since nothing on the wire identifies the call, a collective
  // may post them only after headed messages of the same call sequence
  // checked that every rank agrees on the call (collectives/call.hpp).
  // Transports without device_payloads() throw UnsupportedError.
  virtual void post_send_device(int peer, std::uint64_t tag, std::span<const std::byte> payload, Completion& done) {
    (void)peer, (void)tag, (void)payload, (void)done;
    raise<UnsupportedError>("the ", name(), " transport cannot move device memory (post_send_device)");
  }
  virtual void post_recv_device(int peer, std::uint64_t tag, std::span<std::byte> payload, Completion& done) {
    (void)peer, (void)tag, (void)payload, (void)done;
    raise<UnsupportedError>("the ", name(), " transport cannot move device memory (post_recv_device)");
  }

  // Drives progress until every operation in `ops` has left `pending`, the
  // deadline passes, or a peer aborted. Blocks without spinning in wake-up mode.
  virtual WaitResult wait(std::span<Completion* const> ops, Deadline deadline) = 0;
  // Non-blocking: drives progress once.
  virtual void progress() = 0;
  // Cancels a pending operation; it ends `cancelled` (or done, if it won the race).
  // Waits (bounded) until the transport no longer touches the buffers.
  virtual void cancel(Completion& op) = 0;

  // Best effort, non-blocking, safe from any thread: tells every peer to abort.
  // `status` is an antdt::Status code (why), `reason` a message naming the cause.
  // Afterwards waits on this transport (here and at the peers) return WaitResult::aborted.
  virtual void abort(int status, std::string_view reason) noexcept = 0;
  // The first abort seen, local or from a peer.
  virtual std::optional<AbortInfo> abort_info() const = 0;

  // Dead peers (docs/configuration.md#dead-ranks): why `peer` is known to be
  // gone (UCX reported it failed, its connection closed), or nullopt while it
  // is not. Operations with a failed peer end `failed`; the collective that
  // sees this raises PeerLostError instead of a plain TransportError.
  virtual std::optional<std::string> peer_failure(int peer) const {
    (void)peer;
    return std::nullopt;
  }
  // Whether this rank reaches some peer over TCP (UCX's tcp transport), where
  // a message costs tens of microseconds more than through memory: the
  // communicator combines every rank's answer at set-up and the algorithm
  // selection reads it (collectives/selection.cpp). Known once the endpoints
  // are connected; false for transports without such links.
  virtual bool tcp_links() const noexcept { return false; }
  // "rank N (pid P on host H)" where the transport knows the peer's process,
  // else "rank N": how errors about a lost peer name it.
  virtual std::string describe_peer(int peer) const { return cat("rank ", peer); }
};

}  // namespace antdt::transport
