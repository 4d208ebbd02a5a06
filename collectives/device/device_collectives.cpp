// The entry points of the collectives on device buffers
// (device_collectives.hpp, docs/gpu.md): each begins the call's device work,
// lets the ranks agree on the IPC or the direct path (path_agreement.hpp),
// runs the staged path when they take neither, and ends the call. Compiled in
// every build; all device work goes through cuda::DeviceBackend.
#include "collectives/device/device_collectives.hpp"
#include "collectives/execute.hpp"

#include "collectives/collectives.hpp"
#include "collectives/device/device_call.hpp"
#include "collectives/device/direct_path.hpp"
#include "collectives/device/ipc_path.hpp"
#include "collectives/device/path_agreement.hpp"
#include "collectives/device/staged_path.hpp"
#include "core/dtype.hpp"
#include "core/hash.hpp"
#include "cuda/nvtx.hpp"

#include <algorithm>
#include <memory>
#include <vector>

namespace antdt::coll::device {
namespace {

// The path every rank agrees on for each collective: its record, its IPC
// work and its direct algorithm, in the frame of run_on_agreed_path.
Path agreed_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                      DataType dtype, ReduceOp op) {
  return run_on_agreed_path(
      comm, work, "allreduce (device)", Signature{Kind::allreduce, count, dtype, op}, kAllreduceAgreement,
      [&] { return allreduce_record(work, send, recv, count, dtype); },
      [&](const PeerRecords& records) { ipc_allreduce(comm, work, records, send, recv, count, dtype, op); },
      [&](CallMemory& memory) { direct_allreduce(comm, memory, send, recv, count, dtype, op); });
}

Path agreed_broadcast(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                      DataType dtype, int root) {
  return run_on_agreed_path(
      comm, work, "broadcast (device)", Signature{Kind::broadcast, count, dtype, ReduceOp::sum, root},
      kBroadcastAgreement, [&] { return broadcast_record(comm, work, send, recv, count, dtype, root); },
      [&](const PeerRecords& records) { ipc_broadcast(comm, work, records, send, recv, count, dtype, root); },
      [&](CallMemory& memory) { plain_broadcast(comm, send, recv, count, dtype, root, &memory); });
}

Path agreed_reduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                   DataType dtype, ReduceOp op, int root) {
  return run_on_agreed_path(
      comm, work, "reduce (device)", Signature{Kind::reduce, count, dtype, op, root}, kReduceAgreement,
      [&] { return reduce_record(comm, work, send, recv, count, dtype, root); },
      [&](const PeerRecords& records) { ipc_reduce(comm, work, records, send, recv, count, dtype, op, root); },
      [&](CallMemory& memory) { plain_reduce(comm, send, recv, count, dtype, op, root, &memory); });
}

Path agreed_reduce_scatter(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                           std::size_t recv_count, DataType dtype, ReduceOp op) {
  return run_on_agreed_path(
      comm, work, "reduce_scatter (device)", Signature{Kind::reduce_scatter, recv_count, dtype, op},
      kReduceScatterAgreement, [&] { return reduce_scatter_record(comm, work, send, recv, recv_count, dtype); },
      [&](const PeerRecords& records) {
        ipc_reduce_scatter(comm, work, records, send, recv, recv_count, dtype, op);
      },
      [&](CallMemory& memory) { plain_reduce_scatter(comm, send, recv, recv_count, dtype, op, &memory); });
}

// The block layout (every block's count and offset), hashed: part of the
// AllGather(V) agreement's signatures, so ranks that disagree on it fail with
// MismatchError at the exchange instead of reading past a peer's buffer.
std::uint64_t block_layout_hash(std::span<const std::size_t> counts, std::span<const std::size_t> offsets) {
  std::uint64_t h = hash::kSeed;
  for (std::size_t b = 0; b < counts.size(); ++b) h = hash::mix(hash::mix(h, counts[b]), offsets[b]);
  return h;
}

Path agreed_allgatherv(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                       std::span<const std::size_t> counts, std::span<const std::size_t> offsets, DataType dtype) {
  const std::uint64_t layout = block_layout_hash(counts, offsets);
  const AgreementLayouts layouts{hash::nonzero(hash::mix(layout, kAllgatherAgreement.exchange)),
                                 hash::nonzero(hash::mix(layout, kAllgatherAgreement.done))};
  return run_on_agreed_path(
      comm, work, "allgather (device)", Signature{Kind::allgatherv, counts.size(), dtype, ReduceOp::sum}, layouts,
      [&] { return allgatherv_record(comm, work, send, recv, counts, dtype); },
      [&](const PeerRecords& records) { ipc_allgatherv(comm, work, records, send, recv, counts, offsets, dtype); },
      [&](CallMemory& memory) { plain_allgatherv(comm, send, recv, counts, offsets, dtype, &memory); });
}

