// The IPC path of the collectives on device buffers (docs/gpu.md, "IPC
// path"): how an IPC AllReduce splits the work among the ranks.
#pragma once

#include <cstddef>

namespace antdt::coll::device {

// Rank r's share of an IPC AllReduce: elements [first, first + count). The
// first count % nranks ranks get one element more; the slices tile [0, count).
struct Slice {
  std::size_t first = 0;
  std::size_t count = 0;
};
Slice ipc_slice(std::size_t count, int nranks, int rank);

}  // namespace antdt::coll::device
