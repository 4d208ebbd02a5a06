// Turns CUDA runtime status codes into antdt errors that name the failing call.
// Only compiled in CUDA builds (it needs the CUDA runtime headers).
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

namespace antdt::cuda {

// Throws UnsupportedError when the machine cannot run CUDA code at all (no
// driver, no device, no kernel image for this GPU), InvalidArgument for invalid
// values (a bad stream or pointer), and InternalError otherwise.
[[noreturn]] void raise_cuda_error(cudaError_t status, std::string_view call);

inline void check_cuda(cudaError_t status, std::string_view call) {
  if (status != cudaSuccess) raise_cuda_error(status, call);
}

}  // namespace antdt::cuda
