// The CUDA DeviceBackend (cuda/device_work.hpp). Only compiled in CUDA builds.
//
// A call's work runs on the stream of a staging engine taken from a pool (one
// pool per process; engines are created per device on first need and reused,
// since pinning memory is slow): begin() makes that stream wait for the
// caller's stream (an event, device-side), every copy and kernel of the call
// is enqueued on it, and complete() makes the caller's stream wait for it.
#include "cuda/device_work.hpp"

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/memory_type.hpp"
#include "cuda/reduce_kernels.hpp"
#include "cuda/staging_engine.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace antdt::cuda {
namespace {

// ---------------------------------------------------------------------------
// Engine pool: an engine is leased by one call at a time.
// ---------------------------------------------------------------------------
struct PooledEngine {
  int device = -1;
  std::unique_ptr<CudaCopyEngine> engine;
  DeviceBuffer scratch;  // grown on demand (DeviceWork::scratch), kept with the engine
};

class EnginePool {
 public:
  PooledEngine take(int device) {
    {
      std::lock_guard lock(mu_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->device != device) continue;
        PooledEngine found = std::move(*it);
        idle_.erase(it);
        return found;
      }
    }
    // Created outside the lock: cudaHostAlloc takes milliseconds.
    return PooledEngine{device, std::make_unique<CudaCopyEngine>(kStagingSlots, kStagingSlotBytes)};
  }
  void give_back(PooledEngine engine) noexcept {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(engine));
  }

 private:
  std::mutex mu_;
  std::vector<PooledEngine> idle_;
};

EnginePool& engine_pool() {
  static EnginePool* pool = new EnginePool;  // never destroyed: engines may be returned during exit
  return *pool;
}

// ---------------------------------------------------------------------------
// IPC mappings kept open across calls, keyed by the device they were opened
// on (the current one) and the handle's wire bytes.
// ---------------------------------------------------------------------------
class MappingCache {
 public:
  static constexpr std::size_t kMaxEntries = 1024;

