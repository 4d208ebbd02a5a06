// Pipelined ring AllReduce.
//
// n ranks, buffer split in n segments (sizes differ by at most one element).
// Steps s = 0 .. 2(n-1)-1; at step s rank r sends segment (r-s) mod n to its
// right neighbour and receives segment (r-s-1) mod n from its left. Steps
// 0..n-2 reduce (reduce-scatter: rank r ends owning segment r+1); steps
// n-1..2n-3 copy (allgather). Each segment is cut into chunks; the chunk
// received at step s is exactly what is sent at step s+1, so it is forwarded
// as soon as it is reduced — transfers overlap reductions. Messages between two
// ranks match in send order, and both sides walk (step, chunk) in the same
// lexicographic order, so one tag serves the whole call.
//
// Cost: 2(n-1)/n * bytes sent and received per rank, (n-1)/n * bytes reduced.
#include "collectives/algorithms.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstring>

namespace antdt::coll {
namespace {

// How many reduce-scatter chunks may be in flight (receive slots in scratch).
constexpr std::size_t kReceiveSlots = 4;
// How many allgather receives (straight into the user buffer) may be posted ahead.
constexpr std::size_t kAllgatherWindow = 8;

// The ring's chunk geometry: the tensor's `count` elements cut into n
// segments (one per ring position, sizes differing by at most one), each
// segment cut into chunks of at most chunk_elems, the unit of one message.
struct RingChunks {
  std::size_t n, count, esize, chunk_elems;

