// Collectives on device buffers: the staged, IPC and direct paths
// (collectives/device/device_collectives.hpp, docs/gpu.md). Compiled in every build;
// all device work goes through cuda::DeviceBackend.
#include "collectives/device/device_collectives.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/call.hpp"
#include "collectives/collectives.hpp"
#include "collectives/device/ipc_path.hpp"
#include "collectives/device/path_choice.hpp"
#include "collectives/device/peer_record.hpp"
#include "collectives/device/segment_pipeline.hpp"
#include "collectives/device/staged_copy.hpp"
#include "collectives/suite.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/nvtx.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <optional>
#include <functional>
#include <type_traits>
#include <vector>

namespace antdt::coll::device {
namespace {

std::atomic<cuda::DeviceBackend*> backend_override{nullptr};
thread_local LastPath last_path = LastPath::none;
thread_local LastPath last_bcast_path = LastPath::none;
thread_local LastPath last_rs_path = LastPath::none;
thread_local LastPath last_ag_path = LastPath::none;
thread_local LastPath last_red_path = LastPath::none;
thread_local LastPath last_a2a_path = LastPath::none;

// The signature `layout` field of the IPC path's own messages: a rank that
// runs a host or staged AllReduce while its peers run the IPC protocol (say,
// ANTDT_GPU_PATH differs between ranks) fails with MismatchError.
constexpr std::uint64_t kIpcExchangeLayout = 0x4950430000000001ULL;
constexpr std::uint64_t kIpcReducedLayout = 0x4950430000000002ULL;
constexpr std::uint64_t kIpcDoneLayout = 0x4950430000000003ULL;
constexpr std::uint64_t kIpcBroadcastExchangeLayout = 0x4950430000000011ULL;
constexpr std::uint64_t kIpcBroadcastDoneLayout = 0x4950430000000013ULL;
constexpr std::uint64_t kIpcReduceScatterExchangeLayout = 0x4950430000000021ULL;
constexpr std::uint64_t kIpcReduceScatterDoneLayout = 0x4950430000000023ULL;
constexpr std::uint64_t kIpcAllgatherExchangeLayout = 0x4950430000000031ULL;
constexpr std::uint64_t kIpcAllgatherDoneLayout = 0x4950430000000033ULL;
constexpr std::uint64_t kIpcReduceExchangeLayout = 0x4950430000000041ULL;
constexpr std::uint64_t kIpcReduceDoneLayout = 0x4950430000000043ULL;
constexpr std::uint64_t kIpcAlltoallExchangeLayout = 0x4950430000000051ULL;
constexpr std::uint64_t kIpcAlltoallDoneLayout = 0x4950430000000053ULL;
// The direct AllReduce's ring (device payloads, no headers: checked by the
// headed record exchange that precedes it, which every rank takes alike).
constexpr std::uint64_t kDirectRingLayout = 0x4452430000000001ULL;

const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* as_bytes(void* p) { return static_cast<std::byte*>(p); }

bool on_device(const void* p) { return p != nullptr && backend().is_device(p); }

// The buffer whose device the call's work runs on.
const void* device_buffer(const void* a, const void* b) { return on_device(a) ? a : b; }

Clock::time_point deadline_of(const detail::CommImpl& comm) { return Clock::now() + comm.config().timeout; }

void wait_device(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what, const char* stage) {
  if (!work.wait(comm.config().timeout))
    raise<TimeoutError>(what, ": ", stage, " did not finish on the device within ANTDT_TIMEOUT_MS (",
                        comm.config().timeout.count(), " ms)");
}

// Ends a call: the caller's stream waits for the work; when the result is in
// host memory the host waits too, since the caller may read it at once.
void finish(cuda::DeviceWork& work, const detail::CommImpl& comm, const void* result, const char* what) {
  work.complete();
  if (result != nullptr && !on_device(result)) wait_device(work, comm, what, "copying the result to host memory");
}

// A device call that fails part-way (a CUDA error, a copy past the deadline)
// leaves its peers waiting for its messages: as Call does for transport
// failures, mark the communicator failed and tell the peers, so that they fail
// promptly instead of each waiting out ANTDT_TIMEOUT_MS. Failures that Call
// already reported are rethrown as they are.
template <class Body>
void failing_together(detail::CommImpl& comm, const char* what, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    bool reported = false;
    try {
      comm.check_usable();
    } catch (const Error&) {
      reported = true;
    }
    if (!reported) {
      const std::string reason = cat("rank ", comm.rank(), ": ", what, " failed: ", e.what());
      comm.mark_failed(e.status(), reason);
      comm.transport().abort(static_cast<int>(e.status()), reason);
    }
    throw;
  }
}

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

// ---------------------------------------------------------------------------
// IPC AllReduce
// ---------------------------------------------------------------------------

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

// Every rank's record, in rank order (an allgather on the transport, checked
// against `sig`, whose layout names the IPC protocol).
std::vector<PeerRecord> exchange_records(detail::CommImpl& comm, const PeerRecord& mine, const Signature& sig) {
  cuda::NvtxRange range("antdt ipc exchange");
  const auto n = static_cast<std::size_t>(comm.size());
  constexpr std::size_t kRecord = PeerRecord::kWireBytes;
  std::vector<std::byte> all(kRecord * n);
  std::vector<std::size_t> counts(n, kRecord), displs(n);
  for (std::size_t r = 0; r < n; ++r) displs[r] = r * kRecord;
  PeerRecord sent = mine;
  sent.transport_moves_device_memory = comm.transport().device_payloads();
  const PeerRecord::Wire wire = sent.serialize();
  Call call(comm, sig);
  allgather_ring(call, wire.data(), all.data(), counts, displs, 1);
  std::vector<PeerRecord> records(n);
  for (std::size_t r = 0; r < n; ++r)
    records[r] = PeerRecord::deserialize(std::span<const std::byte>(all).subspan(r * kRecord, kRecord));
  return records;
}

// The direct path's memory: the device buffers, scratch and kernels of the
// call's work; what was copied or reduced goes to the transport only once the
// host has seen the work finish (settle), since the transport reads device
// memory outside the work stream's order.
class DeviceCallMemory final : public CallMemory {
 public:
  DeviceCallMemory(cuda::DeviceWork& work, const detail::CommImpl& comm, const char* what)
      : work_(work), comm_(comm), what_(what) {}
  std::span<std::byte> scratch(Call&, std::size_t bytes) override { return {work_.scratch(bytes), bytes}; }
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override { work_.copy(dst, src, bytes); }
  void reduce_into(DataType dtype, ReduceOp op, std::span<std::byte> dst, std::span<const std::byte> a,
                   std::span<const std::byte> b) override {
    if (!dst.empty()) work_.reduce_into(dtype, op, dst.data(), a.data(), b.data(), dst.size() / dtype_size(dtype));
  }
  void finish_avg(DataType dtype, std::span<std::byte> data, std::size_t nranks) override {
    if (!data.empty()) work_.finish_avg(dtype, data.data(), data.size() / dtype_size(dtype), nranks);
  }
  void settle() override { wait_device(work_, comm_, what_, "a copy or reduction before its send"); }

