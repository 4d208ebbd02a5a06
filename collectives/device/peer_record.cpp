// The peer record's wire form (core/wire_codec.hpp; integers least
// significant byte first, whatever the host).
#include "collectives/device/peer_record.hpp"

#include "core/error.hpp"
#include "core/wire_codec.hpp"

#include <algorithm>
#include <cstring>

namespace antdt::coll::device {
namespace {

constexpr std::size_t kHandleBytes = cuda::IpcHandle::kWireBytes;
// Flags (the record's second word).
constexpr std::uint32_t kExportable = 1, kDeviceBuffers = 2, kTransportMovesDeviceMemory = 4;

}  // namespace

PeerRecord::Wire PeerRecord::serialize() const noexcept {
  wire::ByteWriter out;
  out.buffer().reserve(kWireBytes);
  out.put_le(kMagic);
  out.put_le((exportable ? kExportable : 0) | (device_buffers ? kDeviceBuffers : 0) |
             (transport_moves_device_memory ? kTransportMovesDeviceMemory : 0));
  out.put_le(node);
  if (exportable) {
    out.bytes(send.serialize());
    out.bytes(recv.serialize());
  } else {
    const std::array<std::byte, 2 * kHandleBytes> no_handles{};
    out.bytes(no_handles);
  }
  // The reason is a fixed field, padded with zero bytes (no length prefix).
  std::array<std::byte, kReasonBytes> reason_field{};
  std::memcpy(reason_field.data(), reason.data(), std::min(reason.size(), kReasonBytes));
  out.bytes(reason_field);
  Wire wire;
  std::memcpy(wire.data(), out.buffer().data(), kWireBytes);
  return wire;
}

PeerRecord PeerRecord::deserialize(std::span<const std::byte> wire) {
  // Checked here rather than by the reader: a wrong size or magic is an
  // InvalidArgument, as for the IPC handles inside.
  ANTDT_CHECK_ARG(wire.size() == kWireBytes, "device peer record of ", wire.size(), " bytes (expected ", kWireBytes,
                  ")");
  wire::ByteReader in(wire, "device peer record");
  ANTDT_CHECK_ARG(in.get_le<std::uint32_t>() == kMagic, "device peer record: wrong magic (not an antdt peer record)");
  PeerRecord rec;
  const auto flags = in.get_le<std::uint32_t>();
  ANTDT_CHECK_ARG((flags & ~(kExportable | kDeviceBuffers | kTransportMovesDeviceMemory)) == 0,
                  "device peer record: unknown flags ", flags);
  rec.exportable = (flags & kExportable) != 0;
  rec.device_buffers = (flags & kDeviceBuffers) != 0;
  rec.transport_moves_device_memory = (flags & kTransportMovesDeviceMemory) != 0;
  rec.node = in.get_le<std::uint64_t>();
  cuda::IpcHandle::Wire send_handle, recv_handle;
  in.bytes(send_handle);
  in.bytes(recv_handle);
  if (rec.exportable) {
    rec.send = cuda::IpcHandle::deserialize(send_handle);
    rec.recv = cuda::IpcHandle::deserialize(recv_handle);
  }
  std::array<char, kReasonBytes> reason_field;
  in.bytes(std::as_writable_bytes(std::span(reason_field)));
  in.done();
  rec.reason.assign(reason_field.data(), strnlen(reason_field.data(), kReasonBytes));
  return rec;
}

}  // namespace antdt::coll::device
