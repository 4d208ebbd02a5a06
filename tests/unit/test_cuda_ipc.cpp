// CUDA IPC (cuda/ipc.hpp): the handle's wire format and process identity on
// every machine; export, same-process fallback and a real cross-process
// mapping (this test binary re-run as a child) where a GPU is present.
#include "cuda/cuda_runtime.hpp"
#include "cuda/ipc.hpp"

#include <antdt/comm.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#if ANTDT_HAVE_CUDA
#include "cuda/device_memory.hpp"
#include "cuda/memory_type.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <spawn.h>
#include <signal.h>

extern char** environ;
#endif

namespace {

using antdt::cuda::IpcHandle;

IpcHandle sample_handle() {
  IpcHandle h;
  for (std::size_t i = 0; i < h.cuda_handle.size(); ++i) h.cuda_handle[i] = static_cast<std::byte>(i * 7 + 1);
  h.offset = 0x1234'5678'9abcULL;
  h.bytes = (std::uint64_t{5} << 33) + 3;
  h.exporter_address = 0x7f00'dead'beefULL;
  h.exporter = antdt::cuda::ProcessIdentity{0xfedc'ba98'7654'3210ULL, 424242};
  h.device = 3;
  return h;
}

TEST(CudaIpcHandle, SerializesEveryFieldAndReadsItBack) {
  const IpcHandle h = sample_handle();
  const IpcHandle::Wire wire = h.serialize();
  const IpcHandle back = IpcHandle::deserialize(wire);
  EXPECT_EQ(back.cuda_handle, h.cuda_handle);
  EXPECT_EQ(back.offset, h.offset);
  EXPECT_EQ(back.bytes, h.bytes);
  EXPECT_EQ(back.exporter_address, h.exporter_address);
  EXPECT_EQ(back.exporter.token, h.exporter.token);
  EXPECT_EQ(back.exporter.pid, h.exporter.pid);
  EXPECT_EQ(back.device, h.device);
  // Little-endian on the wire, whatever the host: the magic "ADIP" first.
  EXPECT_EQ(wire[0], std::byte{'A'});
  EXPECT_EQ(wire[1], std::byte{'D'});
  EXPECT_EQ(wire[2], std::byte{'I'});
  EXPECT_EQ(wire[3], std::byte{'P'});
}

TEST(CudaIpcHandle, MalformedBytesAreRejectedNamingTheProblem) {
  const IpcHandle::Wire wire = sample_handle().serialize();
  const auto message_for = [](std::span<const std::byte> bytes) -> std::string {
    try {
      IpcHandle::deserialize(bytes);
    } catch (const antdt::InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message_for(std::span(wire).first(wire.size() - 1)).find("bytes received"), std::string::npos);
  IpcHandle::Wire bad_magic = wire;
  bad_magic[0] = std::byte{'X'};
  EXPECT_NE(message_for(bad_magic).find("magic"), std::string::npos);
  IpcHandle::Wire bad_version = wire;
  bad_version[4] = std::byte{9};
  EXPECT_NE(message_for(bad_version).find("version"), std::string::npos);
}

TEST(CudaIpcHandle, KnowsTheProcessThatExportedIt) {
  IpcHandle h = sample_handle();
  EXPECT_FALSE(h.from_this_process());
  h.exporter = antdt::cuda::this_process();
  EXPECT_TRUE(h.from_this_process());
  IpcHandle other_pid = h;
  ++other_pid.exporter.pid;
  EXPECT_FALSE(other_pid.from_this_process()) << "same token, other pid: a forked child";
  IpcHandle other_token = h;
  ++other_token.exporter.token;
  EXPECT_FALSE(other_token.from_this_process()) << "same pid, other token: another pid namespace";
}

TEST(CudaIpcHandle, AForkedChildIsAnotherProcess) {
  IpcHandle h = sample_handle();
  h.exporter = antdt::cuda::this_process();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(h.from_this_process() ? 1 : 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(done, child) << "the child did not exit";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child took its parent's handle for its own";
}

#if !ANTDT_HAVE_CUDA

TEST(CudaIpcHandle, ExportAndMappingNeedCuda) {
  int value = 0;
  EXPECT_THROW(antdt::cuda::ipc_export(&value, sizeof value), antdt::UnsupportedError);
  EXPECT_THROW(antdt::cuda::IpcMapping{sample_handle()}, antdt::UnsupportedError);
}

#else

constexpr const char* kChildHandleVariable = "ANTDT_TEST_IPC_HANDLE";
constexpr std::size_t kAllocation = 1 << 20;
constexpr std::size_t kOffset = 4096 + 256;
constexpr std::size_t kRange = 10000;

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += kDigits[static_cast<unsigned>(b) >> 4];
    out += kDigits[static_cast<unsigned>(b) & 0xf];
  }
  return out;
}

std::vector<std::byte> from_hex(const std::string& text) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoul(text.substr(i, 2), nullptr, 16)));
  }
  return out;
}

