// Passthrough mode's Monitor steps: every ncclAllReduce outside a group ends a
// step of its communicator. Compute is the time from the end of the previous
// step's collective to the start of this one's, collective the time inside it:
// from the CUDA events recorded around the forwarded calls on the caller's
// stream where there is a device (read once complete, never synchronizing),
// else from the CPU clock.
#pragma once

#include "cuda_runtime_loader.hpp"

#include <antdt/scheduler.hpp>
#include <nccl.h>

#include <chrono>
#include <vector>

namespace antdt_nccl::passthrough {

// The newest steps kept per communicator: what the exit report evaluates.
inline constexpr std::size_t kKeptSteps = 256;

// A step timed by the CPU clock: the forwarded call ran from `start` to `end`.
void cpu_step(ncclComm_t comm, std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end);
// A step timed on the device: `begin` and `end` (both complete) bracket its
// collective. Takes both events (destroys them once no longer needed).
void gpu_step(ncclComm_t comm, void* begin, void* end, const CudaRuntime& cuda);
// The kept steps of `comm`, oldest first; forgets the communicator.
std::vector<antdt::StepTimes> take_steps(ncclComm_t comm);

}  // namespace antdt_nccl::passthrough
