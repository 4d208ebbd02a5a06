// What a rank tells its peers before a collective on device buffers may take
// the IPC or the direct path (docs/gpu.md): its node, whether its buffers are
// device memory and exported for CUDA IPC (the handles, or why not), and
// whether its transport moves device memory; and the record's fixed-size
// wire form, which every rank sends in the record exchange (fixed-width
// fields in host byte order, core/wire_codec.hpp).
#pragma once

#include "cuda/ipc.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace antdt::coll::device {

struct PeerRecord {
  static constexpr std::uint32_t kMagic = 0x52504441;  // "ADPR"
  static constexpr std::size_t kReasonBytes = 96;
  // magic, flags, node, send handle, recv handle, reason
  static constexpr std::size_t kWireBytes = 4 + 4 + 8 + 2 * cuda::IpcHandle::kWireBytes + kReasonBytes;
  using Wire = std::array<std::byte, kWireBytes>;

  bool exportable = false;  // both buffers exported (else `reason` says why not)
  // The direct path: both buffers are device memory, and this rank's
  // transport moves device memory.
  bool device_buffers = false;
  bool transport_moves_device_memory = false;
  std::uint64_t node = 0;
  cuda::IpcHandle send;  // meaningful when exportable
  cuda::IpcHandle recv;
  std::string reason;  // truncated to kReasonBytes on the wire

  Wire serialize() const noexcept;
  // Throws InvalidArgument on a wrong size or magic.
  static PeerRecord deserialize(std::span<const std::byte> wire);
};

}  // namespace antdt::coll::device
