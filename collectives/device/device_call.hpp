// What every collective on device buffers does around its device work,
// whatever its path: the host's bounded waits for the work, the end of the
// call (the caller's stream waits for the work; the host too when the result
// is in host memory), and failing together with the peers when the device
// work fails part-way.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"
#include "collectives/device/bounded_poll.hpp"
#include "core/error.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <string>

namespace antdt::coll::device {

inline const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }
inline std::byte* as_bytes(void* p) { return static_cast<std::byte*>(p); }

// ANTDT_TIMEOUT_MS from now.
Clock::time_point deadline_of(const detail::CommImpl& comm);

// Waits for everything enqueued on `work` so far; TimeoutError naming `what`
// and `stage` after ANTDT_TIMEOUT_MS.
void wait_device(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what, const char* stage);

// Ends a call: the caller's stream waits for the work; when `result` is in
// host memory the host waits too, since the caller may read it at once
// (`result` null: no host wait).
void finish_call(cuda::DeviceWork& work, const detail::CommImpl& comm, const void* result, const char* what);

// Runs `body`. A device call that fails part-way (a CUDA error, a copy past
// the deadline) leaves its peers waiting for its messages: as Call does for
// transport failures, this marks the communicator failed and tells the peers,
// so that they fail promptly instead of each waiting out ANTDT_TIMEOUT_MS.
// Failures that Call already reported are rethrown as they are.
template <class Body>
void failing_together(detail::CommImpl& comm, const char* what, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    bool reported = false;
    try {
      comm.check_usable();
    } catch (const Error&) {
      reported = true;
    }
    if (!reported) {
      const std::string reason = cat("rank ", comm.rank(), ": ", what, " failed: ", e.what());
      comm.mark_failed(e.status(), reason);
      comm.transport().abort(static_cast<int>(e.status()), reason);
    }
    throw;
  }
}

}  // namespace antdt::coll::device
