// The direct path of the collectives on device buffers (docs/gpu.md, "Direct
// path"): the host algorithm runs on the device buffers, every payload is
// handed to the transport in device memory (UCX with CUDA support), and the
// copies and reductions run on the device.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/call.hpp"
#include "collectives/communicator.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <span>

namespace antdt::coll::device {

// The direct path's memory: the device buffers, scratch and kernels of the
// call's work; what was copied or reduced goes to the transport only once the
// host has seen the work finish (settle), since the transport reads device
// memory outside the work stream's order.
class DeviceCallMemory final : public CallMemory {
 public:
  DeviceCallMemory(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what)
      : work_(work), comm_(comm), what_(what) {}
  std::span<std::byte> scratch(Call&, std::size_t bytes) override { return {work_.scratch(bytes), bytes}; }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override { work_.copy(dst, src, bytes); }
  void reduce_into(DataType dtype, ReduceOp op, std::span<std::byte> dst, std::span<const std::byte> a,
                   std::span<const std::byte> b) override;
  void finish_avg(DataType dtype, std::span<std::byte> data, std::size_t nranks) override;
  void settle() override;

 private:
  cuda::DeviceWork& work_;
  const detail::CommImpl& comm_;
  const char* what_;
};

// AllReduce on the direct path: the host ring on the device buffers. The
// other collectives' direct path is their plain_* algorithm given `memory`.
void direct_allreduce(detail::CommImpl& comm, CallMemory& memory, const void* send, void* recv, std::size_t count,
                      DataType dtype, ReduceOp op);

}  // namespace antdt::coll::device