  std::size_t seg_begin(std::size_t seg) const { return count / n * seg + std::min(seg, count % n); }
  std::size_t seg_elems(std::size_t seg) const { return count / n + (seg < count % n ? 1 : 0); }
  // Every segment has at least one chunk (possibly empty): the message stream
  // is the same whatever the count, which keeps mismatches detectable.
  std::size_t chunks(std::size_t seg) const { return std::max<std::size_t>(1, (seg_elems(seg) + chunk_elems - 1) / chunk_elems); }
  std::size_t chunk_begin(std::size_t seg, std::size_t c) const {
    return seg_begin(seg) + std::min(seg_elems(seg), c * chunk_elems);
  }
  std::size_t chunk_elems_of(std::size_t seg, std::size_t c) const {
    std::size_t first = std::min(seg_elems(seg), c * chunk_elems);
    return std::min(seg_elems(seg), first + chunk_elems) - first;
  }
};

// A position in the (step, chunk) walk.
struct Cursor {
  std::size_t step = 0, chunk = 0, index = 0;  // index: position in the walk
};

}  // namespace

void allreduce_ring(Call& call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                    ReduceOp op, std::span<const int> members) {
  CallMemory& memory = call.memory();
  // The ring runs over `members` (all ranks when empty), in that order.
  const std::size_t n = members.empty() ? static_cast<std::size_t>(call.size()) : members.size();
  std::size_t r = static_cast<std::size_t>(call.rank());
  if (!members.empty()) {
    auto me = std::find(members.begin(), members.end(), call.rank());
    ANTDT_ASSERT(me != members.end());
    r = static_cast<std::size_t>(me - members.begin());
  }
  if (n == 1) {
    if (send != recv) memory.copy(recv, send, count * dtype_size(dtype));
    return;
  }
  auto rank_at = [&](std::size_t position) {
    return members.empty() ? static_cast<int>(position) : members[position];
  };
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk_bytes = std::max<std::size_t>(esize, call.config().chunk_bytes);
  const RingChunks ring{n, count, esize, std::max<std::size_t>(1, chunk_bytes / esize)};
  const int right = rank_at((r + 1) % n);
  const int left = rank_at((r + n - 1) % n);
  const std::size_t steps = 2 * (n - 1);
  auto send_seg = [&](std::size_t s) { return (r + n * 2 - s % n) % n; };  // (r - s) mod n
  auto recv_seg = [&](std::size_t s) { return (r + n * 2 - s % n - 1) % n; };

  // Operation numbering in the call's pool: receives first, then sends.
  std::size_t total_recvs = 0;
  for (std::size_t s = 0; s < steps; ++s) total_recvs += ring.chunks(recv_seg(s));
  auto send_index = [&](std::size_t step, std::size_t chunk) {
    // Sends at step s carry the chunks of send_seg(s); number them in walk order.
    std::size_t idx = total_recvs;
    for (std::size_t t = 0; t < step; ++t) idx += ring.chunks(send_seg(t));
    return idx + chunk;
  };

  const std::size_t slot_elems = std::min(ring.chunk_elems, ring.seg_elems(0));
  auto slots = memory.scratch(call, kReceiveSlots * std::max<std::size_t>(1, slot_elems) * esize);
  auto bytes_at = [&](const std::byte* base, std::size_t elem, std::size_t elems) {
    return std::span(base + elem * esize, elems * esize);
  };
  auto mut_bytes_at = [&](std::byte* base, std::size_t elem, std::size_t elems) {
    return std::span(base + elem * esize, elems * esize);
  };

  // Step 0 sends come straight from the caller's input.
  {
    const std::size_t seg = send_seg(0);
    for (std::size_t c = 0; c < ring.chunks(seg); ++c)
      call.send(send_index(0, c), right, bytes_at(send, ring.chunk_begin(seg, c), ring.chunk_elems_of(seg, c)));
  }

  Cursor posted, processed;
  auto advance = [&](Cursor& cur) {
    ++cur.index;
    if (++cur.chunk == ring.chunks(recv_seg(cur.step))) {
      cur.chunk = 0;
      ++cur.step;
    }
  };
  bool reduce_sends_drained = false;

  auto post_receives = [&] {
    while (posted.index < total_recvs) {
      const std::size_t seg = recv_seg(posted.step);
      const std::size_t begin = ring.chunk_begin(seg, posted.chunk);
      const std::size_t elems = ring.chunk_elems_of(seg, posted.chunk);
      if (posted.step < n - 1) {
        if (posted.index - processed.index >= kReceiveSlots) return;
        auto slot = slots.subspan((posted.index % kReceiveSlots) * slot_elems * esize, elems * esize);
        call.recv(posted.index, left, slot);
      } else {
        if (posted.index - processed.index >= kAllgatherWindow) return;
        // Allgather receives overwrite regions that reduce-scatter sends read
        // from; those sends must have finished first. They are all posted once
        // every reduce-scatter chunk has been processed.
        if (!reduce_sends_drained) {
          if (processed.step < n - 1) return;
          for (std::size_t s = 0; s < n - 1; ++s)
            for (std::size_t c = 0; c < ring.chunks(send_seg(s)); ++c) call.wait(send_index(s, c));
          reduce_sends_drained = true;
        }
        call.recv(posted.index, left, mut_bytes_at(recv, begin, elems));
      }
      advance(posted);
    }
  };

  while (processed.index < total_recvs) {
    post_receives();
    call.wait(processed.index);
    const std::size_t s = processed.step;
    const std::size_t seg = recv_seg(s);
    const std::size_t begin = ring.chunk_begin(seg, processed.chunk);
    const std::size_t elems = ring.chunk_elems_of(seg, processed.chunk);
    auto dst = mut_bytes_at(recv, begin, elems);
    if (s < n - 1) {
      auto slot = slots.subspan((processed.index % kReceiveSlots) * slot_elems * esize, elems * esize);
      memory.reduce_into(dtype, op, dst, bytes_at(send, begin, elems), slot);
      if (s == n - 2 && op == ReduceOp::avg) memory.finish_avg(dtype, dst, n);
      memory.settle();
    }
    if (s + 1 < steps) call.send(send_index(s + 1, processed.chunk), right, dst);
    advance(processed);
  }
  call.wait_all();
}

}  // namespace antdt::coll