 private:
  cuda::DeviceWork& work_;
  const detail::CommImpl& comm_;
  const char* what_;
};

LastPath last_of(Path path) {
  switch (path) {
    case Path::ipc: return LastPath::ipc;
    case Path::direct: return LastPath::direct;
    case Path::staged: break;
  }
  return LastPath::staged;
}

// The frame of every collective's IPC and direct paths. When ANTDT_GPU_PATH
// allows either: wait until the caller's stream work is done (peers, or the
// transport, read this rank's buffers as soon as it has sent its record),
// exchange the records, and agree on the path; staged (on every rank alike)
// leaves the call to the caller. Then:
//  - ipc: `ipc` enqueues the copies or reductions from the peers' mapped
//    buffers, the host waits for them, and a barrier keeps every rank's
//    buffers unchanged until all peers have read them;
//  - direct: `direct` runs the collective's algorithm on the device buffers
//    (its Call carrying device payloads, its copies and reductions on the
//    device), and the host waits for the last kernels (the device scratch is
//    reused by the next call).
// `base` is the call's signature; the exchange and the barrier carry it with
// the protocol's own layouts, so a rank on another path fails with
// MismatchError. The direct path's bare messages carry no signature: the
// headed exchange before them is what checks that every rank is in this call.
Path run_agreed(detail::CommImpl& comm, cuda::DeviceWork& work, const char* what, const Signature& base,
                std::uint64_t exchange_layout, std::uint64_t done_layout, const std::function<PeerRecord()>& record,
                const std::function<void(const std::vector<PeerRecord>&)>& ipc,
                const std::function<void(CallMemory&)>& direct) {
  const Config& cfg = comm.config();
  if (!exchanges_records(cfg.gpu_path, comm.size())) return Path::staged;
  wait_device(work, comm, what, "the caller's stream work before the path exchange");
  Signature exchange = base, done = base;
  exchange.algo = Algo::none;
  exchange.salt = exchange_layout;
  done.algo = Algo::dissemination;
  done.salt = done_layout;
  const std::vector<PeerRecord> records = exchange_records(comm, record(), exchange);
  // Every rank decides the same here, so a refusal (UnsupportedError with
  // ANTDT_GPU_PATH=ipc or direct) leaves the communicator usable.
  const Path path = resolve_path(cfg.gpu_path, records);
  if (path == Path::staged) return path;
  failing_together(comm, what, [&] {
    if (path == Path::direct) {
      cuda::NvtxRange range("antdt direct");
      DeviceCallMemory memory(work, comm, what);
      direct(memory);
      wait_device(work, comm, what, "the last copies and reductions of the direct path");
      return;
    }
    ipc(records);
    wait_device(work, comm, what, "the copies and reductions from the peers' buffers");
    Call call(comm, done);
    barrier_dissemination(call);
  });
  return path;
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

// Broadcast. IPC: the root exports its source (send) and recv, the others
// their recv (as both); every non-root copies the root's source straight into
// its recv. Direct: the host broadcast on the device buffers (so for every
// collective below).
Path agreed_broadcast(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                   DataType dtype, int root) {
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * dtype_size(dtype);
  return run_agreed(
      comm, work, "broadcast (device)", Signature{Kind::broadcast, count, dtype, ReduceOp::sum, root},
      kIpcBroadcastExchangeLayout, kIpcBroadcastDoneLayout,
      [&] { return export_record(work, is_root ? send : recv, recv, bytes); },
      [&](const std::vector<PeerRecord>& records) {
        cuda::NvtxRange range("antdt ipc broadcast copy");
        if (!is_root)
          work.copy(recv, work.ipc_map(records[static_cast<std::size_t>(root)].send), bytes);
        else if (send != recv)
          work.copy(recv, send, bytes);
      },
      [&](CallMemory& memory) { plain_broadcast(comm, send, recv, count, dtype, root, &memory); });
}

// ReduceScatter (IPC): rank r reduces block r from every rank's mapped send
// buffer straight into its recv. In place (recv is block r of send) rank r writes
// only its own block r, which no peer reads.
Path agreed_reduce_scatter(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                        std::size_t recv_count, DataType dtype, ReduceOp op) {
  const std::size_t block = recv_count * dtype_size(dtype);
  const std::size_t at = static_cast<std::size_t>(comm.rank()) * block;
  return run_agreed(
      comm, work, "reduce_scatter (device)", Signature{Kind::reduce_scatter, recv_count, dtype, op},
      kIpcReduceScatterExchangeLayout, kIpcReduceScatterDoneLayout,
      [&] {
        // Peers read this rank's send buffer; the kernels write its recv, which must be device memory too.
        PeerRecord mine = export_record(work, send, send, block * static_cast<std::size_t>(comm.size()));
        return on_device(recv) ? mine : host_result(std::move(mine));
      },
      [&](const std::vector<PeerRecord>& records) {
        cuda::NvtxRange range("antdt ipc reduce_scatter");
        reduce_own_then_peers(
            work, comm, dtype, op, recv, as_bytes(send) + at,
            [&](int q) { return work.ipc_map(records[static_cast<std::size_t>(q)].send) + at; }, recv_count);
      },
      [&](CallMemory& memory) { plain_reduce_scatter(comm, send, recv, recv_count, dtype, op, &memory); });
}

// AllGather(V) (IPC): each rank copies every peer's block from the peer's
// mapped send buffer straight into its place in recv (gaps between blocks keep their
// contents). In place (send is this rank's block of recv) the own block stays
// where it is, and peers only read it.
Path agreed_allgatherv(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv,
                    std::span<const std::size_t> counts, std::span<const std::size_t> offsets, DataType dtype) {
  const int me = comm.rank();
  const std::size_t esize = dtype_size(dtype);
  const std::size_t mine = counts[static_cast<std::size_t>(me)] * esize;
  // The block layout is part of the signatures: ranks that disagree on it
  // fail with MismatchError at the exchange instead of reading past a peer's buffer.
  std::uint64_t layout_hash = 0x9e3779b97f4a7c15ULL;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    layout_hash = (layout_hash ^ counts[b]) * 0xff51afd7ed558ccdULL;
    layout_hash = (layout_hash ^ offsets[b]) * 0xc4ceb9fe1a85ec53ULL;
  }
  layout_hash ^= layout_hash >> 33;
  return run_agreed(
      comm, work, "allgather (device)", Signature{Kind::allgatherv, counts.size(), dtype, ReduceOp::sum},
      kIpcAllgatherExchangeLayout ^ layout_hash, kIpcAllgatherDoneLayout ^ layout_hash,
      // A rank with nothing to give exports its recv buffer instead (a record needs a buffer).
      [&] { return export_record(work, mine > 0 ? send : recv, recv, std::max<std::size_t>(mine, esize)); },
      [&](const std::vector<PeerRecord>& records) {
        cuda::NvtxRange range("antdt ipc allgather");
        for (int q = 0; q < comm.size(); ++q) {
          const auto i = static_cast<std::size_t>(q);
          const std::size_t bytes = counts[i] * esize;
          if (bytes == 0) continue;
          std::byte* dst = as_bytes(recv) + offsets[i] * esize;
          const std::byte* src = q == me ? as_bytes(send) : work.ipc_map(records[i].send);
          if (src != dst) work.copy(dst, src, bytes);
        }
      },
      [&](CallMemory& memory) { plain_allgatherv(comm, send, recv, counts, offsets, dtype, &memory); });
}

// Reduce (IPC): the root reduces every rank's mapped send buffer into its recv.
Path agreed_reduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                DataType dtype, ReduceOp op, int root) {
  const bool is_root = comm.rank() == root;
  return run_agreed(
      comm, work, "reduce (device)", Signature{Kind::reduce, count, dtype, op, root}, kIpcReduceExchangeLayout,
      kIpcReduceDoneLayout,
      [&] {
        PeerRecord mine = export_record(work, send, send, count * dtype_size(dtype));
        // The kernels write the root's recv.
        return !is_root || on_device(recv) ? mine : host_result(std::move(mine));
      },
      [&](const std::vector<PeerRecord>& records) {
        cuda::NvtxRange range("antdt ipc reduce");
        if (is_root)
          reduce_own_then_peers(
              work, comm, dtype, op, recv, as_bytes(send),
              [&](int q) { return work.ipc_map(records[static_cast<std::size_t>(q)].send); }, count);
      },
      [&](CallMemory& memory) { plain_reduce(comm, send, recv, count, dtype, op, root, &memory); });
}

