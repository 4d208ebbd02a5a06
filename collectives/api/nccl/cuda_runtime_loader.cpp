#include "cuda_runtime_loader.hpp"

#include <dlfcn.h>

#include <initializer_list>
#include <type_traits>

namespace antdt_nccl {

const CudaRuntime& cuda_runtime() {
  static const CudaRuntime rt = [] {
    CudaRuntime r;
    void* lib = nullptr;
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) return r;
    auto load = [lib](auto& fn, const char* symbol) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol)); };
    load(r.GetDeviceCount, "cudaGetDeviceCount");
    load(r.Malloc, "cudaMalloc");
    load(r.Free, "cudaFree");
    load(r.EventCreate, "cudaEventCreate");
    load(r.EventRecord, "cudaEventRecord");
    load(r.EventQuery, "cudaEventQuery");
    load(r.EventElapsedTime, "cudaEventElapsedTime");
    load(r.EventDestroy, "cudaEventDestroy");
    load(r.Memcpy, "cudaMemcpy");
    load(r.DeviceSynchronize, "cudaDeviceSynchronize");
    int n = 0;
    r.has_device = r.GetDeviceCount != nullptr && r.Malloc != nullptr && r.Free != nullptr && r.EventCreate != nullptr &&
                   r.EventRecord != nullptr && r.EventQuery != nullptr && r.EventElapsedTime != nullptr &&
                   r.EventDestroy != nullptr && r.Memcpy != nullptr && r.DeviceSynchronize != nullptr &&
                   r.GetDeviceCount(&n) == 0 && n > 0;
    return r;
  }();
  return rt;
}

}  // namespace antdt_nccl
