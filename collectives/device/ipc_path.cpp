// The IPC path: what each rank exports, and the copies and reductions from
// the peers' mapped buffers (ipc_path.hpp).
#include "collectives/device/ipc_path.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/call.hpp"
#include "collectives/device/backend.hpp"
#include "collectives/device/device_call.hpp"
#include "core/dtype.hpp"
#include "core/node_identity.hpp"
#include "core/error.hpp"
#include "cuda/nvtx.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace antdt::coll::device {
namespace {

// The signature layout of the barrier between an IPC AllReduce's reduce and
// gather phases (the frame's own messages: path_agreement.hpp).
constexpr std::uint64_t kIpcReducedLayout = 0x4950430000000002ULL;

// What this rank tells its peers before an IPC call: its node, and the
// handles of `send` and `recv` (both exported, or the reason why not).
PeerRecord export_record(cuda::DeviceWork& work, const void* send, const void* recv, std::size_t bytes) {
  PeerRecord mine;
  mine.node = node_identity();
  if (!on_device(send) || !on_device(recv)) {
    mine.reason = "a buffer is host memory";
    return mine;
  }
  mine.device_buffers = true;
  std::optional<cuda::IpcHandle> send_handle = work.ipc_export(send, bytes, &mine.reason);
  std::optional<cuda::IpcHandle> recv_handle =
      send == recv ? send_handle : (send_handle ? work.ipc_export(recv, bytes, &mine.reason) : std::nullopt);
  if (send_handle && recv_handle) {
    mine.exportable = true;
    mine.send = *send_handle;
    mine.recv = *recv_handle;
  }
  return mine;
}

// A record that refuses IPC for this rank (every rank then takes another
// path, or fails with ANTDT_GPU_PATH=ipc, naming `reason`).
PeerRecord refusing_ipc(PeerRecord record, const char* reason) {
  record.exportable = false;
  record.reason = reason;
  return record;
}
// A record for a rank whose result goes to host memory: neither IPC nor the
// direct path can write it.
PeerRecord host_result(PeerRecord record) {
  record.device_buffers = false;
  return refusing_ipc(std::move(record), "a buffer is host memory");
}

// out = own (op) peer(q) for every other rank q in rank order, `count`
// elements, then the avg division: the order every IPC reduction uses.
void reduce_own_then_peers(cuda::DeviceWork& work, const detail::CommImpl& comm, DataType dtype, ReduceOp op,
                           void* out, const std::byte* own, const std::function<const std::byte*(int)>& peer,
                           std::size_t count) {
  if (count == 0) return;
  const int n = comm.size();
  bool first = true;
  for (int q = 0; q < n; ++q) {
    if (q == comm.rank()) continue;
    work.reduce_into(dtype, op, out, first ? own : as_bytes(out), peer(q), count);
    first = false;
  }
  if (op == ReduceOp::avg) work.finish_avg(dtype, out, count, static_cast<std::size_t>(n));
}

}  // namespace

Slice ipc_slice(std::size_t count, int nranks, int rank) {
  ANTDT_CHECK_ARG(nranks >= 1 && rank >= 0 && rank < nranks, "ipc_slice: rank ", rank, " of ", nranks);
  const auto n = static_cast<std::size_t>(nranks), r = static_cast<std::size_t>(rank);
  const std::size_t base = count / n, extra = count % n;
  return Slice{r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

// ---------------------------------------------------------------------------
// AllReduce (docs/gpu.md): each rank reduces its slice from every rank's send
// buffer into its recv, a barrier, then it copies the other slices from their
// owners' recv buffers (the frame's wait and barrier end it).
// ---------------------------------------------------------------------------
PeerRecord allreduce_record(cuda::DeviceWork& work, const void* send, const void* recv, std::size_t count,
                            DataType dtype) {
  return export_record(work, send, recv, count * dtype_size(dtype));
}

void ipc_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records, const void* send,
                   void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t esize = dtype_size(dtype);
  std::vector<const std::byte*> sends(static_cast<std::size_t>(n));
  std::vector<const std::byte*> recvs(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const auto i = static_cast<std::size_t>(q);
    sends[i] = q == me ? as_bytes(send) : work.ipc_map(records[i].send);
    recvs[i] = q == me ? as_bytes(recv) : work.ipc_map(records[i].recv);
  }
  {
    // Own contribution first, then the others in rank order. In place
    // this is safe: rank r writes only slice r of its own buffer, which
    // no other rank reads in this phase.
    cuda::NvtxRange range("antdt ipc reduce");
    const Slice own = ipc_slice(count, n, me);
    const std::size_t at = own.first * esize;
    reduce_own_then_peers(
        work, comm, dtype, op, as_bytes(recv) + at, sends[static_cast<std::size_t>(me)] + at,
        [&](int q) { return sends[static_cast<std::size_t>(q)] + at; }, own.count);
    wait_device(work, comm, "allreduce (ipc)", "the reduction of this rank's slice");
    Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::dissemination, kIpcReducedLayout});
    barrier_dissemination(call);
  }
  // In place, slice q of this buffer was read by rank q before the
  // barrier above; every rank has finished that.
  cuda::NvtxRange range("antdt ipc gather");
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const Slice theirs = ipc_slice(count, n, q);
    if (theirs.count == 0) continue;
    const std::size_t at = theirs.first * esize;
    work.copy(as_bytes(recv) + at, recvs[static_cast<std::size_t>(q)] + at, theirs.count * esize);
  }
}

