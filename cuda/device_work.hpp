// The device operations that the collectives' GPU paths need, behind an
// interface free of CUDA headers. The logic of those paths (which path, how a
// buffer is cut into segments, the IPC protocol and its synchronisation) lives
// in collectives/device/device_collectives.cpp, written against this interface, and
// is tested on machines without a GPU with a fake backend whose "device"
// memory is host memory. cuda/device_work.cpp is the thin CUDA implementation
// (pooled staging engines, one stream per call, the reduction kernels, cached
// IPC mappings); builds without CUDA get a backend that sees no device memory.
#pragma once

#include "cuda/ipc.hpp"
#include "cuda/staging.hpp"

#include <antdt/comm.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace antdt::cuda {

// One collective's device work on one device. Everything is enqueued, in
// call order, on one work stream that was ordered after the caller's stream
// when the work began (nothing here blocks the host but wait()).
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;

  // The staging engine (pinned host slots), bound to the device range
  // [range, range + bytes) for plain copies. Its copies run in order with the
  // other work enqueued here.
  virtual CopyEngine& staging(void* range, std::size_t bytes) = 0;
  // Device memory of at least `bytes` on the work's device for the call's
  // own use (the direct path's receive slots), reused by later calls: its
  // contents are undefined, and it stays valid until the work ends or
  // scratch() is called again.
  virtual std::byte* scratch(std::size_t bytes) = 0;
  // dst <- src, bytes; either side may be device or host memory.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // out = a (op) b elementwise; out may equal a or b. avg reduces as sum.
  virtual void reduce_into(DataType dtype, ReduceOp op, void* out, const void* a, const void* b,
                           std::size_t count) = 0;
  // data /= nranks (after an avg reduced as sum).
  virtual void finish_avg(DataType dtype, void* data, std::size_t count, std::size_t nranks) = 0;
  // Waits on the host until everything enqueued so far has finished, at most
  // `timeout`; false when it had not. Throws when the device work failed.
  virtual bool wait(std::chrono::nanoseconds timeout) = 0;
  // Makes the caller's stream wait, on the device, for everything enqueued so
  // far; the host does not block.
  virtual void complete() = 0;

  // Exports [p, p + bytes) for peers on this node; nullopt (with the reason
  // in *why) when this memory cannot be exported (not from cudaMalloc, IPC
  // unsupported).
  virtual std::optional<IpcHandle> ipc_export(const void* p, std::size_t bytes, std::string* why) = 0;
  // A peer's exported range in this process. Mappings are cached across
  // calls (opening one is slow) and stay valid at least as long as this work.
  virtual std::byte* ipc_map(const IpcHandle& handle) = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Whether `p` is device memory (a collective with such a buffer takes a device path).
  virtual bool is_device(const void* p) = 0;
  // Starts a collective's device work on the device that owns `buffer`,
  // ordered after the work enqueued so far on `stream` (a cudaStream_t;
  // nullptr is the legacy default stream).
  virtual std::unique_ptr<DeviceWork> begin(const void* buffer, void* stream) = 0;
  // Waits on the host for the work enqueued on `stream` so far, at most
  // `timeout`; false when it had not finished. (Host buffers passed with a
  // stream: the stream's work may still be writing them.)
  virtual bool synchronize(void* stream, std::chrono::nanoseconds timeout) = 0;
};

// The CUDA backend; in builds without CUDA (or without a driver) nothing is
// device memory, begin() throws UnsupportedError and synchronize() accepts
// only a null stream.
DeviceBackend& cuda_backend();

// Pinned staging slots per engine, and their size: the segment size of the
// staged path (docs/gpu.md).
inline constexpr std::size_t kStagingSlots = 2;
inline constexpr std::size_t kStagingSlotBytes = std::size_t{8} << 20;

}  // namespace antdt::cuda
