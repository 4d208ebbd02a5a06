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
// call (shm_common.hpp).
//
// Two slots per rank (round parity) are enough: a rank writes round r's data
// into slot r % 2 only after it finished round r - 1, which needed every
// peer's round r - 1 data, which every peer wrote only after it finished round
// r - 2 — including reading this rank's slot r % 2. So nobody overwrites data
// a peer may still read, without any acknowledgement traffic.
//
// A rank whose peer took another path for the same call (ranks called with
// different counts, say) sees the peer's announced signature differ and
// fails with MismatchError, which reaches the peer as an abort.
#include "collectives/algorithms.hpp"
#include "collectives/shm_common.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstring>

namespace antdt::coll {

void allreduce_shm(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                   ReduceOp op) {
  ShmChannel& channel = *call.comm().shm(detail::ShmArea::mailbox);
  const std::size_t bytes = count * dtype_size(dtype);
  ANTDT_ASSERT(bytes <= channel.slot_bytes());
  const std::uint64_t round = channel.next_round();
  const int slot = static_cast<int>(round & 1);
  const std::span<std::byte> own = channel.own_slot(slot);
  if (bytes > 0) std::memcpy(own.data(), send, bytes);
  channel.publish(slot, round, call.signature_hash(), bytes);

  const std::span<std::byte> acc(recv, bytes);
  const int n = call.size();
  for (int peer = 0; peer < n; ++peer) {
    std::span<const std::byte> data = own.first(bytes);
    if (peer != call.rank()) {
      const ShmChannel::Peek p = shm_wait_for(call, channel, peer, slot, round, "data");
      shm_check_peer(call, p, peer, bytes);
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
