// The IPC AllReduce's split of the work among the ranks (ipc_path.hpp).
#include "collectives/device/ipc_path.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace antdt::coll::device {

Slice ipc_slice(std::size_t count, int nranks, int rank) {
  ANTDT_CHECK_ARG(nranks >= 1 && rank >= 0 && rank < nranks, "ipc_slice: rank ", rank, " of ", nranks);
  const auto n = static_cast<std::size_t>(nranks), r = static_cast<std::size_t>(rank);
  const std::size_t base = count / n, extra = count % n;
  return Slice{r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

}  // namespace antdt::coll::device
