// Collectives on device buffers (docs/gpu.md#device-buffers-in-the-collectives).
//
// The collective entry points (collectives.cpp) check arguments as for host
// buffers, then hand a call with a device buffer to the functions here, which
// run it through one of two paths:
//  - staged: device data moves through pinned host slots and the host
//    algorithms run on them (elementwise collectives pipelined segment by
//    segment; the others staged whole), so it works over every transport;
//  - ipc (every collective, ranks on one node): ranks map each other's
//    buffers with CUDA IPC and copy or reduce straight from them;
//  - direct (every collective, transports that move device memory: UCX with
//    CUDA support): the host algorithm on the device buffers, every payload
//    handed to the transport in device memory, copies and reductions on the
//    device.
// Both are ordered after the caller's stream and make it wait for the result
// (device-side events); the host waits they need are bounded by ANTDT_TIMEOUT_MS.
//
// Everything goes through cuda::DeviceBackend, so the same code runs on a fake
// device in the unit tests.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

namespace antdt::coll {

// Stream-taking entry points (the public API's overloads), defined in
// collectives.cpp next to the stream-less ones, which pass a null stream (the
// legacy default stream). With host buffers the stream's pending work is
// waited for first (it may still be writing them).
void allreduce_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                  ReduceOp op, void* stream);
void broadcast_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
                  void* stream);
void reduce_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
               int root, void* stream);
void reduce_scatter_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, void* stream);
void allgather_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype,
                  void* stream);

// The algorithms alone (no argument checks, groups, queue or device
// dispatch), in collectives.cpp: on host bytes for the staged path (`device`
// null), or on device buffers handed to the transport as they are, copied and
// reduced by `device` (the direct path). AllReduce's is run_allreduce
// (collectives/suite.hpp) for host bytes and the ring for the direct path.
void plain_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                     int root, CallMemory* device = nullptr);
void plain_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                  int root, CallMemory* device = nullptr);
void plain_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                          DataType dtype, ReduceOp op, CallMemory* device = nullptr);
void plain_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType dtype, CallMemory* device = nullptr);
void plain_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                    CallMemory* device = nullptr);

}  // namespace antdt::coll

namespace antdt::coll::device {

// The backend in use: the CUDA one, or a test's (ScopedBackend).
cuda::DeviceBackend& backend();

// Tests: routes device detection and device work to `fake` for its lifetime.
class ScopedBackend {
 public:
  explicit ScopedBackend(cuda::DeviceBackend& fake) noexcept;
  ~ScopedBackend();
  ScopedBackend(const ScopedBackend&) = delete;
  ScopedBackend& operator=(const ScopedBackend&) = delete;

 private:
  cuda::DeviceBackend* previous_;
};

// True when either buffer is device memory: the call takes a device path.
bool is_device_call(const void* a, const void* b);

// Host buffers passed with a stream: waits (bounded) for the stream's work.
void synchronize_host_call(const detail::CommImpl& comm, void* stream, const char* what);

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
// partial_allreduce below): runs `host(host_send, host_recv)` on host views of
// the buffers (device buffers are staged whole through pinned slots, host
// buffers passed as they are; recv downloaded first when `read_recv`), then
// uploads recv, ordered on `stream` (nullptr: the legacy default stream). Use
// when is_device_call(send, recv); send may be null (send_bytes 0).
void run_staged(detail::CommImpl& comm, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                bool read_recv, void* stream, const std::function<void(const std::byte*, std::byte*)>& host);

// ---------------------------------------------------------------------------
// Staging driven by the caller's own messages (push-pull,
// docs/pushpull.md#device-buffers): the caller keeps a host copy of a device
// range and posts its sends from, or receives into, that copy; the copy moves
// through the pinned slots one segment (one slot) at a time, so the copy of
// one segment overlaps the messages of another.
// ---------------------------------------------------------------------------
class StagedCall {
 public:
  // Begins the call's device work on the device that owns `buffer` (device
  // memory), ordered after the work enqueued so far on `stream` (a
  // cudaStream_t; nullptr: the legacy default stream). `what` names the call
  // in errors.
  StagedCall(detail::CommImpl& comm, const void* buffer, void* stream, const char* what);
  ~StagedCall();
  StagedCall(const StagedCall&) = delete;
  StagedCall& operator=(const StagedCall&) = delete;

  // host <- device[0, host.size()), segment by segment: once segment k has
  // landed in `host`, arrived(end of segment k) runs (host[0, end) is final)
  // while the copy of segment k + 1 is already running. Returns when every
  // byte has landed.
  void download(const void* device, std::span<std::byte> host, const std::function<void(std::size_t)>& arrived);
  // device[0, host.size()) <- host, segment by segment: before segment k
  // [begin, end) is staged, await(begin, end) returns once host[begin, end)
  // holds its final bytes; the upload of segment k runs while await waits for
  // segment k + 1. The last uploads are left running (finish() orders the
  // caller's stream after them).
  void upload(void* device, std::span<const std::byte> host,
              const std::function<void(std::size_t, std::size_t)>& await);
  // Ends the call: the caller's stream waits, on the device, for everything
  // enqueued by this call (no host wait: results are already in device
  // memory, and downloads have landed).
  void finish();

 private:
  detail::CommImpl& comm_;
  std::unique_ptr<cuda::DeviceWork> work_;
  const char* what_;
};

// Which path the last device collective of each kind on this thread took (tests).
enum class LastPath { none, staged, ipc, direct };
LastPath last_allreduce_path() noexcept;
LastPath last_broadcast_path() noexcept;
LastPath last_reduce_scatter_path() noexcept;
LastPath last_allgather_path() noexcept;
LastPath last_reduce_path() noexcept;
LastPath last_alltoall_path() noexcept;

}  // namespace antdt::coll::device
