// The device backend the collectives on device buffers use (the CUDA one, or
// a test's fake), and what it tells a call: whether a buffer is device memory,
// so the call takes a device path, and, for host buffers passed with a
// stream, the bounded wait for the stream's work.
#pragma once

#include "collectives/communicator.hpp"
#include "cuda/device_work.hpp"

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

// Whether p is device memory (null is not).
inline bool on_device(const void* p) { return p != nullptr && backend().is_device(p); }

// The buffer whose device a call's work runs on: a when it is device memory, else b.
inline const void* device_buffer(const void* a, const void* b) { return on_device(a) ? a : b; }

// True when either buffer is device memory: the call takes a device path.
bool is_device_call(const void* a, const void* b);

// Host buffers passed with a stream: waits (bounded) for the stream's work.
void synchronize_host_call(const detail::CommImpl& comm, void* stream, const char* what);

}  // namespace antdt::coll::device
