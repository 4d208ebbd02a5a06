// CUDA probe and GPU reduction kernels (cuda/reduce_kernels.hpp). The kernel
// tests compare every dtype x op with the CPU kernels of core/dtype.hpp, bit
// for bit (NaN payloads excepted: GPUs produce the canonical NaN), and skip
// with the probe's reason on machines without a GPU. Argument checks happen
// before any CUDA call, so they run everywhere.
#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

#include <string>

#if ANTDT_HAVE_CUDA
#include "core/dtype.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/reduce_kernels.hpp"

#include <antdt/comm.hpp>
#include <cuda_runtime_api.h>

#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
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

using antdt::DataType;
using antdt::ReduceOp;

constexpr std::array<DataType, 10> kAllTypes{DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                                             DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                                             DataType::i64, DataType::u64};
constexpr std::array<ReduceOp, 5> kAllOps{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                          ReduceOp::avg};

#define ASSERT_CUDA_OK(call)                                                                 \
  do {                                                                                       \
    const cudaError_t cuda_status = (call);                                                  \
    ASSERT_EQ(cuda_status, cudaSuccess) << #call << ": " << cudaGetErrorString(cuda_status); \
  } while (0)

// ---------------------------------------------------------------------------
// Inputs: ordinary values (so sums and products round), raw bit patterns (so
// every exponent, subnormals and NaN encodings appear) and special values.
// ---------------------------------------------------------------------------
template <class F>
F special_float(std::mt19937_64& gen) {
  using L = std::numeric_limits<F>;
  const std::array<F, 12> specials{L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), F(0), -F(0),
                                   L::max(),       L::lowest(),     L::denorm_min(), -L::denorm_min(), L::min(),
                                   F(1)};
  return specials[gen() % specials.size()];
}

template <class F, class Bits>
F float_element(std::mt19937_64& gen) {
  const unsigned kind = gen() % 10;
  if (kind < 7) return static_cast<F>(std::uniform_real_distribution<double>(-1000.0, 1000.0)(gen));
  if (kind < 9) return std::bit_cast<F>(static_cast<Bits>(gen()));
  return special_float<F>(gen);
}

std::uint16_t half_like_element(std::mt19937_64& gen, std::uint16_t (*from_float)(float)) {
  const unsigned kind = gen() % 10;
  if (kind < 6) return from_float(std::uniform_real_distribution<float>(-300.0f, 300.0f)(gen));
  if (kind < 9) return static_cast<std::uint16_t>(gen());
  return from_float(special_float<float>(gen));
}

std::vector<std::byte> random_elements(DataType t, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const std::size_t size = antdt::dtype_size(t);
  std::vector<std::byte> bytes(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    std::byte* at = bytes.data() + i * size;
    switch (t) {
      case DataType::f32: {
        const float v = float_element<float, std::uint32_t>(gen);
        std::memcpy(at, &v, size);
        break;
      }
      case DataType::f64: {
        const double v = float_element<double, std::uint64_t>(gen);
        std::memcpy(at, &v, size);
        break;
      }
      case DataType::f16: {
        const std::uint16_t v = half_like_element(gen, antdt::float_to_half);
        std::memcpy(at, &v, size);
        break;
      }
      case DataType::bf16: {
        const std::uint16_t v = half_like_element(gen, antdt::float_to_bf16);
        std::memcpy(at, &v, size);
        break;
      }
      default: {
        // Integers: every bit pattern, so sums and products wrap.
        const std::uint64_t v = gen();
        std::memcpy(at, &v, size);  // little-endian: the low bytes
        break;
      }
    }
  }
  return bytes;
}

bool is_nan(DataType t, const std::byte* p) {
  switch (t) {
    case DataType::f32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return std::isnan(v);
    }
    case DataType::f64: {
      double v;
      std::memcpy(&v, p, sizeof v);
      return std::isnan(v);
    }
    case DataType::f16:
    case DataType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return (v & 0x7fffu) > (t == DataType::f16 ? 0x7c00u : 0x7f80u);
    }
    default: return false;
  }
}

