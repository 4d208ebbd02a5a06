#include "cuda/cuda_runtime.hpp"

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"

#include <cuda_runtime_api.h>

namespace antdt::cuda {
namespace {

struct DeviceProbe {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

// The device set is fixed for the life of a process (CUDA reads
// CUDA_VISIBLE_DEVICES once), so the runtime is asked only once.
const DeviceProbe& probe() noexcept {
  static const DeviceProbe result = [] {
    DeviceProbe p;
    p.status = cudaGetDeviceCount(&p.count);
    if (p.status != cudaSuccess) {
      p.count = 0;
      // A failed probe must not leave an error for the next unrelated CUDA call.
      static_cast<void>(cudaGetLastError());
    }
    return p;
  }();
  return result;
}

}  // namespace

int device_count() noexcept { return probe().count; }

std::string unavailable_reason() {
  const DeviceProbe& p = probe();
  if (p.status != cudaSuccess) {
    return cat("cudaGetDeviceCount failed: ", cudaGetErrorName(p.status), " (", cudaGetErrorString(p.status),
               "); no usable CUDA driver or device");
  }
  if (p.count == 0) return "no CUDA device is visible (cudaGetDeviceCount returned 0; check CUDA_VISIBLE_DEVICES)";
  return {};
}

void raise_cuda_error(cudaError_t status, std::string_view call) {
  const std::string message =
      cat(call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      throw UnsupportedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      throw InvalidArgument(message);
    default:
      throw InternalError(message);
  }
}

}  // namespace antdt::cuda
