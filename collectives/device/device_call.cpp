// The waits and the end of a call on device buffers (device_call.hpp).
#include "collectives/device/device_call.hpp"

#include "collectives/device/backend.hpp"

namespace antdt::coll::device {

Clock::time_point deadline_of(const detail::CommImpl& comm) { return Clock::now() + comm.config().timeout; }

void wait_device(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what, const char* stage) {
  if (!work.wait(comm.config().timeout))
    raise<TimeoutError>(what, ": ", stage, " did not finish on the device within ANTDT_TIMEOUT_MS (",
                        comm.config().timeout.count(), " ms)");
}

void finish_call(cuda::DeviceWork& work, const detail::CommImpl& comm, const void* result, const char* what) {
  work.complete();
  if (result != nullptr && !on_device(result)) wait_device(work, comm, what, "copying the result to host memory");
}

}  // namespace antdt::coll::device
