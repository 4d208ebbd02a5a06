// The device backend in use and the device checks built on it (backend.hpp).
#include "collectives/device/backend.hpp"

#include "core/error.hpp"

#include <atomic>

namespace antdt::coll::device {
namespace {

std::atomic<cuda::DeviceBackend*> backend_override{nullptr};

}  // namespace

cuda::DeviceBackend& backend() {
  cuda::DeviceBackend* fake = backend_override.load(std::memory_order_acquire);
  return fake != nullptr ? *fake : cuda::cuda_backend();
}

ScopedBackend::ScopedBackend(cuda::DeviceBackend& fake) noexcept
    : previous_(backend_override.exchange(&fake, std::memory_order_acq_rel)) {}
ScopedBackend::~ScopedBackend() { backend_override.store(previous_, std::memory_order_release); }

bool is_device_call(const void* a, const void* b) { return on_device(a) || on_device(b); }

void synchronize_host_call(const detail::CommImpl& comm, void* stream, const char* what) {
  if (stream == nullptr) return;
  if (!backend().synchronize(stream, comm.config().timeout))
    raise<TimeoutError>(what, ": the work on the caller's stream did not finish within ANTDT_TIMEOUT_MS (",
                        comm.config().timeout.count(), " ms)");
}

}  // namespace antdt::coll::device
