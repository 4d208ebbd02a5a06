// The staged path of the collectives on device buffers (docs/gpu.md, "Staged
// path"): device data moves through pinned host slots and the host algorithm runs on
// the host bytes, so it works over every transport. Elementwise collectives
// (AllReduce, Broadcast, Reduce) with their result range on the device are
// pipelined segment by segment; the others are staged whole, device buffers
// through a host copy, host buffers as they are. Each function runs the
// collective's staged part on `work` (already begun on the caller's stream);
// the caller ends the call.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"
#include "cuda/device_work.hpp"

#include <cstddef>
#include <functional>
#include <span>

namespace antdt::coll::device {

void staged_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                      std::size_t count, DataType dtype, ReduceOp op);
void staged_broadcast(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                      std::size_t count, DataType dtype, int root);
void staged_reduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                   DataType dtype, ReduceOp op, int root);
void staged_reduce_scatter(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                           std::size_t recv_count, DataType dtype, ReduceOp op);
// `recv_extent` elements of recv hold the blocks (`total` elements in all);
// where the blocks leave gaps, recv is downloaded first so they keep their contents.
void staged_allgatherv(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                       std::span<const std::size_t> counts, std::span<const std::size_t> displs, DataType dtype,
                       std::size_t recv_extent, std::size_t total);
void staged_alltoall(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                     DataType dtype);

// run_staged's body (device_collectives.hpp): `host(host_send, host_recv)` on
// host views of the buffers (send null when it is), then recv uploaded.
void staged_host_call(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, std::size_t send_bytes,
                      void* recv, std::size_t recv_bytes, bool read_recv,
                      const std::function<void(const std::byte*, std::byte*)>& host);

}  // namespace antdt::coll::device
