// The UCX transport (UCP tag matching): shared memory and TCP here, RDMA where
// UCX finds it. One UCP context and worker per transport, so ranks as threads
// of one process work as well as one rank per process.
//
// Wire layout of a message: the 32-byte MessageHeader followed by the payload,
// sent and received as a two-entry IOV so neither side copies into a staging
// buffer. UCP tags: bit 63 clear, user tag in bits 20..59, source rank in bits
// 0..19 (receives match the full tag); bit 63 set marks control (abort)
// messages, for which one wildcard-source receive is always posted.
//
// Threading: the thread that waits drives the worker. abort() may come from any
// thread: it records the abort, and whoever holds the worker next sends the
// control messages (ucp_worker_signal wakes a thread blocked in wait()).
#pragma once

#include "core/bootstrap.hpp"
#include "core/config.hpp"
#include "transport/transport.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace antdt::transport {

// Exchanges worker addresses through `boot` (one allgather, so every rank of
// the group must call this) and creates an endpoint to every rank, itself included.
std::unique_ptr<Transport> make_ucx_transport(Bootstrap& boot, const Config& cfg);

// The control message a rank sends to its peers when it aborts. Exposed for
// tests: decode checks lengths, magic and version, and rejects anything else.
std::vector<std::byte> encode_abort_message(const AbortInfo& info);
// nullopt for bytes that are not a well-formed abort message from a rank in [0, size).
std::optional<AbortInfo> decode_abort_message(std::span<const std::byte> bytes, int size);

}  // namespace antdt::transport
