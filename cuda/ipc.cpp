// CUDA IPC export and mapping (cuda/ipc.hpp). Only compiled in CUDA builds.
#include "cuda/ipc.hpp"

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/memory_type.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

namespace antdt::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == IpcHandle::kCudaHandleBytes);

// cuMemGetAddressRange gives the allocation's base, which the handle is for.
// It is fetched from the driver at run time so the library never links
// libcuda (it must load on machines without a driver).
PFN_cuMemGetAddressRange_v3020 address_range_function() {
  static const PFN_cuMemGetAddressRange_v3020 function = [] {
    void* symbol = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &symbol, 12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      return PFN_cuMemGetAddressRange_v3020{nullptr};
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(symbol);
  }();
  return function;
}

// ---------------------------------------------------------------------------
// Opened allocations, shared by every mapping of the same allocation on the
// same device: CUDA maps an allocation once per context.
// ---------------------------------------------------------------------------
using HandleBytes = std::array<std::byte, IpcHandle::kCudaHandleBytes>;
using CacheKey = std::pair<int, HandleBytes>;

struct OpenedAllocation {
  void* base = nullptr;
  int device = -1;
  CacheKey key;
};

struct MappingCache {
  // Recursive: if creating the shared_ptr in open_allocation() fails, its
  // deleter (close_allocation) runs while open_allocation holds the lock.
  std::recursive_mutex mu;
  std::map<CacheKey, std::weak_ptr<OpenedAllocation>> open;
};

// Never destroyed: a mapping released during static destruction still finds it.
MappingCache& mapping_cache() {
  alignas(MappingCache) static unsigned char storage[sizeof(MappingCache)];
  static MappingCache* const cache = std::construct_at(reinterpret_cast<MappingCache*>(storage));
  return *cache;
}

// The last mapping of an allocation closes it, with the cache locked so a
// concurrent open of the same handle waits until the close is done.
void close_allocation(OpenedAllocation* opened) noexcept {
  MappingCache& cache = mapping_cache();
  {
    std::lock_guard lock(cache.mu);
    int previous = -1;
    const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
    if (opened->device != previous) static_cast<void>(cudaSetDevice(opened->device));
    static_cast<void>(cudaIpcCloseMemHandle(opened->base));
    if (have_previous && opened->device != previous) static_cast<void>(cudaSetDevice(previous));
    const auto it = cache.open.find(opened->key);
    if (it != cache.open.end() && it->second.expired()) cache.open.erase(it);
  }
  std::default_delete<OpenedAllocation>()(opened);
}

std::shared_ptr<OpenedAllocation> open_allocation(const HandleBytes& bytes) {
  const int device = current_device();
  const CacheKey key{device, bytes};
  MappingCache& cache = mapping_cache();
  // An expired entry whose close has not run yet: wait for it (microseconds),
  // since opening an allocation that is still mapped fails.
  for (unsigned attempt = 0;; ++attempt) {
    {
      std::lock_guard lock(cache.mu);
      const auto it = cache.open.find(key);
      if (it == cache.open.end()) {
        cudaIpcMemHandle_t handle;
        std::memcpy(&handle, bytes.data(), sizeof handle);
        void* base = nullptr;
        check_cuda(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
        auto owned = std::make_unique<OpenedAllocation>(OpenedAllocation{base, device, key});
        std::shared_ptr<OpenedAllocation> opened(owned.release(), close_allocation);
        cache.open.emplace(key, opened);
        return opened;
      }
      if (auto alive = it->second.lock()) return alive;
    }
    ANTDT_ASSERT(attempt < 1'000'000);
    std::this_thread::yield();
  }
}

}  // namespace

IpcHandle ipc_export(const void* p, std::size_t bytes) {
  ANTDT_CHECK_ARG(p != nullptr, "CUDA IPC export of a null pointer (", bytes, " bytes)");
  if (!available()) raise<UnsupportedError>("CUDA IPC export: ", unavailable_reason());
  const MemoryType type = memory_type_of(p);
  ANTDT_CHECK_ARG(type == MemoryType::device, "CUDA IPC export: ", p, " is ", memory_type_name(type),
                  " memory; only device memory from cudaMalloc can be exported");
  const int device = device_of(p);
  const ScopedDevice on(device);

  const PFN_cuMemGetAddressRange_v3020 address_range = address_range_function();
  if (address_range == nullptr) {
    raise<UnsupportedError>("CUDA IPC export: the driver does not provide cuMemGetAddressRange");
  }
  CUdeviceptr base = 0;
  std::size_t allocation_bytes = 0;
  const CUresult found = address_range(&base, &allocation_bytes, reinterpret_cast<CUdeviceptr>(p));
  ANTDT_CHECK_ARG(found == CUDA_SUCCESS, "CUDA IPC export: cuMemGetAddressRange(", p, ") failed with CUresult ",
                  static_cast<int>(found));
  const std::uint64_t offset = reinterpret_cast<std::uintptr_t>(p) - base;
  ANTDT_CHECK_ARG(bytes <= allocation_bytes - offset, "CUDA IPC export: [", p, ", +", bytes,
                  ") runs past the end of its allocation (", allocation_bytes - offset, " bytes left)");

  cudaIpcMemHandle_t handle;
  check_cuda(cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)), "cudaIpcGetMemHandle");
  IpcHandle h;
  std::memcpy(h.cuda_handle.data(), &handle, sizeof handle);
  h.offset = offset;
  h.bytes = bytes;
  h.exporter_address = reinterpret_cast<std::uintptr_t>(p);
  h.exporter = this_process();
  h.device = device;
  return h;
}

IpcMapping::IpcMapping(const IpcHandle& handle) : bytes_(handle.bytes) {
  if (handle.from_this_process()) {
    data_ = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(handle.exporter_address));
    return;
  }
  if (!available()) raise<UnsupportedError>("CUDA IPC mapping: ", unavailable_reason());
  std::shared_ptr<OpenedAllocation> opened = open_allocation(handle.cuda_handle);
  data_ = static_cast<std::byte*>(opened->base) + handle.offset;
  allocation_ = std::move(opened);
}

}  // namespace antdt::cuda
