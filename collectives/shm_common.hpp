// What the shared-memory AllReduces (allreduce_shm.cpp: the mailbox of small
// messages; allreduce_shm_bulk.cpp: the staging area of large ones) share:
// setting a communicator's channel up inside a call, and waiting for a peer's
// slot without burning the core an oversubscribed peer needs.
#pragma once

#include "collectives/call.hpp"
#include "core/shm_channel.hpp"

#include <cstdint>

namespace antdt::coll {

// The channel's shape for `area` under the communicator's configuration.
ShmChannel::SegmentShape shm_segment_shape(const Call& call, detail::ShmArea area);

// Sets the communicator's channel for `area` up on first use, as part of
// `call` (every rank must call it in the same call), and says whether it is
// usable. Set-up, through the transport: every rank sends rank 0 its node key;
// rank 0 creates the segment when all keys are equal and sends its name; every
// rank maps it and reports; rank 0 sends the verdict and removes the name. A
// communicator whose ranks are not all on one node (or that cannot map the
// segment) remembers that and uses the transport algorithms.
bool shm_ready(Call& call, detail::ShmArea area);

// Waits until `peer` published `slot` at `stamp` or later: polls, then polls
// yielding the core (ANTDT_SPIN_US), then sleeps on the slot's futex, checking
// for aborts, for a peer that announced another call at this sequence number
// (MismatchError), for a peer whose process is gone or that the transport
// reports failed (PeerLostError naming its rank, host and pid; asked only
// every few ms of an unanswered wait) and for the deadline (TimeoutError)
// between sleeps.
// `what` names the data awaited in the timeout's message.
ShmChannel::Peek shm_wait_for(Call& call, ShmChannel& channel, int peer, int slot,
                                      std::uint64_t stamp, const char* what);

// Fails the call with MismatchError unless `peek` carries this call's
// signature and `bytes` bytes.
void shm_check_peer(Call& call, const ShmChannel::Peek& peek, int peer, std::size_t bytes);

}  // namespace antdt::coll
