// RAII owners for CUDA resources: device buffers, pinned host buffers, streams
// and events, plus the current-device guard. Only compiled in CUDA builds
// (code that must also build without CUDA uses cuda/memory_type.hpp).
//
// Waits never block without a bound: Stream::wait_for / Event::wait_for poll
// (cudaStreamQuery / cudaEventQuery) until done or until the timeout passes.
#pragma once

#include "cuda/memory_type.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <thread>

namespace antdt::cuda {

// Makes `device` the calling thread's current device until the end of the
// scope, then restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// The calling thread's current device (cudaGetDevice).
int current_device();

// Device memory from cudaMalloc on the current device. Empty when bytes == 0.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);

  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
  int device_ = -1;
};

// Page-locked host memory from cudaHostAlloc (portable: usable with every
// device). Readable and writable by the host; DMA engines copy it at full
// speed. Empty when bytes == 0.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);

  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() const noexcept { return {data_.get(), size_}; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

// A stream on the current device that does not synchronize with the legacy
// default stream (cudaStreamNonBlocking), so library work never serializes
// behind unrelated work on stream 0.
class Stream {
 public:
  Stream();

  cudaStream_t get() const noexcept { return stream_.get(); }
  // True when all work enqueued so far has finished; throws if it failed.
  bool query() const;
  // Polls until all enqueued work has finished (true) or `timeout` has passed
  // (false). Throws if the work failed.
  bool wait_for(std::chrono::nanoseconds timeout) const;

 private:
  struct Destroy {
    void operator()(cudaStream_t s) const noexcept;
  };
  std::unique_ptr<CUstream_st, Destroy> stream_;
};

class Event {
 public:
  enum class Kind {
    sync,    // ordering and completion only (cudaEventDisableTiming: cheaper to record and query)
    timing,  // also gives elapsed time between two recorded events
  };
  explicit Event(Kind kind = Kind::sync);

  cudaEvent_t get() const noexcept { return event_.get(); }
  Kind kind() const noexcept { return kind_; }
  // Captures the work enqueued on `stream` so far.
  void record(cudaStream_t stream);
  // Makes `stream` wait (on the device, not the host) for the recorded work.
  void make_wait(cudaStream_t stream) const;
  // True when the recorded work has finished (or nothing was recorded).
  bool query() const;
  bool wait_for(std::chrono::nanoseconds timeout) const;

  // Seconds between two completed timing events (cudaEventElapsedTime).
  static double elapsed_seconds(const Event& begin, const Event& end);

 private:
  struct Destroy {
    void operator()(cudaEvent_t e) const noexcept;
  };
  std::unique_ptr<CUevent_st, Destroy> event_;
  Kind kind_;
};

// Polls `done()` (true when finished) until it returns true or `timeout`
// passes: spins briefly, then yields, then sleeps in short steps so a long
// wait does not burn a core. Returns whether it finished.
template <class Done>
bool poll_until_done(Done&& done, std::chrono::nanoseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (unsigned attempt = 0;; ++attempt) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    if (attempt < 64) continue;
    if (attempt < 1024) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace antdt::cuda