// AlltoAll (IPC): each rank copies block r of every peer's mapped send buffer
// into block q of its recv. In place refuses IPC (a rank would overwrite
// blocks its peers still read); the direct path copies send to scratch first.
Path agreed_alltoall(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                  DataType dtype) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t block = count * dtype_size(dtype);
  const std::size_t at = static_cast<std::size_t>(me) * block;
  return run_agreed(
      comm, work, "alltoall (device)", Signature{Kind::alltoall, count, dtype, ReduceOp::sum}, kIpcAlltoallExchangeLayout,
      kIpcAlltoallDoneLayout,
      [&] {
        PeerRecord mine = export_record(work, send, recv, block * static_cast<std::size_t>(n));
        return send != recv ? mine : refusing_ipc(std::move(mine), "in place");
      },
      [&](const std::vector<PeerRecord>& records) {
        cuda::NvtxRange range("antdt ipc alltoall");
        for (int q = 0; q < n && block > 0; ++q) {
          const auto i = static_cast<std::size_t>(q);
          const std::byte* src = q == me ? as_bytes(send) + at : work.ipc_map(records[i].send) + at;
          work.copy(as_bytes(recv) + i * block, src, block);
        }
      },
      [&](CallMemory& memory) { plain_alltoall(comm, send, recv, count, dtype, &memory); });
}

