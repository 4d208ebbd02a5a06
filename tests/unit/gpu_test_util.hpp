// Helpers of the real-GPU tests (test_gpu_*.cpp): a fixture that skips, naming
// the reason, where no GPU or driver is present, and checked host <-> device copies.
#pragma once

#include "core/log.hpp"
#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#endif

namespace antdt::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << cuda::unavailable_reason();
  }
};

#if ANTDT_HAVE_CUDA
inline void check_cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(cat(what, ": ", cudaGetErrorString(status)));
}
inline void to_device(void* dst, const std::vector<std::byte>& src) {
  check_cuda_ok(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
// Waits (at most 30 s) until the work on the caller's stream has finished.
inline void wait_stream(const cuda::Stream& stream) {
  if (!stream.wait_for(std::chrono::seconds(30))) throw std::runtime_error("the caller's stream did not finish");
}
inline std::vector<std::byte> to_host(const void* src, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  check_cuda_ok(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return out;
}
#endif

}  // namespace antdt::test
