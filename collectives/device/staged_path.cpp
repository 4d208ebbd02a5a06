// The staged path: whole-buffer staging and the segment pipeline around the
// host algorithms (staged_path.hpp).
#include "collectives/device/staged_path.hpp"

#include "collectives/device/backend.hpp"
#include "collectives/device/device_call.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/device/segment_pipeline.hpp"
#include "collectives/device/staged_copy.hpp"
#include "collectives/execute.hpp"
#include "core/dtype.hpp"
#include "cuda/nvtx.hpp"

#include <array>
#include <type_traits>
#include <utility>
#include <vector>

namespace antdt::coll::device {
namespace {

// ---------------------------------------------------------------------------
// Whole-buffer staging: device buffers get a host copy (kept per thread and
// reused: ranks as threads each have their own), host buffers are used as
// they are.
// ---------------------------------------------------------------------------
class WholeStaging {
 public:
  WholeStaging(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what)
      : work_(work), deadline_(deadline_of(comm)), what_(what) {}

  // A host view of [p, p + bytes): p itself for host memory, else host copy
  // `slot`, downloaded from the device when `read`.
  std::byte* host_view(std::size_t slot, const void* p, std::size_t bytes, bool read) {
    if (!on_device(p)) return const_cast<std::byte*>(as_bytes(p));
    std::vector<std::byte>& copy = copies()[slot];
    if (copy.size() < bytes) copy.resize(bytes);
    const std::span<std::byte> host(copy.data(), bytes);
    if (read && bytes > 0) download_all(work_.staging(const_cast<void*>(p), bytes), host, deadline_, what_);
    return copy.data();
  }
  // Uploads host copy `slot` into device buffer p (no-op for host memory).
  void publish(std::size_t slot, void* p, std::size_t bytes) {
    if (!on_device(p) || bytes == 0) return;
    upload_all(work_.staging(p, bytes), std::span<const std::byte>(copies()[slot].data(), bytes), deadline_, what_);
  }

 private:
  static std::array<std::vector<std::byte>, 2>& copies() {
    thread_local std::array<std::vector<std::byte>, 2> buffers;
    return buffers;
  }

  cuda::DeviceWork& work_;
  Clock::time_point deadline_;
  const char* what_;
};

// Runs `host(host_send, host_recv)` on host views of send and recv, then
// uploads recv. In place (send == recv) shares one host copy.
template <class Host>
void run_whole_staged(cuda::DeviceWork& work, detail::CommImpl& comm, const char* what, const void* send,
                      std::size_t send_bytes, void* recv, std::size_t recv_bytes, bool recv_is_read, Host&& host) {
  cuda::NvtxRange range("antdt staged (whole buffer)");
  failing_together(comm, what, [&] {
    WholeStaging staging(work, comm, what);
    std::byte* host_send = staging.host_view(0, send, send_bytes, true);
    const bool in_place = send == recv;
    std::byte* host_recv = in_place ? host_send : staging.host_view(1, recv, recv_bytes, recv_is_read);
    host(host_send, host_recv);
    staging.publish(in_place ? 0 : 1, recv, recv_bytes);
  });
}

// ---------------------------------------------------------------------------
// Segmented staging (elementwise collectives): one host collective per segment.
// ---------------------------------------------------------------------------
template <class Host>
class Segments final : public SegmentWork {
 public:
  Segments(std::size_t esize, Host host) : esize_(esize), host_(std::move(host)) {}
  void run(std::size_t, std::size_t, std::span<std::byte> host) override {
    cuda::NvtxRange range("antdt staged segment");
    host_(host.data(), host.size() / esize_);
  }

