// The IPC path of the collectives on device buffers (docs/gpu.md, "IPC
// path"), for ranks on one node: each rank exports its buffers as CUDA IPC
// handles in its peer record, maps its peers' buffers and copies or reduces
// straight from them on the device. For each collective: the record a rank
// sends (which also says whether it can take the direct path), and the
// device work of the IPC path, run by run_on_agreed_path once every rank
// agreed on it.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"
#include "collectives/device/peer_record.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <span>
#include <vector>

namespace antdt::coll::device {

// Rank r's share of an IPC AllReduce: elements [first, first + count). The
// first count % nranks ranks get one element more; the slices tile [0, count).
struct Slice {
  std::size_t first = 0;
  std::size_t count = 0;
};
Slice ipc_slice(std::size_t count, int nranks, int rank);

using PeerRecords = std::vector<PeerRecord>;

PeerRecord allreduce_record(cuda::DeviceWork& work, const void* send, const void* recv, std::size_t count,
                            DataType dtype);
void ipc_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records, const void* send,
                   void* recv, std::size_t count, DataType dtype, ReduceOp op);

PeerRecord broadcast_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                            std::size_t count, DataType dtype, int root);
void ipc_broadcast(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                   const void* send, void* recv, std::size_t count, DataType dtype, int root);

PeerRecord reduce_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                         std::size_t count, DataType dtype, int root);
void ipc_reduce(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records, const void* send,
                void* recv, std::size_t count, DataType dtype, ReduceOp op, int root);

PeerRecord reduce_scatter_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                                 std::size_t recv_count, DataType dtype);
void ipc_reduce_scatter(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                        const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op);

// `offsets` are the blocks' places in recv, in elements.
PeerRecord allgatherv_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                             std::span<const std::size_t> counts, DataType dtype);
void ipc_allgatherv(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                    const void* send, void* recv, std::span<const std::size_t> counts,
                    std::span<const std::size_t> offsets, DataType dtype);

PeerRecord alltoall_record(const detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                           std::size_t count, DataType dtype);
void ipc_alltoall(const detail::CommImpl& comm, cuda::DeviceWork& work, const PeerRecords& records,
                  const void* send, void* recv, std::size_t count, DataType dtype);

}  // namespace antdt::coll::device
