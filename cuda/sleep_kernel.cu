#include "cuda/sleep_kernel.hpp"

#include "cuda/cuda_check.hpp"

#include <algorithm>
#include <cstdint>

namespace antdt::cuda {
namespace {

__device__ std::uint64_t global_timer_ns() {
  std::uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// %globaltimer counts nanoseconds (updated about every microsecond); the loop
// sleeps in short steps so the thread does not spin on the SM's issue slots.
__global__ void sleep_kernel(std::uint64_t duration_ns) {
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < duration_ns) __nanosleep(1000);
}

constexpr std::chrono::nanoseconds kMaxSleep = std::chrono::seconds(60);

}  // namespace

void device_sleep(std::chrono::nanoseconds duration, cudaStream_t stream) {
  const auto clamped = std::clamp(duration, std::chrono::nanoseconds(0), kMaxSleep);
  sleep_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t>(clamped.count()));
  check_cuda(cudaGetLastError(), "device_sleep kernel launch");
}

}  // namespace antdt::cuda
