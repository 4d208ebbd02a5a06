// A kernel that occupies a stream for a given time without using memory or
// more than one thread: the known duration behind the GPU timing tests, and a
// way to slow one rank's device work down on purpose (straggler experiments).
// Only compiled in CUDA builds.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>

namespace antdt::cuda {

// Enqueues a one-thread kernel on `stream` that returns once the GPU's global
// timer has advanced by at least `duration` (asynchronous, like any launch).
// Durations are clamped to [0, 60 s].
void device_sleep(std::chrono::nanoseconds duration, cudaStream_t stream);

}  // namespace antdt::cuda
