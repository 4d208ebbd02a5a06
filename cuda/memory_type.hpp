// Where a buffer lives. Usable by code that is compiled without CUDA (no CUDA
// headers here): in builds without CUDA, or on machines without a driver,
// every pointer is host memory.
#pragma once

#include <string_view>

namespace antdt::cuda {

enum class MemoryType {
  host,         // pageable host memory (or any pointer CUDA does not know)
  pinned_host,  // page-locked host memory (cudaHostAlloc / cudaHostRegister)
  device,       // device memory (cudaMalloc, or a CUDA IPC mapping)
  managed,      // unified memory (cudaMallocManaged)
};

constexpr std::string_view memory_type_name(MemoryType t) noexcept {
  switch (t) {
    case MemoryType::host: return "host";
    case MemoryType::pinned_host: return "pinned_host";
    case MemoryType::device: return "device";
    case MemoryType::managed: return "managed";
  }
  return "unknown";
}

// Asks the CUDA runtime (cudaPointerGetAttributes) what `p` points to. Returns
// host for null, for pointers CUDA does not know, and whenever CUDA is not
// usable (built without it, no driver, no device).
MemoryType memory_type_of(const void* p) noexcept;

// The device a device or managed pointer belongs to; -1 for host memory.
int device_of(const void* p) noexcept;

}  // namespace antdt::cuda