// AllReduce. IPC (docs/gpu.md): each rank reduces its slice from every
// rank's send buffer into its recv, a barrier, then it copies the other
// slices from their owners' recv buffers (the frame's wait and barrier end
// it). Direct: the host ring on the device buffers.
Path agreed_allreduce(detail::CommImpl& comm, cuda::DeviceWork& work, const void* send, void* recv, std::size_t count,
                      DataType dtype, ReduceOp op) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t esize = dtype_size(dtype);
  return run_agreed(
      comm, work, "allreduce (device)", Signature{Kind::allreduce, count, dtype, op}, kIpcExchangeLayout,
      kIpcDoneLayout, [&] { return export_record(work, send, recv, count * esize); },
      [&](const std::vector<PeerRecord>& records) {
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
      },
      [&](CallMemory& memory) {
        // Bare messages carry no signature; the layout only names the path in errors.
        Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::ring, kDirectRingLayout});
        call.carry_device_payloads(memory);
        allreduce_ring(call, as_bytes(send), as_bytes(recv), count, dtype, op);
      });
}

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

}  // namespace

// ---------------------------------------------------------------------------
// Backend selection and dispatch helpers
// ---------------------------------------------------------------------------
cuda::DeviceBackend& backend() {
  cuda::DeviceBackend* fake = backend_override.load(std::memory_order_acquire);
  return fake != nullptr ? *fake : cuda::cuda_backend();
}

