// antdt_reduce_kernel_bench: GB/s of the GPU reduction kernel `a += b`
// (cuda/reduce_kernels.hpp), of the same operation through
// cub::DeviceTransform, and of a device-to-device cudaMemcpy, measured in the
// same run and interleaved, so the ratio compares like with like.
//
// Traffic counted: the kernel reads a and b and writes a (3 x bytes); the copy
// reads one buffer and writes another (2 x bytes). Each operation is timed
// alone with CUDA events; the table shows the median over the iterations.
// Without a GPU it prints why and exits 0.
#include "reduce_kernel_bench.hpp"

#include "perf_common.hpp"

#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/reduce_kernels.hpp"

#include <antdt/comm.hpp>
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using antdt::DataType;
namespace cu = antdt::cuda;

constexpr const char* kTool = "antdt_reduce_kernel_bench";
constexpr double kTargetRatio = 0.85;  // issue 6: a += b at >= 85% of the copy bandwidth
constexpr auto kWaitLimit = std::chrono::seconds(30);

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
  }
}

// Seconds taken by what `enqueue` puts on `stream`, timed with events.
template <class Enqueue>
double time_once(cudaStream_t stream, cu::Event& begin, cu::Event& end, Enqueue&& enqueue) {
  begin.record(stream);
  enqueue();
  end.record(stream);
  if (!end.wait_for(kWaitLimit)) throw std::runtime_error("a timed operation did not finish within 30 s");
  return cu::Event::elapsed_seconds(begin, end);
}

// Small values, so repeated a += b stays finite in every float type.
std::vector<std::byte> fill_pattern(DataType t, std::size_t bytes, bool second) {
  std::vector<std::byte> host(bytes);
  const std::size_t size = antdt::dtype_size(t);
  std::vector<std::byte> element(size);
  switch (t) {
    case DataType::f32: {
      const float v = second ? 1e-6f : 1.0f;
      std::memcpy(element.data(), &v, size);
      break;
    }
    case DataType::f64: {
      const double v = second ? 1e-9 : 1.0;
      std::memcpy(element.data(), &v, size);
      break;
    }
    case DataType::f16:
    case DataType::bf16: {
      const std::uint16_t v = t == DataType::f16 ? (second ? 0x0001 : 0x3c00) : (second ? 0x0001 : 0x3f80);
      std::memcpy(element.data(), &v, size);
      break;
    }
    default: element.assign(size, static_cast<std::byte>(second ? 1 : 3));
  }
  for (std::size_t i = 0; i + size <= bytes; i += size) std::memcpy(host.data() + i, element.data(), size);
  return host;
}

struct Row {
  double copy_gbs = 0;
  double antdt_gbs = 0;
  double cub_gbs = 0;  // 0: not measured
};

Row measure(DataType t, std::size_t bytes, int warmup, int iters, cu::DeviceBuffer& a, cu::DeviceBuffer& b,
            cu::DeviceBuffer& c, cu::Stream& stream) {
  const std::size_t count = bytes / antdt::dtype_size(t);
  const std::size_t used = count * antdt::dtype_size(t);
  check(cudaMemcpy(a.data(), fill_pattern(t, used, false).data(), used, cudaMemcpyHostToDevice), "cudaMemcpy(a)");
  check(cudaMemcpy(b.data(), fill_pattern(t, used, true).data(), used, cudaMemcpyHostToDevice), "cudaMemcpy(b)");

  const auto copy = [&] {
    check(cudaMemcpyAsync(c.data(), b.data(), used, cudaMemcpyDeviceToDevice, stream.get()), "cudaMemcpyAsync");
  };
  const auto antdt_add = [&] {
    cu::device_reduce(t, antdt::ReduceOp::sum, a.data(), b.data(), count, stream.get());
  };
  const bool with_cub = antdt::perf::cub_supports(t);
  const auto cub_add = [&] {
    check(antdt::perf::cub_add_inplace(t, a.data(), b.data(), count, stream.get()), "cub::DeviceTransform");
  };

  cu::Event begin(cu::Event::Kind::timing);
  cu::Event end(cu::Event::Kind::timing);
  for (int i = 0; i < warmup; ++i) {
    time_once(stream.get(), begin, end, copy);
    time_once(stream.get(), begin, end, antdt_add);
    if (with_cub) time_once(stream.get(), begin, end, cub_add);
  }
  std::vector<double> copy_s;
  std::vector<double> antdt_s;
  std::vector<double> cub_s;
  for (int i = 0; i < iters; ++i) {
    copy_s.push_back(time_once(stream.get(), begin, end, copy));
    antdt_s.push_back(time_once(stream.get(), begin, end, antdt_add));
    if (with_cub) cub_s.push_back(time_once(stream.get(), begin, end, cub_add));
  }
  Row row;
  const double b_used = static_cast<double>(used);
  row.copy_gbs = 2 * b_used / antdt::perf::median(copy_s) / 1e9;
  row.antdt_gbs = 3 * b_used / antdt::perf::median(antdt_s) / 1e9;
  if (with_cub) row.cub_gbs = 3 * b_used / antdt::perf::median(cub_s) / 1e9;
  return row;
}

