// Which node this process runs on, as one number: a hash of the host name and
// the kernel's boot id (two containers on one host share the boot id but not,
// usually, the host name; a rebooted host gets a new one). Ranks with equal
// identities are on one node: the shared-memory channels (core/shm_channel)
// and the device paths' CUDA IPC (collectives/device/peer_record) both ask.
#pragma once

#include <cstdint>

namespace antdt {

// Computed once per process.
std::uint64_t node_identity();

}  // namespace antdt
