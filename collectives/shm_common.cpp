#include "collectives/shm_common.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <array>
#include <cstring>
#include <exception>
#include <vector>
#include <sched.h>
#include <thread>
#include <unistd.h>

namespace antdt::coll {
namespace {

using detail::ShmArea;

constexpr std::size_t kNameBytes = 64;  // set-up message: ok byte + segment name

// How often a wait that has not been answered asks whether the peer's process
// still exists (ShmChannel::peer_gone reads /proc): a wait shorter than this
// never pays for it, and a dead peer is seen within about this much.
constexpr auto kLivenessEvery = std::chrono::milliseconds(20);

// A peer that died never publishes: fail now, naming it, instead of at the
// deadline. The peers still waiting hear of it through the abort.
// The transport may know first (UCX reports a failed endpoint within ms of
// the peer's death): a shared-memory wait asks it too.
void check_peer_alive(Call& call, const ShmChannel& channel, int peer, const char* what) {
  if (auto lost = call.comm().transport().peer_failure(peer))
    call.fail_peer_lost(cat("rank ", call.rank(), " in ", call.signature().describe(), " #", call.seq(), ": peer ",
                            call.comm().transport().describe_peer(peer), " is lost (", *lost,
                            ") while this rank waited for its ", what, " in shared memory"));
  if (!channel.peer_gone(peer)) return;
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  call.fail_peer_lost(cat("rank ", call.rank(), " in ", call.signature().describe(), " #", call.seq(), ": peer rank ",
                          peer, " (pid ", channel.peer_pid(peer), " on ", host, ") is lost: its process is gone ",
                          "while this rank waited for its ", what, " in shared memory"));
}

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::span<const std::byte> as_bytes_of(const auto& v) { return std::as_bytes(std::span(&v, 1)); }
std::span<std::byte> as_writable_bytes_of(auto& v) { return std::as_writable_bytes(std::span(&v, 1)); }

// The node's online CPUs, read once (0 when unknown). Not this process's
// affinity: ANTDT_BIND pins each rank to one core whether or not the node is
// oversubscribed.
int node_cpus() noexcept {
  static const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  return cpus;
}

const char* area_name(ShmArea area) {
  switch (area) {
    case ShmArea::mailbox: return "AllReduce mailbox";
    case ShmArea::bulk: return "AllReduce bulk area";
    case ShmArea::pushpull: return "push-pull area";
  }
  return "?";
}

// The buffers a set-up posts to the transport, with the duty that comes with
// them: no posted operation may outlive its buffer. A wait that throws (a
// MismatchError found in the set-up's messages) leaves the other receives
// posted, and ~Call, which would cancel them, runs only after this scope is
// gone: a peer's late delivery would then write freed memory. So the owner
// cancels (and waits out) whatever the call still has pending before its
// buffers go, whenever it leaves by an exception. (On the normal path every
// operation was waited for: nothing to do.)
template <class Buffers>
class Posted {
 public:
  explicit Posted(Call& call) : call_(call) {}
  ~Posted() {
    if (std::uncaught_exceptions() > uncaught_) call_.cancel_pending();
  }
  Posted(const Posted&) = delete;
  Posted& operator=(const Posted&) = delete;
  Buffers* operator->() noexcept { return &buffers_; }

