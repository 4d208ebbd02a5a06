// The few CUDA runtime calls the shim needs, found with dlopen when first used,
// so the shim neither links libcudart nor fails where there is no driver:
// available() is false then and callers fall back (host memory, no timing).
#pragma once

namespace antdt_nccl {

struct CudaRuntime {
  int (*GetDeviceCount)(int*) = nullptr;
  int (*Malloc)(void**, unsigned long) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*EventCreate)(void**) = nullptr;
  int (*EventRecord)(void*, void*) = nullptr;
  int (*EventQuery)(void*) = nullptr;
  int (*EventElapsedTime)(float*, void*, void*) = nullptr;
  int (*EventDestroy)(void*) = nullptr;
  int (*Memcpy)(void*, const void*, unsigned long, int) = nullptr;  // kind: 1 host->device, 2 device->host
  int (*DeviceSynchronize)() = nullptr;
  bool has_device = false;  // the runtime loaded and sees at least one device
};

// Loaded once; has_device false when libcudart or a device is missing.
const CudaRuntime& cuda_runtime();

}  // namespace antdt_nccl
