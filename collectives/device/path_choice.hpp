// Which path a collective on device buffers takes (docs/gpu.md#device-buffers-in-the-collectives):
// whether the ranks exchange peer records first, and the path every rank
// derives from the records (every rank sees the same records, so every rank
// decides the same).
#pragma once

#include <antdt/comm.hpp>

#include "collectives/device/peer_record.hpp"
#include "core/config.hpp"

#include <span>

namespace antdt::coll::device {

enum class Path { staged, ipc, direct };

// Whether a call exchanges PeerRecords first (it might take the IPC or the
// direct path): never when ANTDT_GPU_PATH=staged or for a single rank.
bool exchanges_records(GpuPath setting, int nranks);

// The path every rank takes after the exchange:
//  - auto: IPC when every rank could export and all share a node; else direct
//    when every rank has device buffers and a transport that moves device
//    memory; else staged.
//  - ipc: IPC, or UnsupportedError naming the first rank in the way.
//  - direct: direct, or UnsupportedError naming the first rank in the way.
Path resolve_path(GpuPath setting, std::span<const PeerRecord> records);

}  // namespace antdt::coll::device