 private:
  Call& call_;
  const int uncaught_ = std::uncaught_exceptions();
  Buffers buffers_;  // destroyed after the destructor's body: after the cancel
};

struct RootBuffers {
  std::vector<NodeKey> keys;
  std::array<char, kNameBytes> offer{};
  std::vector<std::uint8_t> mapped;
  std::uint8_t verdict = 0;
};

struct PeerBuffers {
  NodeKey mine;
  std::array<char, kNameBytes> offer{};
  std::uint8_t ok = 0;
  std::uint8_t verdict = 0;
};

// Rank 0's side of the set-up. Returns the channel when every rank mapped it.
std::unique_ptr<ShmChannel> set_up_root(Call& call, const ShmChannel::SegmentShape& shape, ShmArea area) {
  const int n = call.size();
  const NodeKey mine = NodeKey::local();
  Posted<RootBuffers> b(call);
  b->keys.resize(static_cast<std::size_t>(n));
  b->mapped.assign(static_cast<std::size_t>(n), 0);
  for (int p = 1; p < n; ++p)
    call.recv(static_cast<std::size_t>(p - 1), p, as_writable_bytes_of(b->keys[static_cast<std::size_t>(p)]));
  call.wait_all();
  bool same_node = true;
  for (int p = 1; p < n; ++p) same_node &= b->keys[static_cast<std::size_t>(p)] == mine;

  std::unique_ptr<ShmChannel> channel;
  if (same_node) {
    const std::string name = ShmChannel::make_name(call.comm().id());
    try {
      channel = ShmChannel::create(name, shape, 0);
      b->offer[0] = 1;
      std::memcpy(b->offer.data() + 1, name.data(), std::min(name.size(), kNameBytes - 2));
    } catch (const TransportError& e) {
      ANTDT_INFO("shared-memory ", area_name(area), " unavailable: ", e.what());
    }
  }
  std::size_t index = static_cast<std::size_t>(n);
  for (int p = 1; p < n; ++p) call.send(index++, p, std::as_bytes(std::span(b->offer)));
  for (int p = 1; p < n; ++p)
    call.recv(index++, p, std::as_writable_bytes(std::span(&b->mapped[static_cast<std::size_t>(p)], 1)));
  call.wait_all();
  b->verdict = channel ? 1 : 0;
  for (int p = 1; p < n; ++p) b->verdict &= b->mapped[static_cast<std::size_t>(p)];
  for (int p = 1; p < n; ++p) call.send(index++, p, as_bytes_of(b->verdict));
  call.wait_all();
  if (channel) channel->unlink();  // every rank that could map it did: the name is no longer needed
  if (b->verdict == 0) channel.reset();
  return channel;
}

std::unique_ptr<ShmChannel> set_up_peer(Call& call, const ShmChannel::SegmentShape& shape, ShmArea area) {
  Posted<PeerBuffers> b(call);
  b->mine = NodeKey::local();
  std::size_t index = 0;
  call.send(index++, 0, as_bytes_of(b->mine));
  call.wait(call.recv(index++, 0, std::as_writable_bytes(std::span(b->offer))));
  std::unique_ptr<ShmChannel> channel;
  if (b->offer[0] == 1) {
    b->offer.back() = '\0';
    try {
      channel = ShmChannel::open(std::string(b->offer.data() + 1), shape, call.rank());
    } catch (const TransportError& e) {
      ANTDT_INFO("shared-memory ", area_name(area), " unavailable: ", e.what());
    }
  }
  b->ok = channel ? 1 : 0;
  call.send(index++, 0, as_bytes_of(b->ok));
  call.wait(call.recv(index++, 0, as_writable_bytes_of(b->verdict)));
  call.wait_all();
  if (b->verdict == 0) channel.reset();
  return channel;
}

}  // namespace

ShmChannel::SegmentShape shm_segment_shape(const Call& call, ShmArea area) {
  const Config& cfg = call.config();
  // The mailbox needs two slots (round parity); the bulk area three, because a
  // rank stages block k + 1 while peers may still read block k - 1
  // (allreduce_shm_bulk.cpp).
  if (area == ShmArea::mailbox) return {call.size(), 2, cfg.shm_max_bytes};
  return {call.size(), 3, cfg.shm_bulk_bytes};  // bulk, pushpull (collectives/pushpull/pushpull_shm.cpp)
}

bool shm_ready(Call& call, ShmArea area) {
  detail::CommImpl& comm = call.comm();
  if (!comm.shm_tried(area)) {
    const ShmChannel::SegmentShape shape = shm_segment_shape(call, area);
    comm.set_shm(area, call.rank() == 0 ? set_up_root(call, shape, area) : set_up_peer(call, shape, area));
    call.set_index_base(call.next_free_index());
    ANTDT_INFO("shared-memory ", area_name(area), comm.shm(area) ? " enabled" : " not available", " for ",
               call.size(), " ranks (", shape.slots, " slots of ", shape.slot_bytes, " bytes per rank)");
  }
  return comm.shm(area) != nullptr;
}

ShmChannel::Peek shm_wait_for(Call& call, ShmChannel& channel, int peer, int slot, std::uint64_t stamp,
                              const char* what) {
  ShmChannel::Peek p = channel.peek(peer, slot, stamp);
  if (p.ready) return p;
  // ~1-4 us of polling: a peer on another core is usually this close. With
  // more ranks on the node than CPUs the peer is as likely to wait for this
  // very core: give it away at once instead.
  if (node_cpus() == 0 || channel.nranks() <= node_cpus()) {
    for (int i = 0; i < 256; ++i) {
      cpu_relax();
      if ((p = channel.peek(peer, slot, stamp)).ready) return p;
    }
  }
  const auto& cfg = call.config();
  const auto start = transport::Clock::now();
  const auto spin_end = cfg.progress == ProgressMode::spin   ? transport::Deadline::max()
                        : cfg.progress == ProgressMode::wake ? start
                                                             : start + cfg.spin_before_sleep;
  auto next_liveness = start + kLivenessEvery;
  for (;;) {
    if ((p = channel.peek(peer, slot, stamp)).ready) return p;
    if (call.sequenced()) {
      const auto a = channel.announced(peer);
      // (Its data may have arrived since the peek: then the slot's own hash decides.)
      if (a.seq == call.seq() && a.hash != call.signature_hash() && !channel.peek(peer, slot, stamp).ready)
        call.fail_mismatch(cat("rank ", call.rank(), " called ", call.signature().describe(), " #", call.seq(),
                               " but rank ", peer, " called a different collective or with a different count, "
                               "dtype or op; all ranks must call collectives with the same arguments"));
    }
    const auto now = transport::Clock::now();
    if (now >= call.deadline())
      call.fail_timeout(cat("rank ", call.rank(), " timed out after ", cfg.timeout.count(),
                            " ms (ANTDT_TIMEOUT_MS) in ", call.signature().describe(), " #", call.seq(),
                            " waiting for rank ", peer, "'s ", what, " in shared memory"));
    if (now >= next_liveness) {
      next_liveness = now + kLivenessEvery;
      check_peer_alive(call, channel, peer, what);
    }
    if (now < spin_end) {
      sched_yield();
      continue;
    }
    call.check_aborted();  // drives the transport once: aborts arrive as messages
    channel.sleep_until_published(peer, slot, stamp, std::chrono::milliseconds(1));
  }
}

void shm_check_peer(Call& call, const ShmChannel::Peek& peek, int peer, std::size_t bytes) {
  if (peek.hash != call.signature_hash() || peek.bytes != bytes)
    call.fail_mismatch(cat("rank ", call.rank(), " called ", call.signature().describe(), " #", call.seq(),
                           " but rank ", peer, " called a different collective or with a different count, "
                           "dtype or op (it shared ", peek.bytes, " bytes where ", bytes,
                           " were expected); all ranks must call collectives with the same arguments"));
}

}  // namespace antdt::coll