 private:
  std::size_t esize_;
  Host host_;
};

// Pipelines `host(segment bytes, element count)` over the device range
// [range, range + bytes) through the work's staging slots.
template <class Host>
void run_segmented(cuda::DeviceWork& work, detail::CommImpl& comm, const char* what, void* range, std::size_t bytes,
                   DataType dtype, bool download, bool upload, Host&& host) {
  failing_together(comm, what, [&] {
    cuda::CopyEngine& engine = work.staging(range, bytes);
    const std::size_t esize = dtype_size(dtype);
    Segments<std::decay_t<Host>> segments(esize, std::forward<Host>(host));
    run_segments(engine, bytes, segment_bytes(engine.slot_bytes(), esize), download, upload, segments,
                 deadline_of(comm), what);
  });
}

}  // namespace

void staged_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                      std::size_t count, DataType dtype, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(dtype);
  const auto host_allreduce = [&comm, dtype, op](std::byte* data, std::size_t elements) {
    run_allreduce(comm, data, data, elements, dtype, op);
  };
  if (on_device(recv)) {
    if (send != recv) work.copy(recv, send, bytes);
    run_segmented(work, comm, "allreduce (staged)", recv, bytes, dtype, true, true, host_allreduce);
  } else {
    run_whole_staged(work, comm, "allreduce (staged)", send, bytes, recv, bytes, false,
                     [&](std::byte* s, std::byte* r) { run_allreduce(comm, s, r, count, dtype, op); });
  }
}

void staged_broadcast(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                      std::size_t count, DataType dtype, int root) {
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * dtype_size(dtype);
  if (on_device(recv)) {
    // The root's data is in recv before the pipeline starts; only the root
    // downloads, only the others upload.
    if (is_root && send != recv) work.copy(recv, send, bytes);
    run_segmented(work, comm, "broadcast (staged)", recv, bytes, dtype, is_root, !is_root,
                  [&comm, dtype, root](std::byte* data, std::size_t elements) {
                    plain_broadcast(comm, data, data, elements, dtype, root);
                  });
  } else {
    run_whole_staged(work, comm, "broadcast (staged)", send, bytes, recv, bytes, false,
                     [&](std::byte* s, std::byte* r) { plain_broadcast(comm, s, r, count, dtype, root); });
  }
}

void staged_reduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                   DataType dtype, ReduceOp op, int root) {
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * dtype_size(dtype);
  const auto host = [&comm, dtype, op, root](std::byte* data, std::size_t elements) {
    plain_reduce(comm, data, data, elements, dtype, op, root);
  };
  if (is_root && on_device(recv)) {
    if (send != recv) work.copy(recv, send, bytes);
    run_segmented(work, comm, "reduce (staged)", recv, bytes, dtype, true, true, host);
  } else if (!is_root && on_device(send)) {
    // Only read: the engine downloads from send and never uploads into it.
    run_segmented(work, comm, "reduce (staged)", const_cast<void*>(send), bytes, dtype, true, false, host);
  } else {
    run_whole_staged(work, comm, "reduce (staged)", send, bytes, is_root ? recv : nullptr, is_root ? bytes : 0, false,
                     [&](std::byte* s, std::byte* r) { plain_reduce(comm, s, r, count, dtype, op, root); });
  }
}

void staged_reduce_scatter(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                           std::size_t recv_count, DataType dtype, ReduceOp op) {
  const std::size_t block = recv_count * dtype_size(dtype);
  run_whole_staged(work, comm, "reduce_scatter (staged)", send, block * static_cast<std::size_t>(comm.size()), recv,
                   block, false,
                   [&](std::byte* s, std::byte* r) { plain_reduce_scatter(comm, s, r, recv_count, dtype, op); });
}

void staged_allgatherv(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                       std::span<const std::size_t> counts, std::span<const std::size_t> displs, DataType dtype,
                       std::size_t recv_extent, std::size_t total) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t mine = counts[static_cast<std::size_t>(comm.rank())];
  run_whole_staged(work, comm, "allgather (staged)", send, mine * esize, recv, recv_extent * esize,
                   recv_extent != total,
                   [&](std::byte* s, std::byte* r) { plain_allgatherv(comm, s, r, counts, displs, dtype); });
}

void staged_alltoall(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                     DataType dtype) {
  const std::size_t total = count * dtype_size(dtype) * static_cast<std::size_t>(comm.size());
  run_whole_staged(work, comm, "alltoall (staged)", send, total, recv, total, false,
                   [&](std::byte* s, std::byte* r) { plain_alltoall(comm, s, r, count, dtype); });
}

void staged_host_call(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, std::size_t send_bytes,
                      void* recv, std::size_t recv_bytes, bool read_recv,
                      const std::function<void(const std::byte*, std::byte*)>& host) {
  run_whole_staged(work, comm, "staged call", send, send_bytes, recv, recv_bytes, read_recv,
                   [&](std::byte* s, std::byte* r) { host(send != nullptr ? s : nullptr, r); });
}

}  // namespace antdt::coll::device
