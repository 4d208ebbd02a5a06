// The CUDA entry points for builds without nvcc: no device (the reason says
// so), every pointer is host memory, NVTX ranges are no-ops, CUDA IPC is
// unsupported, no memory is device memory (so no collective takes a device path).
#include "core/error.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/device_work.hpp"
#include "cuda/ipc.hpp"
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

IpcHandle ipc_export(const void*, std::size_t) { raise<UnsupportedError>("CUDA IPC export: built without CUDA"); }

IpcMapping::IpcMapping(const IpcHandle&) { raise<UnsupportedError>("CUDA IPC mapping: built without CUDA"); }

namespace {

class NoCudaBackend final : public DeviceBackend {
 public:
  bool is_device(const void*) override { return false; }
  std::unique_ptr<DeviceWork> begin(const void*, void*) override {
    raise<UnsupportedError>("device collective: built without CUDA");
  }
  bool synchronize(void* stream, std::chrono::nanoseconds) override {
    ANTDT_CHECK_ARG(stream == nullptr, "a CUDA stream was passed to a library built without CUDA");
    return true;
  }
};

}  // namespace

DeviceBackend& cuda_backend() {
  static NoCudaBackend backend;
  return backend;
}

}  // namespace antdt::cuda
