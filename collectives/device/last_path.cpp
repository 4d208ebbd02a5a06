// The per-thread record of the paths the device collectives took (last_path.hpp).
#include "collectives/device/last_path.hpp"

namespace antdt::coll::device {
namespace {

thread_local LastPath last_allreduce = LastPath::none;
thread_local LastPath last_broadcast = LastPath::none;
thread_local LastPath last_reduce_scatter = LastPath::none;
thread_local LastPath last_allgather = LastPath::none;
thread_local LastPath last_reduce = LastPath::none;
thread_local LastPath last_alltoall = LastPath::none;

LastPath last_of(Path path) noexcept {
  switch (path) {
    case Path::ipc: return LastPath::ipc;
    case Path::direct: return LastPath::direct;
    case Path::staged: break;
  }
  return LastPath::staged;
}

}  // namespace

LastPath last_allreduce_path() noexcept { return last_allreduce; }
LastPath last_broadcast_path() noexcept { return last_broadcast; }
LastPath last_reduce_scatter_path() noexcept { return last_reduce_scatter; }
LastPath last_allgather_path() noexcept { return last_allgather; }
LastPath last_reduce_path() noexcept { return last_reduce; }
LastPath last_alltoall_path() noexcept { return last_alltoall; }

void remember_path(Kind kind, Path path) noexcept {
  const LastPath last = last_of(path);
  switch (kind) {
    case Kind::allreduce: last_allreduce = last; break;
    case Kind::broadcast: last_broadcast = last; break;
    case Kind::reduce_scatter: last_reduce_scatter = last; break;
    case Kind::allgatherv: last_allgather = last; break;
    case Kind::reduce: last_reduce = last; break;
    case Kind::alltoall: last_alltoall = last; break;
    default: break;  // no other collective has a device path
  }
}

}  // namespace antdt::coll::device
