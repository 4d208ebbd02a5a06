// Compute time on the GPU for the Monitor: CUDA events recorded around the
// caller's compute on the caller's stream, read back with cudaEventQuery (never
// cudaEventSynchronize), in order, possibly a few steps late. Implements
// telemetry::ComputeClock, so a StepTimer takes it as its device clock.
// Only compiled in CUDA builds.
#pragma once

#include "cuda/device_memory.hpp"
#include "cuda/interval_ring.hpp"
#include "collectives/telemetry/step_timer.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace antdt::telemetry {

class EventTimer final : public telemetry::ComputeClock {
 public:
  // Events are created on the current device; record on streams of that device.
  explicit EventTimer(std::size_t initial_pairs = 8);

  // `stream` is a cudaStream_t (null: the legacy default stream).
  void record_compute_begin(void* stream) override;
  void record_compute_end(void* stream) override;
  // The oldest unread interval's seconds; false while it is still running.
  bool try_read(double& seconds) override;

  int device() const noexcept { return device_; }
  std::size_t in_flight() const noexcept { return ring_.in_flight(); }
  std::size_t capacity() const noexcept { return ring_.capacity(); }
  std::uint64_t dropped() const noexcept { return ring_.dropped(); }

 private:
  class EventPair {
   public:
    explicit EventPair(int device);
    void record_begin(cudaStream_t stream) { begin_.record(stream); }
    void record_end(cudaStream_t stream) { end_.record(stream); }
    bool try_elapsed(double& seconds);

   private:
    cuda::Event begin_;
    cuda::Event end_;
  };

  int device_;
  cuda::IntervalRing<EventPair, int, cudaStream_t> ring_;
};

}  // namespace antdt::telemetry
