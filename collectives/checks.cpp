// The argument checks (collectives/checks.hpp): null buffers, sizes that
// overflow size_t, roots and peers out of range, send and recv overlapping
// other than in place, v-counts that do not describe one block per rank.
#include "collectives/checks.hpp"

#include "collectives/device/device_collectives.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace antdt::coll {
namespace {

void check_buffers(const void* send, const void* recv, std::size_t count, const char* what) {
  ANTDT_CHECK_ARG(count == 0 || send != nullptr, what, ": send buffer is null with count ", count);
  ANTDT_CHECK_ARG(count == 0 || recv != nullptr, what, ": recv buffer is null with count ", count);
}

void check_no_partial_overlap(const void* send, const void* recv, std::size_t bytes, const char* what) {
  auto s = reinterpret_cast<std::uintptr_t>(send), d = reinterpret_cast<std::uintptr_t>(recv);
  ANTDT_CHECK_ARG(s == d || s + bytes <= d || d + bytes <= s, what,
                  ": send and recv buffers overlap without being identical (in place needs send == recv)");
}

// a * b bytes, refusing a product that does not fit in size_t.
std::size_t checked_product(std::size_t a, std::size_t b, const char* what) {
  ANTDT_CHECK_ARG(b == 0 || a <= std::numeric_limits<std::size_t>::max() / b, what, ": ", a, " x ", b,
                  " bytes overflows size_t");
  return a * b;
}

// Send and recv regions of different sizes: either the one in-place position
// or no overlap at all.
void check_in_place_or_disjoint(const void* send, std::size_t send_bytes, const void* recv, std::size_t recv_bytes,
                                const void* in_place_send, const char* what, const char* in_place_rule) {
  if (send == in_place_send || send_bytes == 0 || recv_bytes == 0) return;
  auto s = reinterpret_cast<std::uintptr_t>(send), d = reinterpret_cast<std::uintptr_t>(recv);
  ANTDT_CHECK_ARG(s + send_bytes <= d || d + recv_bytes <= s, what,
                  ": send and recv buffers overlap without being in place (", in_place_rule, ")");
}

void check_peer(const detail::CommImpl& comm, int peer, const char* what) {
  ANTDT_CHECK_ARG(peer >= 0 && peer < comm.size(), what, ": peer ", peer, " is out of range [0, ", comm.size(), ")");
  ANTDT_CHECK_ARG(peer != comm.rank(), what, ": peer ", peer, " is this rank (a rank cannot send to itself)");
}


// ---- argument checks (everything is checked before anything is sent) ----
void check_allreduce(const void* send, const void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  check_dtype(dtype);
  check_op(op);
  check_buffers(send, recv, count, "allreduce");
  check_no_partial_overlap(send, recv, checked_product(count, dtype_size(dtype), "allreduce"), "allreduce");
}

void check_broadcast(const detail::CommImpl& comm, const void* send, const void* recv, std::size_t count,
                     DataType dtype, int root) {
  check_dtype(dtype);
  ANTDT_CHECK_ARG(root >= 0 && root < comm.size(), "broadcast: root ", root, " is out of range [0, ", comm.size(), ")");
  ANTDT_CHECK_ARG(count == 0 || recv != nullptr, "broadcast: recv buffer is null with count ", count);
  ANTDT_CHECK_ARG(count == 0 || comm.rank() != root || send != nullptr, "broadcast: the root's send buffer is null");
  const std::size_t n = checked_product(count, dtype_size(dtype), "broadcast");
  if (comm.rank() == root) check_no_partial_overlap(send, recv, n, "broadcast");
}

void check_reduce_scatter(const detail::CommImpl& comm, const void* send, const void* recv, std::size_t recv_count,
                          DataType dtype, ReduceOp op) {
  check_dtype(dtype);
  check_op(op);
  check_buffers(send, recv, recv_count, "reduce_scatter");
  const std::size_t block = checked_product(recv_count, dtype_size(dtype), "reduce_scatter");
  const std::size_t total = checked_product(block, static_cast<std::size_t>(comm.size()), "reduce_scatter");
  check_in_place_or_disjoint(send, total, recv, block,
                             static_cast<const std::byte*>(recv) - block * static_cast<std::size_t>(comm.rank()),
                             "reduce_scatter", "recv == send + rank * recv_count elements");
}

void check_allgather(const detail::CommImpl& comm, const void* send, const void* recv, std::size_t send_count,
                     DataType dtype) {
  check_dtype(dtype);
  check_buffers(send, recv, send_count, "allgather");
  const std::size_t block = checked_product(send_count, dtype_size(dtype), "allgather");
  const std::size_t total = checked_product(block, static_cast<std::size_t>(comm.size()), "allgather");
  check_in_place_or_disjoint(send, block, recv, total,
                             static_cast<const std::byte*>(recv) + block * static_cast<std::size_t>(comm.rank()),
                             "allgather", "send == recv + rank * send_count elements");
}

void check_allgatherv(const detail::CommImpl& comm, const void* send, const void* recv,
                                          std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                                          DataType dtype) {
  check_dtype(dtype);
  const auto n = static_cast<std::size_t>(comm.size());
  ANTDT_CHECK_ARG(counts.size() == n, "allgatherv: ", counts.size(), " counts for ", n, " ranks");
  ANTDT_CHECK_ARG(displs.empty() || displs.size() == n, "allgatherv: ", displs.size(), " displacements for ", n,
                  " ranks (give one per rank, or none for packed blocks)");
  const std::size_t esize = dtype_size(dtype);
  std::vector<std::size_t> at(n);
  std::size_t packed = 0, extent = 0;
  for (std::size_t b = 0; b < n; ++b) {
    at[b] = displs.empty() ? packed : displs[b];
    ANTDT_CHECK_ARG(counts[b] <= std::numeric_limits<std::size_t>::max() - at[b], "allgatherv: block ", b,
                    " ends past the largest size_t");
    packed += counts[b];
    ANTDT_CHECK_ARG(packed >= counts[b], "allgatherv: the total count overflows size_t");
    if (counts[b] > 0) extent = std::max(extent, at[b] + counts[b]);
  }
  checked_product(extent, esize, "allgatherv");
  const std::size_t mine = counts[static_cast<std::size_t>(comm.rank())];
  ANTDT_CHECK_ARG(mine == 0 || send != nullptr, "allgatherv: send buffer is null with count ", mine);
  ANTDT_CHECK_ARG(extent == 0 || recv != nullptr, "allgatherv: recv buffer is null with a total count of ", packed);
  // Blocks with data must not overlap one another in recv.
  std::vector<std::size_t> order;
  for (std::size_t b = 0; b < n; ++b)
    if (counts[b] > 0) order.push_back(b);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return at[a] < at[b]; });
  for (std::size_t i = 1; i < order.size(); ++i)
    ANTDT_CHECK_ARG(at[order[i - 1]] + counts[order[i - 1]] <= at[order[i]], "allgatherv: the blocks of ranks ",
                    order[i - 1], " and ", order[i], " overlap in recv");
  check_in_place_or_disjoint(send, mine * esize, recv, extent * esize,
                             static_cast<const std::byte*>(recv) + at[static_cast<std::size_t>(comm.rank())] * esize,
                             "allgatherv", "send == recv + displs[rank] elements");
}