  IpcMapping get(int device, const IpcHandle& handle) {
    const Key key{device, handle.serialize()};
    {
      std::lock_guard lock(mu_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    IpcMapping mapping(handle);  // cudaIpcOpenMemHandle: slow, outside the lock
    std::lock_guard lock(mu_);
    // Bounded: a peer that keeps exporting fresh allocations must not pin
    // them all open. Dropping the cache's copies is safe: every DeviceWork
    // holds its own copies of the mappings it uses.
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace(key, mapping);
    return mapping;
  }

 private:
  using Key = std::pair<int, IpcHandle::Wire>;
  std::mutex mu_;
  std::map<Key, IpcMapping> entries_;
};

MappingCache& mapping_cache() {
  static MappingCache* cache = new MappingCache;  // never destroyed: mappings outlive static destruction order
  return *cache;
}

// ---------------------------------------------------------------------------
// Whether any device's primary context is active. Asking CUDA about a pointer
// creates a context (hundreds of MB of GPU memory, and time) in a process
// that never used the GPU; without an active context no pointer can be device
// memory, so host-only users of a CUDA build never get one from us. Fetched
// from the driver at run time, as in ipc.cpp (the library never links libcuda).
// ---------------------------------------------------------------------------
struct ContextProbe {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDevicePrimaryCtxGetState_v7000 state = nullptr;
};

const ContextProbe& context_probe() {
  static const ContextProbe probe = [] {
    ContextProbe p;
    void* symbol = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &symbol, 2000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      p.device_get = reinterpret_cast<PFN_cuDeviceGet_v2000>(symbol);
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &symbol, 7000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      p.state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(symbol);
    static_cast<void>(cudaGetLastError());
    return p;
  }();
  return probe;
}

bool any_context_active() noexcept {
  const ContextProbe& probe = context_probe();
  if (probe.device_get == nullptr || probe.state == nullptr) return true;  // cannot tell: ask about the pointer
  for (int ordinal = 0; ordinal < device_count(); ++ordinal) {
    CUdevice device{};
    unsigned flags = 0;
    int active = 0;
    if (probe.device_get(&device, ordinal) != CUDA_SUCCESS) return true;
    if (probe.state(device, &flags, &active) != CUDA_SUCCESS || active != 0) return true;
  }
  return false;
}

// Kernels reading another device's memory through a pointer of this process
// (ranks as threads on several GPUs) need peer access enabled once per pair.
void enable_peer_access(int from_device, int to_device) {
  if (from_device == to_device || from_device < 0 || to_device < 0) return;
  static std::mutex mu;
  static std::map<std::pair<int, int>, bool> enabled;
  std::lock_guard lock(mu);
  if (enabled[{from_device, to_device}]) return;
  ScopedDevice on(from_device);
  const cudaError_t status = cudaDeviceEnablePeerAccess(to_device, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    static_cast<void>(cudaGetLastError());
  } else {
    check_cuda(status, cat("cudaDeviceEnablePeerAccess(", to_device, ") from device ", from_device));
  }
  enabled[{from_device, to_device}] = true;
}

// ---------------------------------------------------------------------------
// One call's work
// ---------------------------------------------------------------------------
class CudaDeviceWork final : public DeviceWork {
 public:
  CudaDeviceWork(int device, cudaStream_t caller) : device_(device), caller_(caller) {
    ScopedDevice on(device_);
    lease_ = engine_pool().take(device_);
    engine().order_after(caller_);
  }
  ~CudaDeviceWork() override {
    // The pool's next user enqueues behind this work on the same stream, so
    // returning the engine before the work finished is safe.
    engine_pool().give_back(std::move(lease_));
  }

  CopyEngine& staging(void* range, std::size_t bytes) override {
    engine().bind(range, bytes, DataType::u8);
    return engine();
  }
  std::byte* scratch(std::size_t bytes) override {
    if (lease_.scratch.size() < bytes) {
      ScopedDevice on(device_);
      // Freed first (cudaFree waits for the device's work, which may still
      // read the old buffer), so the two never need memory at once.
      lease_.scratch = DeviceBuffer();
      lease_.scratch = DeviceBuffer(bytes);
    }
    return lease_.scratch.data();
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    ScopedDevice on(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()), "cudaMemcpyAsync (device collective)");
  }
  void reduce_into(DataType dtype, ReduceOp op, void* out, const void* a, const void* b,
                   std::size_t count) override {
    ScopedDevice on(device_);
    device_reduce_into(dtype, op, out, a, b, count, stream());
  }
  void finish_avg(DataType dtype, void* data, std::size_t count, std::size_t nranks) override {
    ScopedDevice on(device_);
    device_finish_avg(dtype, data, count, nranks, stream());
  }
  bool wait(std::chrono::nanoseconds timeout) override {
    return poll_until_done(
        [this] {
          const cudaError_t status = cudaStreamQuery(stream());
          if (status == cudaErrorNotReady) return false;
          check_cuda(status, "cudaStreamQuery (device collective)");
          return true;
        },
        timeout);
  }
  void complete() override {
    ScopedDevice on(device_);
    engine().complete_on(caller_);
  }

  std::optional<IpcHandle> ipc_export(const void* p, std::size_t bytes, std::string* why) override {
    try {
      return cuda::ipc_export(p, bytes);
    } catch (const Error& e) {
      if (why != nullptr) *why = e.what();
      return std::nullopt;
    }
  }
  std::byte* ipc_map(const IpcHandle& handle) override {
    if (handle.from_this_process()) {
      enable_peer_access(device_, handle.device);
    }
    ScopedDevice on(device_);
    IpcMapping mapping = mapping_cache().get(device_, handle);
    held_.push_back(mapping);
    return mapping.data();
  }

 private:
  CudaCopyEngine& engine() { return *lease_.engine; }
  cudaStream_t stream() { return lease_.engine->stream(); }

  int device_;
  cudaStream_t caller_;
  PooledEngine lease_;
  std::vector<IpcMapping> held_;  // the mappings this call uses stay open until it ends
};

class CudaBackend final : public DeviceBackend {
 public:
  bool is_device(const void* p) override {
    return p != nullptr && available() && any_context_active() && memory_type_of(p) == MemoryType::device;
  }

  std::unique_ptr<DeviceWork> begin(const void* buffer, void* stream) override {
    if (!available()) raise<UnsupportedError>("device collective: ", unavailable_reason());
    const int device = device_of(buffer);
    ANTDT_CHECK_ARG(device >= 0, "device collective: buffer ", buffer, " is not device memory");
    return std::make_unique<CudaDeviceWork>(device, static_cast<cudaStream_t>(stream));
  }

  bool synchronize(void* stream, std::chrono::nanoseconds timeout) override {
    if (stream == nullptr && !available()) return true;  // nothing can be pending without a GPU
    if (!available()) raise<UnsupportedError>("a CUDA stream was passed: ", unavailable_reason());
    auto* s = static_cast<cudaStream_t>(stream);
    return poll_until_done(
        [s] {
          const cudaError_t status = cudaStreamQuery(s);
          if (status == cudaErrorNotReady) return false;
          check_cuda(status, "cudaStreamQuery (caller's stream)");
          return true;
        },
        timeout);
  }
};

}  // namespace

DeviceBackend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace antdt::cuda
