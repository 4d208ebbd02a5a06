// Which path the last device collective of each kind on this thread took, so
// tests can check the path choice, not only the results.
#pragma once

#include "collectives/call.hpp"
#include "collectives/device/path_choice.hpp"

namespace antdt::coll::device {

enum class LastPath { none, staged, ipc, direct };
LastPath last_allreduce_path() noexcept;
LastPath last_broadcast_path() noexcept;
LastPath last_reduce_scatter_path() noexcept;
LastPath last_allgather_path() noexcept;
LastPath last_reduce_path() noexcept;
LastPath last_alltoall_path() noexcept;

// Notes that this thread's device collective of `kind` (allreduce,
// broadcast, reduce_scatter, allgatherv, reduce, alltoall) took `path`.
void remember_path(Kind kind, Path path) noexcept;

}  // namespace antdt::coll::device
