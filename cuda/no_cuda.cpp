// The CUDA entry points for builds without nvcc: no device (the reason says
// so), every pointer is host memory, NVTX ranges are no-ops.
#include "cuda/cuda_runtime.hpp"
#include "cuda/memory_type.hpp"
#include "cuda/nvtx.hpp"

namespace antdt::cuda {

int device_count() noexcept { return 0; }

std::string unavailable_reason() { return "built without CUDA"; }

MemoryType memory_type_of(const void*) noexcept { return MemoryType::host; }

int device_of(const void*) noexcept { return -1; }

bool nvtx_enabled() noexcept { return false; }

void nvtx_push(const char*) noexcept {}

void nvtx_pop() noexcept {}

}  // namespace antdt::cuda
