// The path every rank derives from the peer records (path_choice.hpp).
#include "collectives/device/path_choice.hpp"

#include "core/error.hpp"

#include <string>

namespace antdt::coll::device {

bool exchanges_records(GpuPath setting, int nranks) { return setting != GpuPath::staged && nranks > 1; }

Path resolve_path(GpuPath setting, std::span<const PeerRecord> records) {
  ANTDT_CHECK_ARG(!records.empty(), "resolve_path: no peer records");
  std::string ipc_obstacle, direct_obstacle;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const PeerRecord& rec = records[r];
    if (ipc_obstacle.empty() && !rec.exportable)
      ipc_obstacle = cat("rank ", r, " cannot export its buffers for CUDA IPC (",
                         rec.reason.empty() ? "no reason given" : rec.reason, ")");
    else if (ipc_obstacle.empty() && rec.node != records[0].node)
      ipc_obstacle = cat("rank ", r, " is on another node than rank 0");
    if (direct_obstacle.empty() && !rec.device_buffers)
      direct_obstacle = cat("rank ", r, " passed host memory");
    else if (direct_obstacle.empty() && !rec.transport_moves_device_memory)
      direct_obstacle = cat("rank ", r, "'s transport cannot move device memory (UCX without CUDA support)");
  }
  if (setting == GpuPath::direct) {
    if (direct_obstacle.empty()) return Path::direct;
    raise<UnsupportedError>("ANTDT_GPU_PATH=direct, but ", direct_obstacle, "; use ANTDT_GPU_PATH=auto or staged");
  }
  if (ipc_obstacle.empty()) return Path::ipc;
  if (setting == GpuPath::ipc)
    raise<UnsupportedError>("ANTDT_GPU_PATH=ipc, but ", ipc_obstacle, "; use ANTDT_GPU_PATH=auto or staged");
  return direct_obstacle.empty() ? Path::direct : Path::staged;
}

}  // namespace antdt::coll::device