ScopedBackend::ScopedBackend(cuda::DeviceBackend& fake) noexcept
    : previous_(backend_override.exchange(&fake, std::memory_order_acq_rel)) {}
ScopedBackend::~ScopedBackend() { backend_override.store(previous_, std::memory_order_release); }

bool is_device_call(const void* a, const void* b) { return on_device(a) || on_device(b); }

void synchronize_host_call(const detail::CommImpl& comm, void* stream, const char* what) {
  if (stream == nullptr) return;
  if (!backend().synchronize(stream, comm.config().timeout))
    raise<TimeoutError>(what, ": the work on the caller's stream did not finish within ANTDT_TIMEOUT_MS (",
                        comm.config().timeout.count(), " ms)");
}

LastPath last_allreduce_path() noexcept { return last_path; }
LastPath last_broadcast_path() noexcept { return last_bcast_path; }
LastPath last_reduce_scatter_path() noexcept { return last_rs_path; }
LastPath last_allgather_path() noexcept { return last_ag_path; }
LastPath last_reduce_path() noexcept { return last_red_path; }
LastPath last_alltoall_path() noexcept { return last_a2a_path; }

// ---------------------------------------------------------------------------
// Device paths
// ---------------------------------------------------------------------------
void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
               void* stream) {
  cuda::NvtxRange range("antdt allreduce (device)");
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  if (comm.size() == 1) {
    if (send != recv) work->copy(recv, send, count * dtype_size(dtype));
    last_path = LastPath::staged;
  } else {
    const Path path = agreed_allreduce(comm, *work, send, recv, count, dtype, op);
    if (path == Path::staged) staged_allreduce(comm, *work, send, recv, count, dtype, op);
    last_path = last_of(path);
  }
  finish(*work, comm, recv, "allreduce");
}

