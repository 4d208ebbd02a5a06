// The device path's peer record (collectives/device/peer_record): the fixed
// size record every rank receives from its peers before a collective on
// device buffers. A record that deserializes must serialize and deserialize
// to the same fields.
#include "collectives/device/peer_record.hpp"
#include "tests/fuzz/fuzz_target.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using antdt::coll::device::PeerRecord;
  antdt::fuzz::refuse_cleanly([&] {
    const PeerRecord record = PeerRecord::deserialize(antdt::fuzz::as_bytes(data, size));
    const PeerRecord again = PeerRecord::deserialize(record.serialize());
    if (again.reason != record.reason || again.node != record.node || again.exportable != record.exportable ||
        again.device_buffers != record.device_buffers ||
        again.transport_moves_device_memory != record.transport_moves_device_memory)
      std::abort();
  });
  return 0;
}
