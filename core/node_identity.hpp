// Which node this process runs on, as one number: a hash of the host name and
// the kernel's boot id (two containers on one host share the boot id but not,
// usually, the host name; a rebooted host gets a new one). Ranks with equal
// identities are on one node: the shared-memory channels (core/shm_channel)
// and the device paths' CUDA IPC (collectives/device/peer_record) both ask.
#pragma once

#include <cstdint>
#include <string_view>

namespace antdt {

// Computed once per process.
std::uint64_t node_identity();
// The node a rank counts as for topology-aware collectives: `node_id`
// (ANTDT_NODE_ID) when not empty -- how a launcher or a test groups ranks
// itself -- else node_identity().
std::uint64_t topology_node(std::string_view node_id);

}  // namespace antdt