void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
               void* stream) {
  cuda::NvtxRange range("antdt broadcast (device)");
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * dtype_size(dtype);
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(is_root ? send : nullptr, recv), stream);
  const auto host = [&comm, dtype, root](std::byte* data, std::size_t elements) {
    plain_broadcast(comm, data, data, elements, dtype, root);
  };
  const Path path = comm.size() > 1 ? agreed_broadcast(comm, *work, send, recv, count, dtype, root) : Path::staged;
  last_bcast_path = last_of(path);
  if (path == Path::staged && on_device(recv)) {
    // The root's data is in recv before the pipeline starts; only the root
    // downloads, only the others upload.
    if (is_root && send != recv) work->copy(recv, send, bytes);
    run_segmented(*work, comm, "broadcast (staged)", recv, bytes, dtype, is_root, !is_root, host);
  } else if (path == Path::staged) {
    run_whole_staged(*work, comm, "broadcast (staged)", send, bytes, recv, bytes, false,
                     [&](std::byte* s, std::byte* r) { plain_broadcast(comm, s, r, count, dtype, root); });
  }
  finish(*work, comm, recv, "broadcast");
}

void reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
            int root, void* stream) {
  cuda::NvtxRange range("antdt reduce (device)");
  const bool is_root = comm.rank() == root;
  const std::size_t bytes = count * dtype_size(dtype);
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, is_root ? recv : nullptr), stream);
  const auto host = [&comm, dtype, op, root](std::byte* data, std::size_t elements) {
    plain_reduce(comm, data, data, elements, dtype, op, root);
  };
  const Path path = comm.size() > 1 ? agreed_reduce(comm, *work, send, recv, count, dtype, op, root) : Path::staged;
  last_red_path = last_of(path);
  if (path == Path::staged) {
    if (is_root && on_device(recv)) {
      if (send != recv) work->copy(recv, send, bytes);
      run_segmented(*work, comm, "reduce (staged)", recv, bytes, dtype, true, true, host);
    } else if (!is_root && on_device(send)) {
      // Only read: the engine downloads from send and never uploads into it.
      run_segmented(*work, comm, "reduce (staged)", const_cast<void*>(send), bytes, dtype, true, false, host);
    } else {
      run_whole_staged(*work, comm, "reduce (staged)", send, bytes, is_root ? recv : nullptr, is_root ? bytes : 0,
                       false, [&](std::byte* s, std::byte* r) { plain_reduce(comm, s, r, count, dtype, op, root); });
    }
  }
  finish(*work, comm, is_root ? recv : nullptr, "reduce");
}

void reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                    ReduceOp op, void* stream) {
  cuda::NvtxRange range("antdt reduce_scatter (device)");
  const std::size_t block = recv_count * dtype_size(dtype);
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path =
      comm.size() > 1 ? agreed_reduce_scatter(comm, *work, send, recv, recv_count, dtype, op) : Path::staged;
  last_rs_path = last_of(path);
  if (path == Path::staged) {
    run_whole_staged(*work, comm, "reduce_scatter (staged)", send, block * static_cast<std::size_t>(comm.size()),
                     recv, block, false,
                     [&](std::byte* s, std::byte* r) { plain_reduce_scatter(comm, s, r, recv_count, dtype, op); });
  }
  finish(*work, comm, recv, "reduce_scatter");
}

void allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, DataType dtype, void* stream) {
  cuda::NvtxRange range("antdt allgather (device)");
  const std::size_t esize = dtype_size(dtype);
  // The recv extent; blocks that do not tile it leave gaps, which must keep
  // their contents, so then recv is downloaded first.
  std::size_t extent = 0, total = 0;
  std::vector<std::size_t> offsets(counts.size());
  for (std::size_t b = 0; b < counts.size(); ++b) {
    offsets[b] = displs.empty() ? total : displs[b];
    extent = std::max(extent, offsets[b] + counts[b]);
    total += counts[b];
  }
  const std::size_t mine = counts[static_cast<std::size_t>(comm.rank())];
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path =
      comm.size() > 1 ? agreed_allgatherv(comm, *work, send, recv, counts, offsets, dtype) : Path::staged;
  last_ag_path = last_of(path);
  if (path == Path::staged) {
    run_whole_staged(*work, comm, "allgather (staged)", send, mine * esize, recv, extent * esize, extent != total,
                     [&](std::byte* s, std::byte* r) { plain_allgatherv(comm, s, r, counts, displs, dtype); });
  }
  finish(*work, comm, recv, "allgather");
}

void alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, void* stream) {
  cuda::NvtxRange range("antdt alltoall (device)");
  const std::size_t total = count * dtype_size(dtype) * static_cast<std::size_t>(comm.size());
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  const Path path = comm.size() > 1 ? agreed_alltoall(comm, *work, send, recv, count, dtype) : Path::staged;
  last_a2a_path = last_of(path);
  if (path == Path::staged) {
    run_whole_staged(*work, comm, "alltoall (staged)", send, total, recv, total, false,
                     [&](std::byte* s, std::byte* r) { plain_alltoall(comm, s, r, count, dtype); });
  }
  finish(*work, comm, recv, "alltoall");
}

void run_staged(detail::CommImpl& comm, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                bool read_recv, void* stream, const std::function<void(const std::byte*, std::byte*)>& host) {
  std::unique_ptr<cuda::DeviceWork> work = backend().begin(device_buffer(send, recv), stream);
  run_whole_staged(*work, comm, "staged call", send, send_bytes, recv, recv_bytes, read_recv,
                   [&](std::byte* s, std::byte* r) { host(send != nullptr ? s : nullptr, r); });
  finish(*work, comm, recv, "staged call");
}

// ---------------------------------------------------------------------------
// StagedCall: segment-by-segment staging around the caller's messages
// ---------------------------------------------------------------------------
namespace {

// A segment's host side: copies between the pinned slot and the caller's host
// copy, and tells the caller (download: after the bytes landed; upload:
// before they are staged).
class CopyOutSegments final : public SegmentWork {
 public:
  CopyOutSegments(std::span<std::byte> host, const std::function<void(std::size_t)>& arrived)
      : host_(host), arrived_(arrived) {}
  void run(std::size_t, std::size_t offset, std::span<std::byte> slot) override {
    std::memcpy(host_.data() + offset, slot.data(), slot.size());
    arrived_(offset + slot.size());
  }

 private:
  std::span<std::byte> host_;
  const std::function<void(std::size_t)>& arrived_;
};

class CopyInSegments final : public SegmentWork {
 public:
  CopyInSegments(std::span<const std::byte> host, const std::function<void(std::size_t, std::size_t)>& await)
      : host_(host), await_(await) {}
  void run(std::size_t, std::size_t offset, std::span<std::byte> slot) override {
    await_(offset, offset + slot.size());
    std::memcpy(slot.data(), host_.data() + offset, slot.size());
  }

 private:
  std::span<const std::byte> host_;
  const std::function<void(std::size_t, std::size_t)>& await_;
};

}  // namespace

StagedCall::StagedCall(detail::CommImpl& comm, const void* buffer, void* stream, const char* what)
    : comm_(comm), work_(backend().begin(buffer, stream)), what_(what) {}

StagedCall::~StagedCall() = default;

void StagedCall::download(const void* device, std::span<std::byte> host,
                          const std::function<void(std::size_t)>& arrived) {
  if (host.empty()) return;
  cuda::NvtxRange range("antdt staged download (segments)");
  failing_together(comm_, what_, [&] {
    cuda::CopyEngine& engine = work_->staging(const_cast<void*>(device), host.size());
    CopyOutSegments segments(host, arrived);
    // Download only: the engine never writes the caller's device buffer.
    run_segments(engine, host.size(), segment_bytes(engine.slot_bytes(), 1), true, false, segments,
                 deadline_of(comm_), what_);
  });
}

void StagedCall::upload(void* device, std::span<const std::byte> host,
                        const std::function<void(std::size_t, std::size_t)>& await) {
  if (host.empty()) return;
  cuda::NvtxRange range("antdt staged upload (segments)");
  failing_together(comm_, what_, [&] {
    cuda::CopyEngine& engine = work_->staging(device, host.size());
    CopyInSegments segments(host, await);
    run_segments(engine, host.size(), segment_bytes(engine.slot_bytes(), 1), false, true, segments,
                 deadline_of(comm_), what_);
  });
}

void StagedCall::finish() { device::finish(*work_, comm_, nullptr, what_); }

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
