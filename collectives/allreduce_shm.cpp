// Shared-memory AllReduce for small messages among ranks of one node
// (docs/collectives.md#shared-memory-allreduce).
//
// Each rank copies its vector into its slot of the communicator's mailbox
// (core/shm_channel.hpp) and publishes it; then every rank reduces all slots
// itself, in rank order, so every rank computes the same bits. One write and
// n reads per rank, no message, no header to match: the cost is a few cache
// line transfers and the reduction, against the transport's per-message
// latency (several per call for recursive doubling).
//
// The mailbox is set up by the first call that may use it, as part of that
// call, through the transport: every rank sends rank 0 its node key; rank 0
// creates the segment when all keys are equal and sends its name; every rank
// maps it and reports; rank 0 sends the verdict and removes the name. A
// communicator whose ranks are not all on one node (or that cannot map the
// segment) remembers that and uses the transport algorithms.
//
// A rank whose peer took another path for the same call (ranks called with
// different counts, say) sees the peer's announced signature differ and
// fails with MismatchError, which reaches the peer as an abort.
#include "collectives/algorithms.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/shm_channel.hpp"

#include <array>
#include <cstring>
#include <sched.h>

namespace antdt::coll {
namespace {

using detail::NodeKey;
using detail::ShmChannel;

constexpr std::size_t kNameBytes = 64;  // set-up message: ok byte + segment name

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::span<const std::byte> as_bytes_of(const auto& v) { return std::as_bytes(std::span(&v, 1)); }
std::span<std::byte> as_writable_bytes_of(auto& v) { return std::as_writable_bytes(std::span(&v, 1)); }

// Rank 0's side of the set-up. Returns the channel when every rank mapped it.
std::unique_ptr<ShmChannel> set_up_root(Call& call, std::size_t slot_bytes) {
  const int n = call.size();
  const NodeKey mine = NodeKey::local();
  std::vector<NodeKey> keys(static_cast<std::size_t>(n));
  for (int p = 1; p < n; ++p) call.recv(static_cast<std::size_t>(p - 1), p, as_writable_bytes_of(keys[p]));
  call.wait_all();
  bool same_node = true;
  for (int p = 1; p < n; ++p) same_node &= keys[static_cast<std::size_t>(p)] == mine;

  std::unique_ptr<ShmChannel> channel;
  std::array<char, kNameBytes> offer{};
  if (same_node) {
    const std::string name = ShmChannel::make_name(call.comm().id());
    try {
      channel = ShmChannel::create(name, n, 0, slot_bytes);
      offer[0] = 1;
      std::memcpy(offer.data() + 1, name.data(), std::min(name.size(), kNameBytes - 2));
    } catch (const TransportError& e) {
      ANTDT_INFO("shared-memory AllReduce unavailable: ", e.what());
    }
  }
  std::size_t index = static_cast<std::size_t>(n);
  for (int p = 1; p < n; ++p) call.send(index++, p, std::as_bytes(std::span(offer)));
  std::vector<std::uint8_t> mapped(static_cast<std::size_t>(n), 0);
  for (int p = 1; p < n; ++p) call.recv(index++, p, std::as_writable_bytes(std::span(&mapped[p], 1)));
  call.wait_all();
  std::uint8_t verdict = channel ? 1 : 0;
  for (int p = 1; p < n; ++p) verdict &= mapped[static_cast<std::size_t>(p)];
  for (int p = 1; p < n; ++p) call.send(index++, p, as_bytes_of(verdict));
  call.wait_all();
  if (channel) channel->unlink();  // every rank that could map it did: the name is no longer needed
  if (verdict == 0) channel.reset();
  return channel;
}

std::unique_ptr<ShmChannel> set_up_peer(Call& call, std::size_t slot_bytes) {
  const NodeKey mine = NodeKey::local();
  std::size_t index = 0;
  call.send(index++, 0, as_bytes_of(mine));
  std::array<char, kNameBytes> offer{};
  call.wait(call.recv(index++, 0, std::as_writable_bytes(std::span(offer))));
  std::unique_ptr<ShmChannel> channel;
  if (offer[0] == 1) {
    offer.back() = '\0';
    try {
      channel = ShmChannel::open(std::string(offer.data() + 1), call.size(), call.rank(), slot_bytes);
    } catch (const TransportError& e) {
      ANTDT_INFO("shared-memory AllReduce unavailable: ", e.what());
    }
  }
  const std::uint8_t ok = channel ? 1 : 0;
  call.send(index++, 0, as_bytes_of(ok));
  std::uint8_t verdict = 0;
  call.wait(call.recv(index++, 0, as_writable_bytes_of(verdict)));
  call.wait_all();
  if (verdict == 0) channel.reset();
  return channel;
}

// Waits for `peer`'s data of `round`: polls, then polls yielding the core,
// then sleeps on the slot's futex, checking for aborts, mismatches and the
// deadline between sleeps.
ShmChannel::Peek wait_for(Call& call, ShmChannel& channel, int peer, std::uint64_t round, std::uint64_t hash) {
  ShmChannel::Peek p = channel.peek(peer, round);
  if (p.ready) return p;
  for (int i = 0; i < 256; ++i) {  // ~1-4 us: a peer on another core is usually this close
    cpu_relax();
    if ((p = channel.peek(peer, round)).ready) return p;
  }
  const auto& cfg = call.config();
  const auto start = transport::Clock::now();
  const auto spin_end = cfg.progress == ProgressMode::spin   ? transport::Deadline::max()
                        : cfg.progress == ProgressMode::wake ? start
                                                             : start + cfg.spin_before_sleep;
  for (;;) {
    if ((p = channel.peek(peer, round)).ready) return p;
    if (call.sequenced()) {
      const auto a = channel.announced(peer);
      // (Its data may have arrived since the peek: then the slot's own hash decides.)
      if (a.seq == call.seq() && a.hash != hash && !channel.peek(peer, round).ready)
        call.fail_mismatch(cat("rank ", call.rank(), " called ", call.signature().describe(), " #", call.seq(),
                               " but rank ", peer, " called a different collective or with a different count, "
                               "dtype or op; all ranks must call collectives with the same arguments"));
    }
    const auto now = transport::Clock::now();
    if (now >= call.deadline())
      call.fail_timeout(cat("rank ", call.rank(), " timed out after ", cfg.timeout.count(),
                            " ms (ANTDT_TIMEOUT_MS) in ", call.signature().describe(), " #", call.seq(),
                            " waiting for rank ", peer, "'s data in shared memory"));
    if (now < spin_end) {
      sched_yield();
      continue;
    }
    call.check_aborted();  // drives the transport once: aborts arrive as messages
    channel.sleep_until_published(peer, round, std::chrono::milliseconds(1));
  }
}

}  // namespace

bool shm_ready(Call& call) {
  detail::CommImpl& comm = call.comm();
  if (!comm.shm_tried()) {
    const std::size_t slot_bytes = call.config().shm_max_bytes;
    comm.set_shm(call.rank() == 0 ? set_up_root(call, slot_bytes) : set_up_peer(call, slot_bytes));
    call.set_index_base(call.next_free_index());
    ANTDT_INFO("shared-memory AllReduce ", comm.shm() ? "enabled" : "not available", " for ", call.size(),
               " ranks (ANTDT_SHM_MAX_BYTES=", slot_bytes, ")");
  }
  return comm.shm() != nullptr;
}

void allreduce_shm(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                   ReduceOp op) {
  ShmChannel& channel = *call.comm().shm();
  const std::size_t bytes = count * dtype_size(dtype);
  ANTDT_ASSERT(bytes <= channel.slot_bytes());
  const std::uint64_t hash = call.signature_hash();
  const std::uint64_t round = channel.next_round();
  const std::span<std::byte> own = channel.own_slot(round);
  if (bytes > 0) std::memcpy(own.data(), send, bytes);
  channel.publish(round, hash, bytes);

  const std::span<std::byte> acc(recv, bytes);
  const int n = call.size();
  for (int peer = 0; peer < n; ++peer) {
    std::span<const std::byte> data = own.first(bytes);
    if (peer != call.rank()) {
      const ShmChannel::Peek p = wait_for(call, channel, peer, round, hash);
      if (p.hash != hash || p.bytes != bytes)
        call.fail_mismatch(cat("rank ", call.rank(), " called ", call.signature().describe(), " #", call.seq(),
                               " but rank ", peer, " called a different collective or with a different count, "
                               "dtype or op (it shared ", p.bytes, " bytes where ", bytes,
                               " were expected); all ranks must call collectives with the same arguments"));
      data = p.data;
    }
    if (bytes == 0) continue;
    if (peer == 0)
      std::memcpy(acc.data(), data.data(), bytes);
    else
      reduce_inplace(dtype, op, acc, data);
  }
  if (op == ReduceOp::avg && bytes > 0) finish_avg(dtype, acc, static_cast<std::size_t>(n));
}

}  // namespace antdt::coll