Path agreed_alltoall(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                     DataType dtype) {
  return run_on_agreed_path(
      comm, work, "alltoall (device)", Signature{Kind::alltoall, count, dtype, ReduceOp::sum}, kAlltoallAgreement,
      [&] { return alltoall_record(comm, work, send, recv, count, dtype); },
      [&](const PeerRecords& records) { ipc_alltoall(comm, work, records, send, recv, count, dtype); },
      [&](CallMemory& memory) { plain_alltoall(comm, send, recv, count, dtype, &memory); });
}

}  // namespace

void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
               void* stream) {
  cuda::NvtxRange range("antdt allreduce (device)");
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  if (comm.size() == 1) {
    if (send != recv) work->copy(recv, send, count * dtype_size(dtype));
    remember_path(Kind::allreduce, Path::staged);
  } else {
    const Path path = agreed_allreduce(comm, *work, send, recv, count, dtype, op);
    if (path == Path::staged) staged_allreduce(comm, *work, send, recv, count, dtype, op);
    remember_path(Kind::allreduce, path);
  }
  finish_call(*work, comm, recv, "allreduce");
}

void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
               void* stream) {
  cuda::NvtxRange range("antdt broadcast (device)");
  const bool is_root = comm.rank() == root;
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(is_root ? send : nullptr, recv), stream);
  const Path path = comm.size() > 1 ? agreed_broadcast(comm, *work, send, recv, count, dtype, root) : Path::staged;
  remember_path(Kind::broadcast, path);
  if (path == Path::staged) staged_broadcast(comm, *work, send, recv, count, dtype, root);
  finish_call(*work, comm, recv, "broadcast");
}

void reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
            int root, void* stream) {
  cuda::NvtxRange range("antdt reduce (device)");
  const bool is_root = comm.rank() == root;
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, is_root ? recv : nullptr), stream);
  const Path path = comm.size() > 1 ? agreed_reduce(comm, *work, send, recv, count, dtype, op, root) : Path::staged;
  remember_path(Kind::reduce, path);
  if (path == Path::staged) staged_reduce(comm, *work, send, recv, count, dtype, op, root);
  finish_call(*work, comm, is_root ? recv : nullptr, "reduce");
}

void reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                    ReduceOp op, void* stream) {
  cuda::NvtxRange range("antdt reduce_scatter (device)");
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path =
      comm.size() > 1 ? agreed_reduce_scatter(comm, *work, send, recv, recv_count, dtype, op) : Path::staged;
  remember_path(Kind::reduce_scatter, path);
  if (path == Path::staged) staged_reduce_scatter(comm, *work, send, recv, recv_count, dtype, op);
  finish_call(*work, comm, recv, "reduce_scatter");
}

void allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, DataType dtype, void* stream) {
  cuda::NvtxRange range("antdt allgather (device)");
  // The recv extent; blocks that do not tile it leave gaps, which must keep
  // their contents (the staged path then downloads recv first).
  std::size_t extent = 0, total = 0;
  std::vector<std::size_t> offsets(counts.size());
  for (std::size_t b = 0; b < counts.size(); ++b) {
    offsets[b] = displs.empty() ? total : displs[b];
    extent = std::max(extent, offsets[b] + counts[b]);
    total += counts[b];
  }
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path =
      comm.size() > 1 ? agreed_allgatherv(comm, *work, send, recv, counts, offsets, dtype) : Path::staged;
  remember_path(Kind::allgatherv, path);
  if (path == Path::staged) staged_allgatherv(comm, *work, send, recv, counts, displs, dtype, extent, total);
  finish_call(*work, comm, recv, "allgather");
}

void alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, void* stream) {
  cuda::NvtxRange range("antdt alltoall (device)");
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path = comm.size() > 1 ? agreed_alltoall(comm, *work, send, recv, count, dtype) : Path::staged;
  remember_path(Kind::alltoall, path);
  if (path == Path::staged) staged_alltoall(comm, *work, send, recv, count, dtype);
  finish_call(*work, comm, recv, "alltoall");
}

void run_staged(detail::CommImpl& comm, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                bool read_recv, void* stream, const std::function<void(const std::byte*, std::byte*)>& host) {
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  staged_host_call(comm, *work, send, send_bytes, recv, recv_bytes, read_recv, host);
  finish_call(*work, comm, recv, "staged call");
}

PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts) {
  cuda::NvtxRange range("antdt partial_allreduce (device)");
  const std::size_t bytes = count * dtype_size(dtype);
  PartialResult result;
  // recv is downloaded too: a result may leave parts of it as they were.
  run_staged(comm, send, send != nullptr ? bytes : 0, recv, bytes, true, nullptr,
             [&](const std::byte* s, std::byte* r) {
               result = coll::partial_allreduce(comm, s, r, count, dtype, op, opts);
             });
  return result;
}

}  // namespace antdt::coll::device