int run(int argc, char** argv) {
  CLI::App app{"GB/s of the GPU reduction kernel a += b beside a device-to-device copy"};
  std::string bytes_text = "256M";
  std::string dtypes_text = "f32,bf16";
  int warmup = 3;
  int iters = 20;
  app.add_option("-b,--bytes", bytes_text, "bytes per buffer (K/M/G suffixes)")->capture_default_str();
  app.add_option("-d,--dtypes", dtypes_text, "comma-separated data types")->capture_default_str();
  app.add_option("-w,--warmup", warmup, "untimed rounds")->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("-n,--iters", iters, "timed rounds (the median is shown)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // The perf tools' parsers (perf_common.hpp): byte counts like 256M, dtype lists like f32,bf16.
  const std::size_t bytes = antdt::perf::parse_size(bytes_text);
  const std::vector<DataType> dtypes = antdt::perf::parse_dtype_list(dtypes_text);

  if (!cu::available()) {
    std::printf("%s: skipped: no CUDA GPU available: %s\n", kTool, cu::unavailable_reason().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  const int device = cu::current_device();
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int driver = 0;
  int runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::printf("# %s: a += b, %zu bytes per buffer, median of %d timed rounds (%d warm-up)\n", kTool, bytes, iters,
              warmup);
  std::printf("# device %d: %s, %d SMs, driver %d.%d, runtime %d.%d\n", device, prop.name, prop.multiProcessorCount,
              driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  std::printf("# GB/s counts 3 x bytes for a += b (read a, read b, write a), 2 x bytes for the copy\n");
  std::printf("# target: antdt/copy >= %.2f\n", kTargetRatio);
  std::printf("%-6s %12s %12s %8s %12s %8s %s\n", "dtype", "copy_GB/s", "antdt_GB/s", "ratio", "cub_GB/s", "ratio",
              "antdt_vs_target");

  cu::DeviceBuffer a(bytes);
  cu::DeviceBuffer b(bytes);
  cu::DeviceBuffer c(bytes);
  cu::Stream stream;
  for (DataType t : dtypes) {
    const Row row = measure(t, bytes, warmup, iters, a, b, c, stream);
    const double ratio = row.antdt_gbs / row.copy_gbs;
    char cub_cells[64];
    if (row.cub_gbs > 0) {
      std::snprintf(cub_cells, sizeof cub_cells, "%12.1f %8.3f", row.cub_gbs, row.cub_gbs / row.copy_gbs);
    } else {
      std::snprintf(cub_cells, sizeof cub_cells, "%12s %8s", "-", "-");
    }
    std::printf("%-6s %12.1f %12.1f %8.3f %s %s\n", std::string(antdt::dtype_name(t)).c_str(), row.copy_gbs,
                row.antdt_gbs, ratio, cub_cells, ratio >= kTargetRatio ? "PASS" : "BELOW");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 1;
  }
}
