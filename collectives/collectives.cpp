#include "collectives/collectives.hpp"

#include "collectives/algorithms.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstring>

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

}  // namespace

void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  check_dtype(dtype);
  check_op(op);
  check_buffers(send, recv, count, "allreduce");
  const std::size_t bytes = count * dtype_size(dtype);
  ANTDT_CHECK_ARG(count == 0 || bytes / count == dtype_size(dtype), "allreduce: count ", count, " overflows size_t");
  check_no_partial_overlap(send, recv, bytes, "allreduce");
  Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::ring});
  if (comm.size() == 1) {
    if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
    return;
  }
  allreduce_ring(call, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dtype, op);
}

void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  check_dtype(dtype);
  ANTDT_CHECK_ARG(root >= 0 && root < comm.size(), "broadcast: root ", root, " is out of range [0, ", comm.size(), ")");
  ANTDT_CHECK_ARG(count == 0 || recv != nullptr, "broadcast: recv buffer is null with count ", count);
  ANTDT_CHECK_ARG(count == 0 || comm.rank() != root || send != nullptr, "broadcast: the root's send buffer is null");
  const std::size_t bytes = count * dtype_size(dtype);
  if (comm.rank() == root) check_no_partial_overlap(send, recv, bytes, "broadcast");
  const Algo algo = bytes <= kBroadcastTreeMaxBytes ? Algo::binomial_tree : Algo::chain;
  Call call(comm, Signature{Kind::broadcast, count, dtype, ReduceOp::sum, root, algo});
  const auto* s = static_cast<const std::byte*>(send);
  auto* d = static_cast<std::byte*>(recv);
  if (comm.size() == 1) {
    if (s != d && bytes > 0) std::memcpy(d, s, bytes);
    return;
  }
  if (algo == Algo::chain)
    broadcast_chain(call, s, d, bytes, root);
  else
    broadcast_binomial_tree(call, s, d, bytes, root);
}

void barrier(detail::CommImpl& comm) {
  Call call(comm, Signature{Kind::barrier, 0, DataType::u8, ReduceOp::sum, -1, Algo::dissemination});
  if (comm.size() > 1) barrier_dissemination(call);
}

}  // namespace antdt::coll
