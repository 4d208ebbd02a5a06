// CUDA probe and GPU reduction kernel. The kernel tests skip, with the probe's
// reason, on machines without a GPU (CI); argument checks run everywhere.
#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

#include <string>

#if ANTDT_HAVE_CUDA
#include "cuda/reduce_kernels.hpp"

#include <antdt/comm.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <random>
#include <vector>
#endif

namespace {

TEST(CudaProbe, ReasonIsGivenExactlyWhenNoDeviceIsAvailable) {
  const int devices = antdt::cuda::device_count();
  const std::string reason = antdt::cuda::unavailable_reason();
  EXPECT_GE(devices, 0);
  EXPECT_EQ(antdt::cuda::available(), devices > 0);
  if (devices > 0) {
    EXPECT_EQ(reason, "");
  } else {
    EXPECT_NE(reason, "") << "no device, so the probe must say why";
  }
}

#if !ANTDT_HAVE_CUDA

TEST(CudaProbe, BuildWithoutCudaSaysSo) {
  EXPECT_EQ(antdt::cuda::device_count(), 0);
  EXPECT_EQ(antdt::cuda::unavailable_reason(), "built without CUDA");
}

#else

#define ASSERT_CUDA_OK(call)                                                               \
  do {                                                                                     \
    const cudaError_t cuda_status = (call);                                                \
    ASSERT_EQ(cuda_status, cudaSuccess) << #call << ": " << cudaGetErrorString(cuda_status); \
  } while (0)

struct DeviceFree {
  void operator()(float* p) const noexcept { static_cast<void>(cudaFree(p)); }
};
using DeviceFloats = std::unique_ptr<float, DeviceFree>;

DeviceFloats device_alloc(std::size_t count) {
  float* raw = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&raw), count * sizeof(float)) != cudaSuccess) return nullptr;
  return DeviceFloats(raw);
}

std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

// Runs reduce_sum_f32 on device copies placed `acc_offset` / `in_offset` floats
// past a 256-byte aligned cudaMalloc base (so every alignment case is reached:
// both aligned, equally misaligned, differently misaligned), and compares with
// the CPU sum. One IEEE f32 addition per element: the results must be identical.
void check_sum(std::size_t count, std::size_t acc_offset, std::size_t in_offset, cudaStream_t stream) {
  SCOPED_TRACE(testing::Message() << "count=" << count << " acc_offset=" << acc_offset
                                  << " in_offset=" << in_offset);
  const std::vector<float> acc_host = random_floats(count, static_cast<unsigned>(count * 7 + acc_offset));
  const std::vector<float> in_host = random_floats(count, static_cast<unsigned>(count * 13 + in_offset + 1));
  std::vector<float> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = acc_host[i] + in_host[i];

  DeviceFloats acc_dev = device_alloc(count + acc_offset);
  DeviceFloats in_dev = device_alloc(count + in_offset);
  ASSERT_TRUE(acc_dev && in_dev) << "cudaMalloc of " << count << " floats failed";
  float* acc = acc_dev.get() + acc_offset;
  float* in = in_dev.get() + in_offset;
  const std::size_t bytes = count * sizeof(float);
  ASSERT_CUDA_OK(cudaMemcpy(acc, acc_host.data(), bytes, cudaMemcpyHostToDevice));
  ASSERT_CUDA_OK(cudaMemcpy(in, in_host.data(), bytes, cudaMemcpyHostToDevice));

  antdt::cuda::reduce_sum_f32(acc, in, count, stream);
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));

  std::vector<float> result(count);
  ASSERT_CUDA_OK(cudaMemcpy(result.data(), acc, bytes, cudaMemcpyDeviceToHost));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (result[i] != expected[i] && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << result[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
  std::vector<float> in_after(count);
  ASSERT_CUDA_OK(cudaMemcpy(in_after.data(), in, bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(in_after, in_host) << "the input buffer must not change";
}

class CudaReduce : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

TEST_F(CudaReduce, SumF32MatchesCpuOnOddLengthsAndAllAlignments) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreate(&stream));
  for (std::size_t count : {1u, 3u, 5u, 7u, 33u, 1023u, 4099u, 1'048'577u}) {
    for (std::size_t acc_offset : {0u, 1u, 2u, 3u}) {
      for (std::size_t in_offset : {0u, 1u, 3u}) check_sum(count, acc_offset, in_offset, stream);
    }
  }
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST_F(CudaReduce, SumF32OnDefaultStreamCoversMoreThanOneGridStride) {
  // 4096 blocks x 256 threads x 4 floats = 4 Mi floats per stride; go past it.
  check_sum(4u * 1024u * 1024u * 4u + 4101u, 1, 1, nullptr);
}

TEST_F(CudaReduce, SumF32InPlaceDoublesTheBuffer) {
  const std::size_t count = 1001;
  const std::vector<float> host = random_floats(count, 42);
  DeviceFloats buf = device_alloc(count);
  ASSERT_TRUE(buf);
  ASSERT_CUDA_OK(cudaMemcpy(buf.get(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  antdt::cuda::reduce_sum_f32(buf.get(), buf.get(), count, nullptr);
  std::vector<float> result(count);
  ASSERT_CUDA_OK(cudaMemcpy(result.data(), buf.get(), count * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(result[i], host[i] * 2.0f) << "element " << i;
}

// The checks below happen before any CUDA call, so they run without a GPU too.
TEST(CudaReduceArguments, ZeroCountIsANoOpEvenWithNullBuffers) {
  EXPECT_NO_THROW(antdt::cuda::reduce_sum_f32(nullptr, nullptr, 0, nullptr));
}

TEST(CudaReduceArguments, NullBufferIsRejected) {
  float value = 1.0f;
  EXPECT_THROW(antdt::cuda::reduce_sum_f32(nullptr, &value, 1, nullptr), antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::reduce_sum_f32(&value, nullptr, 1, nullptr), antdt::InvalidArgument);
}

TEST(CudaReduceArguments, PartialOverlapIsRejected) {
  std::vector<float> host(16, 1.0f);
  try {
    antdt::cuda::reduce_sum_f32(host.data() + 1, host.data(), 8, nullptr);
    FAIL() << "overlapping buffers were accepted";
  } catch (const antdt::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
