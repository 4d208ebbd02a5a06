// Memory types (cuda/memory_type.hpp), NVTX ranges (cuda/nvtx.hpp) and, where
// a GPU is present, the RAII owners of cuda/device_memory.hpp.
#include "core/config.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/memory_type.hpp"
#include "cuda/nvtx.hpp"

#include <antdt/comm.hpp>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "cuda/sleep_kernel.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#endif

namespace {

using antdt::cuda::MemoryType;

#if ANTDT_HAVE_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

TEST(CudaMemoryType, PlainHostMemoryIsHostInEveryBuild) {
  std::vector<int> heap(16);
  int stack = 0;
  EXPECT_EQ(antdt::cuda::memory_type_of(heap.data()), MemoryType::host);
  EXPECT_EQ(antdt::cuda::memory_type_of(&stack), MemoryType::host);
  EXPECT_EQ(antdt::cuda::memory_type_of(nullptr), MemoryType::host);
  EXPECT_EQ(antdt::cuda::device_of(heap.data()), -1);
  EXPECT_EQ(antdt::cuda::memory_type_name(MemoryType::pinned_host), "pinned_host");
}

// Sets one environment variable for a test, restores it, and re-reads the
// configuration both times.
class ScopedConfigVariable {
 public:
  ScopedConfigVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
    antdt::reload_config();
  }
  ~ScopedConfigVariable() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
    antdt::reload_config();
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(CudaNvtx, RangesAreEmittedOnlyWithAntdtNvtxInACudaBuild) {
  {
    ScopedConfigVariable off("ANTDT_NVTX", "0");
    const antdt::cuda::NvtxRange range("antdt test range");
    EXPECT_FALSE(range.active());
  }
  {
    ScopedConfigVariable on("ANTDT_NVTX", "1");
    EXPECT_EQ(antdt::cuda::nvtx_enabled(), kCudaBuild);
    const antdt::cuda::NvtxRange outer("antdt outer");
    const antdt::cuda::NvtxRange inner("antdt inner");
    EXPECT_EQ(outer.active(), kCudaBuild);
    EXPECT_EQ(inner.active(), kCudaBuild);
  }
}

#if ANTDT_HAVE_CUDA

class CudaMemory : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

TEST_F(CudaMemory, EachAllocatorIsRecognised) {
  const antdt::cuda::DeviceBuffer device(4096);
  const antdt::cuda::PinnedBuffer pinned(4096);
  EXPECT_EQ(antdt::cuda::memory_type_of(device.data()), MemoryType::device);
  EXPECT_EQ(antdt::cuda::memory_type_of(device.data() + 100), MemoryType::device) << "an interior pointer";
  EXPECT_EQ(antdt::cuda::memory_type_of(pinned.data()), MemoryType::pinned_host);
  EXPECT_EQ(antdt::cuda::device_of(device.data()), device.device());
  EXPECT_EQ(antdt::cuda::device_of(pinned.data()), -1);
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 4096), cudaSuccess);
  EXPECT_EQ(antdt::cuda::memory_type_of(managed), MemoryType::managed);
  EXPECT_EQ(cudaFree(managed), cudaSuccess);
}

TEST_F(CudaMemory, EmptyBuffersAllocateNothing) {
  const antdt::cuda::DeviceBuffer device(0);
  const antdt::cuda::PinnedBuffer pinned(0);
  EXPECT_TRUE(device.empty());
  EXPECT_EQ(device.data(), nullptr);
  EXPECT_TRUE(pinned.empty());
  EXPECT_EQ(pinned.data(), nullptr);
}

TEST_F(CudaMemory, MovedBufferHasOneOwner) {
  antdt::cuda::DeviceBuffer a(1024);
  std::byte* p = a.data();
  antdt::cuda::DeviceBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 1024u);
}

TEST_F(CudaMemory, StreamAndEventWaitsAreBounded) {
  using namespace std::chrono_literals;
  antdt::cuda::Stream stream;
  antdt::cuda::Event event;
  antdt::cuda::device_sleep(300ms, stream.get());
  event.record(stream.get());
  EXPECT_FALSE(stream.wait_for(1ms)) << "a 300 ms kernel is still running";
  EXPECT_FALSE(event.query());
  EXPECT_TRUE(event.wait_for(20s));
  EXPECT_TRUE(stream.query());
}

TEST_F(CudaMemory, EventOrdersAnotherStreamOnTheDevice) {
  using namespace std::chrono_literals;
  antdt::cuda::Stream producer;
  antdt::cuda::Stream consumer;
  antdt::cuda::DeviceBuffer buffer(4096);
  antdt::cuda::Event ready;
  antdt::cuda::device_sleep(100ms, producer.get());
  ASSERT_EQ(cudaMemsetAsync(buffer.data(), 0x7e, buffer.size(), producer.get()), cudaSuccess);
  ready.record(producer.get());
  ready.make_wait(consumer.get());
  antdt::cuda::PinnedBuffer staging(buffer.size());
  ASSERT_EQ(cudaMemcpyAsync(staging.data(), buffer.data(), buffer.size(), cudaMemcpyDeviceToHost, consumer.get()),
            cudaSuccess);
  ASSERT_TRUE(consumer.wait_for(20s));
  for (std::size_t i = 0; i < staging.size(); ++i) ASSERT_EQ(staging.data()[i], std::byte{0x7e}) << i;
}

TEST_F(CudaMemory, ElapsedTimeNeedsTimingEvents) {
  antdt::cuda::Event sync_only;
  antdt::cuda::Event timing(antdt::cuda::Event::Kind::timing);
  EXPECT_THROW(antdt::cuda::Event::elapsed_seconds(sync_only, timing), antdt::InvalidArgument);
}

TEST_F(CudaMemory, ScopedDeviceRestoresTheCurrentDevice) {
  const int before = antdt::cuda::current_device();
  {
    const antdt::cuda::ScopedDevice on(antdt::cuda::device_count() - 1);
    EXPECT_EQ(antdt::cuda::current_device(), antdt::cuda::device_count() - 1);
  }
  EXPECT_EQ(antdt::cuda::current_device(), before);
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
