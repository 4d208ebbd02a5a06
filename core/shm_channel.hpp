// A node-local shared-memory mailbox for small collectives (docs/collectives.md
// #shared-memory-allreduce): one POSIX shared-memory segment per communicator,
// mapped by every rank, with two slots per rank (round parity) that a rank
// writes and every peer reads.
//
// Why two slots are enough: a rank writes round r's data into slot r % 2 only
// after it finished round r - 1, which needed every peer's round r - 1 data,
// which every peer wrote only after it finished round r - 2 — including reading
// this rank's slot r % 2. So nobody overwrites data a peer may still read,
// without any acknowledgement traffic.
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

namespace antdt::detail {

// What identifies "one node" for shared memory: ranks with equal keys can open
// each other's POSIX shared memory (same host boot, same IPC namespace, same user).
struct NodeKey {
  std::uint64_t host = 0;    // hash of the host name and the kernel's boot id
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
  // Rank 0: creates (O_EXCL, mode 0600) and maps a fresh segment for `nranks`
  // ranks with slots of `slot_bytes`. Throws TransportError naming the call
  // and errno on failure.
  static std::unique_ptr<ShmChannel> create(std::string name, int nranks, int rank, std::size_t slot_bytes);
  // Other ranks: maps the segment rank 0 created, checking its layout.
  static std::unique_ptr<ShmChannel> open(std::string name, int nranks, int rank, std::size_t slot_bytes);
  // Through create() and open() only.
  ShmChannel(Key, std::string name, int nranks, int rank, std::size_t slot_bytes, void* base, std::size_t mapped);
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  // Removes the name (rank 0, once every rank mapped the segment, or on failure).
  void unlink() noexcept;
  // A fresh name for rank 0 to create: /antdt-<pid>-<comm id>-<random>.
  static std::string make_name(std::uint32_t comm_id);

  int nranks() const noexcept { return nranks_; }
  int rank() const noexcept { return rank_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }

  // The next round number of this channel (1, 2, ...): every rank uses rounds
  // in the same order.
  std::uint64_t next_round() noexcept { return ++round_; }

  // This rank's slot for `round`, to fill before publish().
  std::span<std::byte> own_slot(std::uint64_t round) noexcept;
  // Makes this rank's slot for `round` visible with `bytes` bytes of data and
  // the call's signature hash, and wakes sleeping readers.
  void publish(std::uint64_t round, std::uint64_t hash, std::size_t bytes) noexcept;

  struct Peek {
    bool ready = false;
    std::uint64_t hash = 0;
    std::size_t bytes = 0;
    std::span<const std::byte> data;
  };
  // `peer`'s slot for `round`: ready once the peer published that round.
  Peek peek(int peer, std::uint64_t round) const noexcept;

  // What a rank announces at the start of every collective call (sequence
  // number and signature hash), so that a rank waiting here for a peer that
  // took another path for the same call (a mismatched call) can tell.
  void announce(std::uint64_t seq, std::uint64_t hash) noexcept;
  struct Announcement {
    std::uint64_t seq = 0, hash = 0;  // seq 0: nothing consistent to read now
  };
  Announcement announced(int peer) const noexcept;

  // Sleeps until `peer`'s slot for `round` may have changed, or `max_wait`
  // (a futex wait; spurious returns are fine). Callers spin and yield first.
  void sleep_until_published(int peer, std::uint64_t round, std::chrono::microseconds max_wait) noexcept;

 private:
  struct SlotHeader;
  struct SegmentHeader;
  static std::size_t slot_stride(std::size_t slot_bytes) noexcept;
  static std::size_t segment_bytes(int nranks, std::size_t slot_bytes) noexcept;
  SegmentHeader& header() const noexcept;
  SlotHeader& slot(int rank, std::uint64_t round) const noexcept;

  std::string name_;
  int nranks_, rank_;
  std::size_t slot_bytes_;
  void* base_;
  std::size_t mapped_;
  bool unlinked_ = false;
  std::uint64_t round_ = 0;
};

}  // namespace antdt::detail
