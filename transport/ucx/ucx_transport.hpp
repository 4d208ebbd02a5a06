// The UCX transport (UCP tag matching): shared memory and TCP here, RDMA where
// UCX finds it. One UCP context and worker per transport, so ranks as threads
// of one process work as well as one rank per process.
//
// Wire layout of a message, one of two forms chosen by the sender from the
// payload's size (docs/benchmarks.md#network-path):
//  * single: a 24-byte prefix (which form), the 32-byte MessageHeader, the
//    payload: one message, sent and received as an IOV, for payloads below
//    Config::ucx_split_bytes (ANTDT_UCX_SPLIT_BYTES, 64 KiB by default);
//  * split: a header half (the prefix, saying how long the payload is and
//    its per-destination split number, and the MessageHeader) under the user
//    tag, then the payload half, contiguous, as a message of its own whose tag
//    has bit 62 set and the split number in place of the user tag. UCX 1.13
//    copies IOV messages in fragments; a contiguous one goes by zero-copy
//    rendezvous (over TCP here: 3.4 against 0.9 GB/s for 4 MiB).
// A receive is posted once for either form, into [prefix, header, buffer]; a
// header half fills the first two entries. The prefix tells the forms apart
// (UCX 1.13.1 did not report the message's tag to the receive's callback here, and
// raw users need not fill in the MessageHeader). After a header half the
// receive goes on with its payload half's tag, unique per sender and
// destination, so pairs cannot mix whatever was cancelled or truncated before.
// A payload too long for the buffer fails the receive as truncated at once and
// is still taken (into 0 bytes), so the sender's rendezvous ends and nothing is
// left over for a later receive. A receive whose header half has arrived is
// matched: cancel() waits for its payload half (the sender posts both
// together), as for any matched receive, so its buffer is never left to UCX.
// UCP tags: bit 63 clear, user tag in bits 20..59, source rank in bits 0..19;
// bit 63 set marks control (abort) messages, for which one wildcard-source
// receive is always posted.
//
// Device payloads (post_send_device): where UCX lists CUDA among its memory
// types (a build with cuda_copy / cuda_ipc / gdr_copy), a device buffer is
// handed to UCX as one contiguous buffer with memory type CUDA, without the
// header (an IOV may not mix memory types), under tag bit 61, so it matches
// only a receive posted with post_recv_device.
//
// Threading: the thread that waits drives the worker. abort() may come from any
// thread: it records the abort, and whoever holds the worker next sends the
// control messages (ucp_worker_signal wakes a thread blocked in wait()).
//
// Waiting: busy polling, or blocking in poll() on the worker's event fd
// (UCP_FEATURE_WAKEUP) in slices of at most 100 ms, per Config::progress.
//
// Failures: endpoints use UCP_ERR_HANDLING_MODE_PEER; a failed peer's pending
// operations fail with "peer rank N failed: <UCX status>". UCX 1.13 leaves its
// shared-memory transports out of such endpoints unless UCX_POSIX_ERROR_HANDLING
// and UCX_SYSV_ERROR_HANDLING are "y", so the first transport created sets both
// to "y" in the environment unless the user set them, and UCX_KEEPALIVE_INTERVAL
// to 2s (UCX's 20 s would leave a dead rank unnoticed that long). Over TCP
// each transport asks UCX for 64 KiB send segments (ucx_transport.cpp: messages
// below the split go in one copy, not by rendezvous) unless the user set them.
//
// Cancel: a receive not yet matched ends at once. UCX cannot take back a send;
// one the peer does not receive within 5 s (200 ms after an abort) is ended by
// closing the endpoint to that peer, which fails every later operation with it.
//
// Creation connects every endpoint (a handshake with each peer), so all ranks
// of the group must create their transports at about the same time.
#pragma once

#include "core/bootstrap.hpp"
#include "core/config.hpp"
#include "transport/transport.hpp"

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace antdt::transport {

struct UcxOptions {
  // Tests: accept device payloads (Transport::device_payloads) and hand them
  // to UCX as host memory, so the bare-message protocol of the direct GPU
  // path runs over UCX builds without CUDA support, with host buffers.
  bool device_payloads_in_host_memory = false;
  // Tests: while this is set (true), the payload halves of split messages wait
  // in the sender and only their header halves go out, so a receiver can be
  // caught between the two (cancel, truncation, a peer lost in between).
  std::shared_ptr<std::atomic<bool>> hold_split_payloads;
  // Tests: whether rank `from`'s abort message (its own, or one it relays)
  // is sent to rank `to` (unset: to every peer), as though the sends to the
  // others had failed.
  std::function<bool(int from, int to)> abort_reaches;
};

// Exchanges worker addresses through `boot` (one allgather, so every rank of
// the group must call this) and creates an endpoint to every rank, itself included.
std::unique_ptr<Transport> make_ucx_transport(Bootstrap& boot, const Config& cfg, const UcxOptions& options = {});

// What UCX chose for the endpoint to `peer` (ucp_ep_print_info's text: its
// lanes and, per operation, the byte ranges of each protocol: eager short,
// bcopy, zcopy, rendezvous). For tests and diagnostics; `transport` must come
// from make_ucx_transport.
std::string ucx_endpoint_info(Transport& transport, int peer);

// The control message a rank sends to its peers when it aborts. Exposed for
// tests: decode checks lengths, magic and version, and rejects anything else.
std::vector<std::byte> encode_abort_message(const AbortInfo& info);
// nullopt for bytes that are not a well-formed abort message from a rank in [0, size).
std::optional<AbortInfo> decode_abort_message(std::span<const std::byte> bytes, int size);
// The control message a closing rank sends each live peer once everything it
// sent was flushed: the peer fails what still waits for it ("peer rank N
// failed: it closed its transport") and logs its departure at info, not as a
// fault. decode: the origin, or nullopt for anything else.
std::vector<std::byte> encode_leave_message(int origin_rank);
std::optional<int> decode_leave_message(std::span<const std::byte> bytes, int size);

}  // namespace antdt::transport
