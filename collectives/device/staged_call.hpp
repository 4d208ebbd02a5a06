// Staging driven by the caller's own messages (push-pull,
// docs/pushpull.md#device-buffers): the caller keeps a host copy of a device
// range and posts its sends from, or receives into, that copy; the copy moves
// through the pinned slots one segment (one slot) at a time, so the copy of
// one segment overlaps the messages of another.
#pragma once

#include "collectives/communicator.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

namespace antdt::coll::device {

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

}  // namespace antdt::coll::device
