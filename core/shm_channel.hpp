// A node-local shared-memory channel for collectives (docs/collectives.md
// #shared-memory-allreduce): one POSIX shared-memory segment, mapped by every
// rank, with a few slots per rank that only their rank writes and every peer
// reads. A slot carries a stamp that only grows: a writer publishes data (or a
// new state of the data) by storing a larger stamp, and a reader waits until
// the stamp reached the one it needs. Which slot and stamp a round uses, and
// why the slot is free again when it is rewritten, is the algorithm's
// business (collectives/allreduce_shm*.cpp); the channel only moves the bytes
// and the stamps and lets readers sleep.
//
// Waiting: a reader spins briefly, then yields, then sleeps on a futex in the
// segment (shared between processes) so that oversubscribed ranks do not burn
// the cores their peers need; writers wake sleepers only when there are some.
//
// The segment's name is unlinked as soon as every rank mapped it: nothing is
// left in /dev/shm after a crash, and only ranks of this job ever open it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace antdt {

// What identifies "one node" for shared memory: ranks with equal keys can open
// each other's POSIX shared memory (same host boot, same IPC namespace, same user).
struct NodeKey {
  std::uint64_t host = 0;    // node_identity() (core/node_identity.hpp)
  std::uint64_t ipc_ns = 0;  // inode of /proc/self/ns/ipc (0 when unknown)
  std::uint64_t uid = 0;
  bool operator==(const NodeKey&) const = default;
  static NodeKey local();
};

class ShmChannel {
  struct Key {
    explicit Key() = default;
  };

 public:
  // The shape of a segment: every rank has `slots` slots of `slot_bytes`.
  struct SegmentShape {
    int nranks = 1;
    int slots = 2;
    std::size_t slot_bytes = 0;
    bool operator==(const SegmentShape&) const = default;
  };
  // Rank 0: creates (O_EXCL, mode 0600), reserves (posix_fallocate: a full
  // /dev/shm is an error here, not a SIGBUS later) and maps a fresh segment.
  // Throws TransportError naming the call and errno on failure.
  static std::unique_ptr<ShmChannel> create(std::string name, const SegmentShape& shape, int rank);
  // Other ranks: maps the segment rank 0 created, checking its shape.
  static std::unique_ptr<ShmChannel> open(std::string name, const SegmentShape& shape, int rank);
  // The bytes of /dev/shm a segment of this shape takes.
  static std::size_t segment_bytes(const SegmentShape& shape) noexcept;
  // Through create() and open() only.
  ShmChannel(Key, std::string name, const SegmentShape& shape, int rank, void* base, std::size_t mapped);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // Removes the name (rank 0, once every rank mapped the segment, or on failure).
  void unlink() noexcept;
  // A fresh name for rank 0 to create: /antdt-<pid>-<comm id>-<random>.
  static std::string make_name(std::uint32_t comm_id);

  int nranks() const noexcept { return shape_.nranks; }
  int rank() const noexcept { return rank_; }
  int slots() const noexcept { return shape_.slots; }
  std::size_t slot_bytes() const noexcept { return shape_.slot_bytes; }

  // The next round number of this channel (1, 2, ...): every rank uses rounds
  // in the same order. The algorithm derives slots and stamps from it.
  std::uint64_t next_round() noexcept { return ++round_; }

  // This rank's slot `slot` (0 .. slots() - 1), to fill before publish().
  std::span<std::byte> own_slot(int slot) noexcept;
  // Makes this rank's slot `slot` visible at `stamp` (larger than any stamp the
  // slot had) with `bytes` bytes of data and the call's signature hash, and
  // wakes sleeping readers.
  void publish(int slot, std::uint64_t stamp, std::uint64_t hash, std::size_t bytes) noexcept;

  struct Peek {
    bool ready = false;
    std::uint64_t hash = 0;
    std::size_t bytes = 0;
    std::span<const std::byte> data;
  };
  // `peer`'s slot `slot`: ready once the peer published it at `stamp` or later.
  Peek peek(int peer, int slot, std::uint64_t stamp) const noexcept;

  // What a rank announces at the start of every collective call (sequence
  // number and signature hash), so that a rank waiting here for a peer that
  // took another path for the same call (a mismatched call) can tell.
  void announce(std::uint64_t seq, std::uint64_t hash) noexcept;
  struct Announcement {
    std::uint64_t seq = 0, hash = 0;  // seq 0: nothing consistent to read now
  };
  Announcement announced(int peer) const noexcept;

  // The process behind `peer`, as it recorded itself when it mapped the
  // segment (0: unknown).
  int peer_pid(int peer) const noexcept;
  // True when `peer`'s process is known to be gone: its pid no longer exists,
  // is a zombie, or belongs to a newer process (its start time differs). A
  // process that died never publishes again, and nothing in the segment says
  // so: a waiter asks this instead of waiting out ANTDT_TIMEOUT_MS. False
  // when it cannot tell (the peer is in another pid namespace). Reads /proc:
  // for waits that have already lasted a while, never the fast path.
  bool peer_gone(int peer) const noexcept;

  // Sleeps until `peer`'s slot `slot` may have reached `stamp`, or `max_wait`
  // (a futex wait; spurious returns are fine). Callers spin and yield first.
  void sleep_until_published(int peer, int slot, std::uint64_t stamp, std::chrono::microseconds max_wait) noexcept;

 private:
  struct SlotHeader;
  struct SegmentHeader;
  static std::size_t slot_stride(std::size_t slot_bytes) noexcept;
  SegmentHeader& header() const noexcept;
  SlotHeader& slot_header(int rank, int slot) const noexcept;

  std::string name_;
  SegmentShape shape_;
  int rank_;
  void* base_;
  std::size_t mapped_;
  bool unlinked_ = false;
  std::uint64_t round_ = 0;
};

}  // namespace antdt
