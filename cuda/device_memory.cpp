#include "cuda/device_memory.hpp"

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cuda_runtime.hpp"

namespace antdt::cuda {

// ---------------------------------------------------------------------------
// Memory types
// ---------------------------------------------------------------------------
namespace {

// False when CUDA cannot say (unusable runtime, or an error for this pointer).
bool pointer_attributes(const void* p, cudaPointerAttributes& attributes) noexcept {
  if (p == nullptr || !available()) return false;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    // Leave no error behind for the caller's next CUDA call.
    static_cast<void>(cudaGetLastError());
    return false;
  }
  return true;
}

}  // namespace

MemoryType memory_type_of(const void* p) noexcept {
  cudaPointerAttributes attributes{};
  if (!pointer_attributes(p, attributes)) return MemoryType::host;
  switch (attributes.type) {
    case cudaMemoryTypeHost: return MemoryType::pinned_host;
    case cudaMemoryTypeDevice: return MemoryType::device;
    case cudaMemoryTypeManaged: return MemoryType::managed;
    case cudaMemoryTypeUnregistered: return MemoryType::host;
  }
  return MemoryType::host;
}

int device_of(const void* p) noexcept {
  cudaPointerAttributes attributes{};
  if (!pointer_attributes(p, attributes)) return -1;
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) return -1;
  return attributes.device;
}

// ---------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------
int current_device() {
  int device = -1;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

ScopedDevice::ScopedDevice(int device) : previous_(current_device()) {
  if (device != previous_) {
    check_cuda(cudaSetDevice(device), cat("cudaSetDevice(", device, ")"));
    changed_ = true;
  }
}

ScopedDevice::~ScopedDevice() {
  if (changed_) static_cast<void>(cudaSetDevice(previous_));
}

// ---------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------
void DeviceBuffer::Free::operator()(std::byte* p) const noexcept { static_cast<void>(cudaFree(p)); }

DeviceBuffer::DeviceBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  device_ = current_device();
  void* raw = nullptr;
  check_cuda(cudaMalloc(&raw, bytes), cat("cudaMalloc(", bytes, " bytes) on device ", device_));
  data_.reset(static_cast<std::byte*>(raw));
}

void PinnedBuffer::Free::operator()(std::byte* p) const noexcept { static_cast<void>(cudaFreeHost(p)); }

PinnedBuffer::PinnedBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* raw = nullptr;
  check_cuda(cudaHostAlloc(&raw, bytes, cudaHostAllocPortable), cat("cudaHostAlloc(", bytes, " bytes)"));
  data_.reset(static_cast<std::byte*>(raw));
}

// ---------------------------------------------------------------------------
// Streams and events
// ---------------------------------------------------------------------------
namespace {

// cudaErrorNotReady is "still running", not a failure.
bool finished(cudaError_t status, const char* call) {
  if (status == cudaErrorNotReady) {
    return false;
  }
  check_cuda(status, call);
  return true;
}

}  // namespace

void Stream::Destroy::operator()(cudaStream_t s) const noexcept { static_cast<void>(cudaStreamDestroy(s)); }

Stream::Stream() {
  cudaStream_t raw = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_.reset(raw);
}

bool Stream::query() const { return finished(cudaStreamQuery(get()), "cudaStreamQuery"); }

bool Stream::wait_for(std::chrono::nanoseconds timeout) const {
  return poll_until_done([this] { return query(); }, timeout);
}

void Event::Destroy::operator()(cudaEvent_t e) const noexcept { static_cast<void>(cudaEventDestroy(e)); }

Event::Event(Kind kind) : kind_(kind) {
  cudaEvent_t raw = nullptr;
  const unsigned flags = kind == Kind::sync ? cudaEventDisableTiming : cudaEventDefault;
  check_cuda(cudaEventCreateWithFlags(&raw, flags), "cudaEventCreateWithFlags");
  event_.reset(raw);
}

void Event::record(cudaStream_t stream) { check_cuda(cudaEventRecord(get(), stream), "cudaEventRecord"); }

void Event::make_wait(cudaStream_t stream) const {
  check_cuda(cudaStreamWaitEvent(stream, get(), 0), "cudaStreamWaitEvent");
}

bool Event::query() const { return finished(cudaEventQuery(get()), "cudaEventQuery"); }

bool Event::wait_for(std::chrono::nanoseconds timeout) const {
  return poll_until_done([this] { return query(); }, timeout);
}

double Event::elapsed_seconds(const Event& begin, const Event& end) {
  ANTDT_CHECK_ARG(begin.kind() == Kind::timing && end.kind() == Kind::timing,
                  "Event::elapsed_seconds needs two timing events (created with Event::Kind::timing)");
  float milliseconds = 0.0f;
  check_cuda(cudaEventElapsedTime(&milliseconds, begin.get(), end.get()), "cudaEventElapsedTime");
  return static_cast<double>(milliseconds) * 1e-3;
}

}  // namespace antdt::cuda