class CudaIpc : public testing::Test {
 protected:
  void SetUp() override {
    if (!antdt::cuda::available()) GTEST_SKIP() << "no CUDA GPU available: " << antdt::cuda::unavailable_reason();
  }
};

TEST_F(CudaIpc, ExportRecordsTheRangeInsideItsAllocation) {
  antdt::cuda::DeviceBuffer buffer(kAllocation);
  const IpcHandle h = antdt::cuda::ipc_export(buffer.data() + kOffset, kRange);
  EXPECT_EQ(h.offset, kOffset);
  EXPECT_EQ(h.bytes, kRange);
  EXPECT_EQ(h.device, buffer.device());
  EXPECT_TRUE(h.from_this_process());
  EXPECT_THROW(antdt::cuda::ipc_export(buffer.data() + kOffset, kAllocation), antdt::InvalidArgument)
      << "a range past the allocation's end";
  std::vector<std::byte> host(64);
  EXPECT_THROW(antdt::cuda::ipc_export(host.data(), host.size()), antdt::InvalidArgument) << "host memory";
}

TEST_F(CudaIpc, AnotherThreadOfTheExportingProcessGetsThePointerItself) {
  antdt::cuda::DeviceBuffer buffer(kAllocation);
  const IpcHandle::Wire wire = antdt::cuda::ipc_export(buffer.data() + kOffset, kRange).serialize();
  std::byte* seen = nullptr;
  bool mapped = true;
  std::thread peer([&] {
    const antdt::cuda::IpcMapping mapping(IpcHandle::deserialize(wire));
    seen = mapping.data();
    mapped = mapping.mapped();
  });
  peer.join();
  EXPECT_EQ(seen, buffer.data() + kOffset);
  EXPECT_FALSE(mapped) << "a process cannot open its own IPC handle; it must use the pointer";
}

// Run as a child process by CudaIpc.AChildProcessMapsReadsAndWritesTheBuffer;
// skipped when run on its own.
TEST(CudaIpcChild, MapsTheParentsBuffer) {
  const char* hex = std::getenv(kChildHandleVariable);
  if (hex == nullptr) GTEST_SKIP() << "runs only as the child of CudaIpc.AChildProcessMapsReadsAndWritesTheBuffer";
  ASSERT_TRUE(antdt::cuda::available()) << antdt::cuda::unavailable_reason();
  const IpcHandle h = IpcHandle::deserialize(from_hex(hex));
  ASSERT_FALSE(h.from_this_process());
  const antdt::cuda::IpcMapping mapping(h);
  ASSERT_TRUE(mapping.mapped());
  ASSERT_EQ(mapping.size(), kRange);
  EXPECT_EQ(antdt::cuda::memory_type_of(mapping.data()), antdt::cuda::MemoryType::device);
  const antdt::cuda::IpcMapping again(h);
  EXPECT_EQ(again.data(), mapping.data()) << "the same allocation is mapped once per process";

  std::vector<std::byte> seen(kRange);
  ASSERT_EQ(cudaMemcpy(seen.data(), mapping.data(), kRange, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, std::vector<std::byte>(kRange, std::byte{0x11})) << "the parent's bytes";
  ASSERT_EQ(cudaMemset(mapping.data(), 0x22, kRange), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaIpc, AChildProcessMapsReadsAndWritesTheBuffer) {
  antdt::cuda::DeviceBuffer buffer(kAllocation);
  ASSERT_EQ(cudaMemset(buffer.data(), 0, kAllocation), cudaSuccess);
  ASSERT_EQ(cudaMemset(buffer.data() + kOffset, 0x11, kRange), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const IpcHandle h = antdt::cuda::ipc_export(buffer.data() + kOffset, kRange);

  // The child is this test binary, started fresh (a forked CUDA process could
  // not use CUDA), running only the child test, with the handle in its environment.
  const std::string handle_variable = std::string(kChildHandleVariable) + "=" + to_hex(h.serialize());
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(const_cast<char*>(handle_variable.c_str()));
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=CudaIpcChild.MapsTheParentsBuffer";
  std::vector<char*> argv{exe.data(), filter.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv.data(), env.data()), 0);

  int status = 0;
  pid_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the child process did not finish within 120 s";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child test failed (its output is above)";

  std::vector<std::byte> after(kAllocation);
  ASSERT_EQ(cudaMemcpy(after.data(), buffer.data(), kAllocation, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < kAllocation; ++i) {
    const bool in_range = i >= kOffset && i < kOffset + kRange;
    ASSERT_EQ(after[i], in_range ? std::byte{0x22} : std::byte{0}) << "byte " << i;
  }
}

#endif  // ANTDT_HAVE_CUDA

}  // namespace
