#include "cuda/staging_engine.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/reduce_kernels.hpp"

namespace antdt::cuda {

CudaCopyEngine::CudaCopyEngine(std::size_t slots, std::size_t slot_bytes) : slot_bytes_(slot_bytes) {
  ANTDT_CHECK_ARG(slots >= 1 && slot_bytes >= 1, "CudaCopyEngine needs at least one slot of at least one byte (got ",
                  slots, " slots of ", slot_bytes, " bytes)");
  pinned_.reserve(slots);
  slot_events_.reserve(slots);
  for (std::size_t s = 0; s < slots; ++s) {
    pinned_.emplace_back(slot_bytes);
    slot_events_.emplace_back(Event::Kind::sync);
  }
}

void CudaCopyEngine::bind(void* device, std::size_t bytes, DataType dtype, std::optional<ReduceOp> op) {
  check_dtype(dtype);
  if (op) check_op(*op);
  ANTDT_CHECK_ARG(device != nullptr || bytes == 0, "CudaCopyEngine::bind: null device buffer of ", bytes, " bytes");
  ANTDT_CHECK_ARG(!op || bytes % dtype_size(dtype) == 0, "CudaCopyEngine::bind: ", bytes,
                  " bytes is not a whole number of ", dtype_name(dtype), " elements");
  device_ = static_cast<std::byte*>(device);
  device_bytes_ = bytes;
  dtype_ = dtype;
  op_ = op;
  if (op_ && scratch_.empty()) {
    scratch_.reserve(pinned_.size());
    for (std::size_t s = 0; s < pinned_.size(); ++s) scratch_.emplace_back(slot_bytes_);
  }
}

void CudaCopyEngine::order_after(cudaStream_t caller) {
  order_event_.record(caller);
  order_event_.make_wait(stream());
}

void CudaCopyEngine::complete_on(cudaStream_t caller) {
  order_event_.record(stream());
  order_event_.make_wait(caller);
}

std::span<std::byte> CudaCopyEngine::slot(std::size_t s) {
  ANTDT_CHECK_ARG(s < pinned_.size(), "staging slot ", s, " out of range (", pinned_.size(), " slots)");
  return pinned_[s].bytes();
}

void CudaCopyEngine::check_range(std::size_t s, std::size_t offset, std::size_t bytes, const char* what) const {
  ANTDT_CHECK_ARG(s < pinned_.size(), what, ": slot ", s, " out of range (", pinned_.size(), " slots)");
  ANTDT_CHECK_ARG(bytes <= slot_bytes_, what, ": ", bytes, " bytes exceed the ", slot_bytes_, "-byte slot");
  ANTDT_CHECK_ARG(offset <= device_bytes_ && bytes <= device_bytes_ - offset, what, ": bytes [", offset, ", ",
                  offset + bytes, ") are outside the bound device range of ", device_bytes_, " bytes");
}

void CudaCopyEngine::start_download(std::size_t s, std::size_t offset, std::size_t bytes) {
  check_range(s, offset, bytes, "staging download");
  check_cuda(cudaMemcpyAsync(pinned_[s].data(), device_ + offset, bytes, cudaMemcpyDeviceToHost, stream()),
             "cudaMemcpyAsync(device -> pinned slot)");
  slot_events_[s].record(stream());
}

void CudaCopyEngine::start_upload(std::size_t s, std::size_t offset, std::size_t bytes) {
  check_range(s, offset, bytes, "staging upload");
  if (op_) {
    const std::size_t element = dtype_size(dtype_);
    ANTDT_CHECK_ARG(offset % element == 0 && bytes % element == 0, "staging upload: bytes [", offset, ", ",
                    offset + bytes, ") do not fall on ", dtype_name(dtype_), " element boundaries");
    check_cuda(cudaMemcpyAsync(scratch_[s].data(), pinned_[s].data(), bytes, cudaMemcpyHostToDevice, stream()),
               "cudaMemcpyAsync(pinned slot -> device scratch)");
    device_reduce(dtype_, *op_, device_ + offset, scratch_[s].data(), bytes / element, stream());
  } else {
    check_cuda(cudaMemcpyAsync(device_ + offset, pinned_[s].data(), bytes, cudaMemcpyHostToDevice, stream()),
               "cudaMemcpyAsync(pinned slot -> device)");
  }
  slot_events_[s].record(stream());
}

bool CudaCopyEngine::slot_done(std::size_t s) {
  ANTDT_CHECK_ARG(s < slot_events_.size(), "staging slot ", s, " out of range (", slot_events_.size(), " slots)");
  return slot_events_[s].query();
}

}  // namespace antdt::cuda