// Bit-for-bit equality, except that any NaN matches any NaN.
void expect_same_elements(DataType t, std::span<const std::byte> got, std::span<const std::byte> expected,
                          const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  const std::size_t size = antdt::dtype_size(t);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < got.size() / size; ++i) {
    const std::byte* g = got.data() + i * size;
    const std::byte* e = expected.data() + i * size;
    if (std::memcmp(g, e, size) == 0 || (is_nan(t, g) && is_nan(t, e))) continue;
    if (++mismatches <= 3) {
      std::uint64_t gv = 0;
      std::uint64_t ev = 0;
      std::memcpy(&gv, g, size);
      std::memcpy(&ev, e, size);
      ADD_FAILURE() << what << ": element " << i << " bits 0x" << std::hex << gv << ", CPU kernel gives 0x" << ev;
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

// ---------------------------------------------------------------------------
// Device placement: each operand lives `offset` elements past a cudaMalloc
// base (256-byte aligned), which reaches every alignment case.
// ---------------------------------------------------------------------------
struct Placed {
  antdt::cuda::DeviceBuffer buffer;
  std::byte* data = nullptr;
};

Placed place(std::span<const std::byte> host, DataType t, std::size_t offset_elements) {
  const std::size_t offset = offset_elements * antdt::dtype_size(t);
  Placed p{antdt::cuda::DeviceBuffer(host.size() + offset + 16), nullptr};
  p.data = p.buffer.data() + offset;
  EXPECT_EQ(cudaMemcpy(p.data, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

std::vector<std::byte> fetch(const std::byte* device, std::size_t bytes) {
  std::vector<std::byte> host(bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

std::string label(DataType t, ReduceOp op, std::size_t count, std::size_t off_a, std::size_t off_b) {
  return std::string(antdt::dtype_name(t)) + " " + std::string(antdt::op_name(op)) +
         " count=" + std::to_string(count) + " offsets=" + std::to_string(off_a) + "," + std::to_string(off_b);
}

// acc op= in on the GPU against reduce_inplace on the CPU.
void check_reduce(DataType t, ReduceOp op, std::size_t count, std::size_t acc_offset, std::size_t in_offset,
                  cudaStream_t stream) {
  const std::string what = label(t, op, count, acc_offset, in_offset);
  const std::vector<std::byte> acc = random_elements(t, count, count * 31 + acc_offset * 7 + 1);
  const std::vector<std::byte> in = random_elements(t, count, count * 17 + in_offset * 5 + 2);
  std::vector<std::byte> expected = acc;
  antdt::reduce_inplace(t, op, expected, in);

  Placed acc_dev = place(acc, t, acc_offset);
  Placed in_dev = place(in, t, in_offset);
  antdt::cuda::device_reduce(t, op, acc_dev.data, in_dev.data, count, stream);
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  expect_same_elements(t, fetch(acc_dev.data, acc.size()), expected, what);
  EXPECT_EQ(fetch(in_dev.data, in.size()), in) << what << ": the input must not change";
}

class CudaKernels : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

// (acc, in) offsets in elements: both aligned, equally misaligned (vector
// middle after a scalar head), and differently misaligned (all scalar).
constexpr std::array<std::pair<std::size_t, std::size_t>, 5> kOffsetPairs{
    {{0, 0}, {1, 1}, {3, 3}, {1, 0}, {0, 5}}};

TEST_F(CudaKernels, EveryTypeAndOpMatchesTheCpuOnOddLengthsAndAlignments) {
  antdt::cuda::Stream stream;
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : {1u, 2u, 3u, 7u, 9u, 15u, 17u, 33u, 255u, 4099u, 65'539u}) {
        for (auto [acc_offset, in_offset] : kOffsetPairs) {
          check_reduce(t, op, count, acc_offset, in_offset, stream.get());
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_F(CudaKernels, LargeBuffersCoverMoreThanOneGridStride) {
  // A full grid of an H200 is 132 SMs x 2048 threads, each taking 2 vectors of
  // 16 bytes per step: 8.6 MiB per operand. These inputs exceed that for every
  // element size, aligned and misaligned.
  antdt::cuda::Stream stream;
  for (DataType t : {DataType::f32, DataType::bf16, DataType::i8, DataType::f64}) {
    const std::size_t count = (std::size_t{24} << 20) / antdt::dtype_size(t) + 3;
    check_reduce(t, ReduceOp::sum, count, 0, 0, stream.get());
    check_reduce(t, ReduceOp::max, count, 1, 1, stream.get());
  }
}

TEST_F(CudaKernels, ReduceIntoMatchesTheCpuForDistinctAndAliasedOutputs) {
  antdt::cuda::Stream stream;
  const std::size_t count = 1001;
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const std::vector<std::byte> a = random_elements(t, count, 11);
      const std::vector<std::byte> b = random_elements(t, count, 12);
      std::vector<std::byte> expected(a.size());
      antdt::reduce_into(t, op, expected, a, b);

      // Distinct output, at a third alignment.
      Placed a_dev = place(a, t, 0);
      Placed b_dev = place(b, t, 0);
      Placed out_dev = place(std::vector<std::byte>(a.size()), t, 2);
      antdt::cuda::device_reduce_into(t, op, out_dev.data, a_dev.data, b_dev.data, count, stream.get());
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
      expect_same_elements(t, fetch(out_dev.data, a.size()), expected, label(t, op, count, 0, 0) + " out distinct");

      // The output is the second input: the operand order must still be a op b.
      antdt::cuda::device_reduce_into(t, op, b_dev.data, a_dev.data, b_dev.data, count, stream.get());
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
      expect_same_elements(t, fetch(b_dev.data, b.size()), expected, label(t, op, count, 0, 0) + " out == b");

      // All three the same buffer.
      std::vector<std::byte> self(a.size());
      antdt::reduce_into(t, op, self, a, a);
      antdt::cuda::device_reduce_into(t, op, a_dev.data, a_dev.data, a_dev.data, count, stream.get());
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
      expect_same_elements(t, fetch(a_dev.data, a.size()), self, label(t, op, count, 0, 0) + " out == a == b");

      // Inputs that overlap each other (only the output is constrained).
      const std::size_t size = antdt::dtype_size(t);
      std::vector<std::byte> shifted(a.size() - size);
      antdt::reduce_into(t, op, shifted, std::span(b).first(shifted.size()), std::span(b).subspan(size));
      Placed b2_dev = place(b, t, 0);
      antdt::cuda::device_reduce_into(t, op, out_dev.data, b2_dev.data, b2_dev.data + size, count - 1,
                                      stream.get());
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
      expect_same_elements(t, fetch(out_dev.data, shifted.size()), shifted,
                           label(t, op, count - 1, 0, 1) + " overlapping inputs");
    }
  }
}

TEST_F(CudaKernels, FinishAvgMatchesTheCpuForEveryTypeAndRankCount) {
  antdt::cuda::Stream stream;
  for (DataType t : kAllTypes) {
    for (std::size_t nranks : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, std::size_t{200},
                               std::size_t{1000}, static_cast<std::size_t>(INT_MAX)}) {
      for (std::size_t offset : {0u, 1u}) {
        const std::size_t count = 4099;
        const std::vector<std::byte> data = random_elements(t, count, nranks * 3 + offset);
        std::vector<std::byte> expected = data;
        antdt::finish_avg(t, expected, nranks);
        Placed dev = place(data, t, offset);
        antdt::cuda::device_finish_avg(t, dev.data, count, nranks, stream.get());
        ASSERT_CUDA_OK(cudaStreamSynchronize(stream.get()));
        expect_same_elements(t, fetch(dev.data, data.size()), expected,
                             label(t, ReduceOp::avg, count, offset, offset) + " nranks=" + std::to_string(nranks));
      }
    }
  }
}

TEST_F(CudaKernels, InPlaceSumDoublesTheBuffer) {
  const std::size_t count = 1001;
  std::vector<float> host(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(i) * 0.5f - 100.0f;
  Placed buf = place(std::as_bytes(std::span(host)), DataType::f32, 0);
  antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, buf.data, buf.data, count, nullptr);
  const std::vector<std::byte> bytes = fetch(buf.data, count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * sizeof(float), sizeof v);
    ASSERT_EQ(v, host[i] * 2.0f) << "element " << i;
  }
}

// The checks below happen before any CUDA call, so they run without a GPU too.
TEST(CudaKernelArguments, ZeroCountIsANoOpEvenWithNullBuffers) {
  EXPECT_NO_THROW(antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(
      antdt::cuda::device_reduce_into(DataType::i8, ReduceOp::max, nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_NO_THROW(antdt::cuda::device_finish_avg(DataType::f16, nullptr, 0, 4, nullptr));
}

TEST(CudaKernelArguments, InvalidTypeOrOpIsRejectedEvenForZeroCount) {
  EXPECT_THROW(antdt::cuda::device_reduce(static_cast<DataType>(10), ReduceOp::sum, nullptr, nullptr, 0, nullptr),
               antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::device_reduce(DataType::f32, static_cast<ReduceOp>(5), nullptr, nullptr, 0, nullptr),
               antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::device_finish_avg(static_cast<DataType>(200), nullptr, 0, 2, nullptr),
               antdt::InvalidArgument);
}

TEST(CudaKernelArguments, NullBufferIsRejected) {
  float value = 1.0f;
  EXPECT_THROW(antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, nullptr, &value, 1, nullptr),
               antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, &value, nullptr, 1, nullptr),
               antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::device_finish_avg(DataType::f32, nullptr, 1, 2, nullptr), antdt::InvalidArgument);
}

TEST(CudaKernelArguments, PartialOverlapIsRejectedNamingIt) {
  std::vector<float> host(16, 1.0f);
  try {
    antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, host.data() + 1, host.data(), 8, nullptr);
    FAIL() << "overlapping buffers were accepted";
  } catch (const antdt::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
}

TEST(CudaKernelArguments, ElementMisalignedBufferIsRejectedNamingTheElementSize) {
  alignas(8) std::array<std::byte, 64> raw{};
  try {
    antdt::cuda::device_reduce(DataType::f32, ReduceOp::sum, raw.data() + 2, raw.data() + 32, 4, nullptr);
    FAIL() << "a misaligned f32 buffer was accepted";
  } catch (const antdt::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("4-byte element size"), std::string::npos) << e.what();
  }
}

TEST(CudaKernelArguments, RankCountOutsideRangeIsRejected) {
  float value = 1.0f;
  EXPECT_THROW(antdt::cuda::device_finish_avg(DataType::f32, &value, 1, 0, nullptr), antdt::InvalidArgument);
  EXPECT_THROW(antdt::cuda::device_finish_avg(DataType::f32, &value, 1, std::size_t{INT_MAX} + 1, nullptr),
               antdt::InvalidArgument);
}

TEST(CudaKernelArguments, ByteCountOverflowIsRejected) {
  double value = 1.0;
  EXPECT_THROW(antdt::cuda::device_reduce(DataType::f64, ReduceOp::sum, &value, &value, SIZE_MAX / 4, nullptr),
               antdt::InvalidArgument);
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
