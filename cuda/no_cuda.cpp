// The CUDA probe for builds without nvcc: no device, and the reason says so.
#include "cuda/cuda_runtime.hpp"

namespace antdt::cuda {

int device_count() noexcept { return 0; }

std::string unavailable_reason() { return "built without CUDA"; }

}  // namespace antdt::cuda