void check_reduce(const detail::CommImpl& comm, const void* send, const void* recv, std::size_t count,
                  DataType dtype, ReduceOp op, int root) {
  check_dtype(dtype);
  check_op(op);
  ANTDT_CHECK_ARG(root >= 0 && root < comm.size(), "reduce: root ", root, " is out of range [0, ", comm.size(), ")");
  ANTDT_CHECK_ARG(count == 0 || send != nullptr, "reduce: send buffer is null with count ", count);
  ANTDT_CHECK_ARG(count == 0 || comm.rank() != root || recv != nullptr, "reduce: the root's recv buffer is null");
  const std::size_t n = checked_product(count, dtype_size(dtype), "reduce");
  if (comm.rank() == root) check_no_partial_overlap(send, recv, n, "reduce");
}

void check_alltoall(const detail::CommImpl& comm, const void* send, const void* recv, std::size_t count,
                    DataType dtype) {
  check_dtype(dtype);
  check_buffers(send, recv, count, "alltoall");
  const std::size_t block = checked_product(count, dtype_size(dtype), "alltoall");
  check_no_partial_overlap(send, recv, checked_product(block, static_cast<std::size_t>(comm.size()), "alltoall"),
                           "alltoall");
}

}  // namespace

void check_args(const detail::CommImpl& comm, const CollectiveArgs& a) {
  switch (a.kind) {
    case Kind::allreduce: return check_allreduce(a.send, a.recv, a.count, a.dtype, a.op);
    case Kind::broadcast: return check_broadcast(comm, a.send, a.recv, a.count, a.dtype, a.root);
    case Kind::reduce: return check_reduce(comm, a.send, a.recv, a.count, a.dtype, a.op, a.root);
    case Kind::reduce_scatter: return check_reduce_scatter(comm, a.send, a.recv, a.count, a.dtype, a.op);
    case Kind::allgather: return check_allgather(comm, a.send, a.recv, a.count, a.dtype);
    case Kind::allgatherv: return check_allgatherv(comm, a.send, a.recv, a.counts, a.displs, a.dtype);
    case Kind::alltoall: return check_alltoall(comm, a.send, a.recv, a.count, a.dtype);
    case Kind::barrier: return;
    default: break;
  }
  raise<InternalError>("check_args: no checks for call kind ", static_cast<int>(a.kind));
}

void check_transfer(const detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer,
                    const char* what) {
  check_dtype(dtype);
  check_peer(comm, peer, what);
  ANTDT_CHECK_ARG(count == 0 || buf != nullptr, what, ": buffer is null with count ", count);
  checked_product(count, dtype_size(dtype), what);
  // The host transports would read or write the device pointer directly.
  if (device::is_device_call(buf, nullptr))
    raise<UnsupportedError>(what, ": device buffers are not supported for point-to-point transfers yet (the "
                            "collectives take them; docs/gpu.md)");
}


}  // namespace antdt::coll