// ---------------------------------------------------------------------------
// Broadcast: the root exports its source (send) and recv, the others their
// recv (as both); every non-root copies the root's source straight into its
// recv.
// ---------------------------------------------------------------------------
PeerRecord broadcast_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                            std::size_t count, DataType dtype, int root) {
  return export_record(work, comm.rank() == root ? send : recv, recv, count * dtype_size(dtype));
}

void ipc_broadcast(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                   const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  cuda::NvtxRange range("antdt ipc broadcast copy");
  const std::size_t bytes = count * dtype_size(dtype);
  if (comm.rank() != root)
    work.copy(recv, work.ipc_map(records[static_cast<std::size_t>(root)].send), bytes);
  else if (send != recv)
    work.copy(recv, send, bytes);
}

// ---------------------------------------------------------------------------
// Reduce: the root reduces every rank's mapped send buffer into its recv.
// ---------------------------------------------------------------------------
PeerRecord reduce_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                         std::size_t count, DataType dtype, int root) {
  PeerRecord mine = export_record(work, send, send, count * dtype_size(dtype));
  // The kernels write the root's recv.
  return comm.rank() != root || on_device(recv) ? mine : host_result(std::move(mine));
}

void ipc_reduce(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records, const void* send,
                void* recv, std::size_t count, DataType dtype, ReduceOp op, int root) {
  cuda::NvtxRange range("antdt ipc reduce");
  if (comm.rank() == root)
    reduce_own_then_peers(
        work, comm, dtype, op, recv, as_bytes(send),
        [&](int q) { return work.ipc_map(records[static_cast<std::size_t>(q)].send); }, count);
}

// ---------------------------------------------------------------------------
// ReduceScatter: rank r reduces block r from every rank's mapped send buffer
// straight into its recv. In place (recv is block r of send) rank r writes
// only its own block r, which no peer reads.
// ---------------------------------------------------------------------------
PeerRecord reduce_scatter_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                                 std::size_t recv_count, DataType dtype) {
  // Peers read this rank's send buffer; the kernels write its recv, which must be device memory too.
  const std::size_t block = recv_count * dtype_size(dtype);
  PeerRecord mine = export_record(work, send, send, block * static_cast<std::size_t>(comm.size()));
  return on_device(recv) ? mine : host_result(std::move(mine));
}

void ipc_reduce_scatter(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                        const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op) {
  cuda::NvtxRange range("antdt ipc reduce_scatter");
  const std::size_t at = static_cast<std::size_t>(comm.rank()) * recv_count * dtype_size(dtype);
  reduce_own_then_peers(
      work, comm, dtype, op, recv, as_bytes(send) + at,
      [&](int q) { return work.ipc_map(records[static_cast<std::size_t>(q)].send) + at; }, recv_count);
}

// ---------------------------------------------------------------------------
// AllGather(V): each rank copies every peer's block from the peer's mapped
// send buffer straight into its place in recv (gaps between blocks keep their
// contents). In place (send is this rank's block of recv) the own block stays
// where it is, and peers only read it.
// ---------------------------------------------------------------------------
PeerRecord allgatherv_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                             std::span<const std::size_t> counts, DataType dtype) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t mine = counts[static_cast<std::size_t>(comm.rank())] * esize;
  // A rank with nothing to give exports its recv buffer instead (a record needs a buffer).
  return export_record(work, mine > 0 ? send : recv, recv, std::max<std::size_t>(mine, esize));
}

void ipc_allgatherv(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                    const void* send, void* recv, std::span<const std::size_t> counts,
                    std::span<const std::size_t> offsets, DataType dtype) {
  cuda::NvtxRange range("antdt ipc allgather");
  const int me = comm.rank();
  const std::size_t esize = dtype_size(dtype);
  for (int q = 0; q < comm.size(); ++q) {
    const auto i = static_cast<std::size_t>(q);
    const std::size_t bytes = counts[i] * esize;
    if (bytes == 0) continue;
    std::byte* dst = as_bytes(recv) + offsets[i] * esize;
    const std::byte* src = q == me ? as_bytes(send) : work.ipc_map(records[i].send);
    if (src != dst) work.copy(dst, src, bytes);
  }
}

// ---------------------------------------------------------------------------
// AlltoAll: each rank copies block r of every peer's mapped send buffer into
// block q of its recv. In place refuses IPC (a rank would overwrite blocks
// its peers still read); the direct path copies send to scratch first.
// ---------------------------------------------------------------------------
PeerRecord alltoall_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                           std::size_t count, DataType dtype) {
  const std::size_t block = count * dtype_size(dtype);
  PeerRecord mine = export_record(work, send, recv, block * static_cast<std::size_t>(comm.size()));
  return send != recv ? mine : refusing_ipc(std::move(mine), "in place");
}

void ipc_alltoall(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                  const void* send, void* recv, std::size_t count, DataType dtype) {
  cuda::NvtxRange range("antdt ipc alltoall");
  const int me = comm.rank();
  const std::size_t block = count * dtype_size(dtype);
  const std::size_t at = static_cast<std::size_t>(me) * block;
  for (int q = 0; q < comm.size() && block > 0; ++q) {
    const auto i = static_cast<std::size_t>(q);
    const std::byte* src = q == me ? as_bytes(send) + at : work.ipc_map(records[i].send) + at;
    work.copy(as_bytes(recv) + i * block, src, block);
  }
}

}  // namespace antdt::coll::device
