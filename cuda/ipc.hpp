// CUDA IPC: a rank exports a device buffer as a handle, sends the handle's
// bytes to a peer on the same node (over the transport), and the peer maps
// the buffer into its own address space to read or reduce it directly, with
// no host staging. Several ranks on one GPU work the same way.
//
// A handle cannot be opened by the process that exported it (CUDA refuses);
// there the mapping falls back to the exporter's own pointer, which is valid
// in that process (ranks as threads of one process).
//
// Usable by code compiled without CUDA (no CUDA headers here): handles can be
// serialized anywhere; exporting and mapping throw UnsupportedError in builds
// without CUDA.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace antdt::cuda {

// Identifies a process across fork() (the pid changes) and across pid
// namespaces (the random token differs).
struct ProcessIdentity {
  std::uint64_t token = 0;
  std::int32_t pid = 0;
};
ProcessIdentity this_process() noexcept;

struct IpcHandle {
  static constexpr std::size_t kCudaHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)
  static constexpr std::uint32_t kMagic = 0x50494441;  // "ADIP"
  static constexpr std::uint16_t kVersion = 1;
  // magic, version, reserved, handle, offset, bytes, address, token, pid, device
  static constexpr std::size_t kWireBytes = 4 + 2 + 2 + kCudaHandleBytes + 8 + 8 + 8 + 8 + 4 + 4;
  using Wire = std::array<std::byte, kWireBytes>;

  std::array<std::byte, kCudaHandleBytes> cuda_handle{};  // of the whole allocation
  std::uint64_t offset = 0;            // the exported range's start, from the allocation's base
  std::uint64_t bytes = 0;             // the exported range's length
  std::uint64_t exporter_address = 0;  // the range's start in the exporter's address space
  ProcessIdentity exporter;
  std::int32_t device = -1;  // the exporter's device ordinal (in its CUDA_VISIBLE_DEVICES numbering)

  // Fixed-size little-endian encoding, to send over the transport.
  Wire serialize() const noexcept;
  // Throws InvalidArgument on a wrong size, magic or version.
  static IpcHandle deserialize(std::span<const std::byte> wire);

  bool from_this_process() const noexcept;
};

// Exports [p, p + bytes) of device memory from cudaMalloc (the range must lie
// in one allocation). Throws InvalidArgument for other memory (host, managed,
// stream-ordered pools, which cudaIpcGetMemHandle does not accept),
// UnsupportedError without CUDA.
IpcHandle ipc_export(const void* p, std::size_t bytes);

// A peer's exported range, mapped into this process on the current device
// (peer access is enabled lazily when the devices differ). Opening the same
// allocation again shares one mapping; the last owner closes it
// (cudaIpcCloseMemHandle).
class IpcMapping {
 public:
  IpcMapping() = default;
  explicit IpcMapping(const IpcHandle& handle);

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  // False when the handle came from this process and the exporter's pointer
  // is used directly.
  bool mapped() const noexcept { return allocation_ != nullptr; }

 private:
  std::shared_ptr<void> allocation_;  // the opened allocation; closes it when the last mapping goes
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace antdt::cuda
