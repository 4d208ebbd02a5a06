// Collectives on device buffers (docs/gpu.md#device-buffers-in-the-collectives).
//
// The collective entry points (collectives.cpp) check arguments as for host
// buffers, then hand a call with a device buffer to the functions here, which
// run it through one of three paths:
//  - staged (staged_path.hpp): device data moves through pinned host slots
//    and the host algorithms run on them (elementwise collectives pipelined
//    segment by segment; the others staged whole), so it works over every
//    transport;
//  - ipc (ipc_path.hpp; every collective, ranks on one node): ranks map each
//    other's buffers with CUDA IPC and copy or reduce straight from them;
//  - direct (direct_path.hpp; every collective, transports that move device
//    memory: UCX with CUDA support): the host algorithm on the device
//    buffers, every payload handed to the transport in device memory, copies
//    and reductions on the device.
// The ranks agree on the path from the peer records they exchange
// (path_agreement.hpp, path_choice.hpp). Every path is ordered after the
// caller's stream and makes it wait for the result (device-side events); the
// host waits they need are bounded by ANTDT_TIMEOUT_MS.
//
// Everything goes through cuda::DeviceBackend (backend.hpp), so the same code
// runs on a fake device in the unit tests.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"
#include "collectives/device/backend.hpp"
#include "collectives/device/last_path.hpp"
#include "collectives/device/staged_call.hpp"

#include <cstddef>
#include <functional>
#include <span>

namespace antdt::coll::device {

// backend(), ScopedBackend, is_device_call and synchronize_host_call:
// backend.hpp; StagedCall: staged_call.hpp; LastPath and last_*_path():
// last_path.hpp.

// The device paths (arguments already checked). `stream` is a cudaStream_t
// (nullptr: the legacy default stream).
void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
               void* stream);
void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
               void* stream);
void reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
            int root, void* stream);
void reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                    ReduceOp op, void* stream);
void allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, DataType dtype, void* stream);
void alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, void* stream);
// Partial AllReduce on device buffers: staged whole around the host protocol
// (collectives/partial/partial_allreduce.cpp), on the legacy default stream.
PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts);

// The hook for entry points outside collectives.cpp (push-pull, and
// partial_allreduce above): runs `host(host_send, host_recv)` on host views of
// the buffers (device buffers are staged whole through pinned slots, host
// buffers passed as they are; recv downloaded first when `read_recv`), then
// uploads recv, ordered on `stream` (nullptr: the legacy default stream). Use
// when is_device_call(send, recv); send may be null (send_bytes 0).
void run_staged(detail::CommImpl& comm, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                bool read_recv, void* stream, const std::function<void(const std::byte*, std::byte*)>& host);

}  // namespace antdt::coll::device
