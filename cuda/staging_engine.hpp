// The CUDA CopyEngine behind the staging pipeline (cuda/staging.hpp): pinned
// host slots, copies with cudaMemcpyAsync on the engine's own stream, one
// event per slot to know when a slot is done. Uploads can reduce into the
// target (copy to a device scratch slot, then device_reduce). Only compiled
// in CUDA builds.
//
// One engine moves data in one direction at a time; a rank that sends and
// receives at once uses two engines, whose streams then overlap D2H and H2D
// copies on the GPU's separate copy engines.
#pragma once

#include "cuda/device_memory.hpp"
#include "cuda/staging.hpp"

#include <antdt/comm.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace antdt::cuda {

class CudaCopyEngine final : public CopyEngine {
 public:
  // `slots` pinned buffers of `slot_bytes` each, on the current device. The
  // slots are meant to be reused across transfers (pinning memory is slow).
  CudaCopyEngine(std::size_t slots, std::size_t slot_bytes);

  // The device range that chunk offsets refer to. With `op`, uploads reduce
  // into it as `dtype` elements (avg reduces as sum); without, they copy.
  // `device` must be device-accessible memory of `bytes` bytes.
  void bind(void* device, std::size_t bytes, DataType dtype, std::optional<ReduceOp> op = std::nullopt);

  // Orders this engine's later copies after the work enqueued on `caller` so
  // far (device-side wait, the host does not block).
  void order_after(cudaStream_t caller);
  // Makes `caller` wait, on the device, for everything this engine enqueued.
  void complete_on(cudaStream_t caller);

  cudaStream_t stream() const noexcept { return stream_.get(); }

  std::size_t slot_count() const override { return pinned_.size(); }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  std::span<std::byte> slot(std::size_t s) override;
  void start_download(std::size_t s, std::size_t offset, std::size_t bytes) override;
  void start_upload(std::size_t s, std::size_t offset, std::size_t bytes) override;
  bool slot_done(std::size_t s) override;

 private:
  void check_range(std::size_t s, std::size_t offset, std::size_t bytes, const char* what) const;

  std::size_t slot_bytes_;
  std::vector<PinnedBuffer> pinned_;
  std::vector<DeviceBuffer> scratch_;  // allocated on the first reducing upload
  std::vector<Event> slot_events_;
  Stream stream_;
  Event order_event_;
  std::byte* device_ = nullptr;
  std::size_t device_bytes_ = 0;
  DataType dtype_ = DataType::u8;
  std::optional<ReduceOp> op_;
};

}  // namespace antdt::cuda
