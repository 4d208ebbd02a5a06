#include "collectives/collectives.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/shm_common.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/suite.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/nvtx.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
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

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// The suite state when it exists: a communicator that never used groups,
// requests or send/recv has nothing queued and no group open.
SuiteState* existing_suite(detail::CommImpl& comm) {
  return comm.collective_state() ? &suite(comm) : nullptr;
}

// A blocking collective: recorded when a group is open, else run now, after
// the non-blocking collectives issued before it.
template <class Run>
void run_or_record(detail::CommImpl& comm, Run&& run) {
  if (SuiteState* state = existing_suite(comm)) {
    if (state->in_group()) {
      state->record(GroupedCollective{.run = std::function<void()>(std::forward<Run>(run))});
      return;
    }
    state->run_queued();
  }
  run();
}

RequestPtr enqueue(detail::CommImpl& comm, std::function<void()> run, const char* what) {
  SuiteState& state = suite(comm);
  ANTDT_CHECK_ARG(!state.in_group(), what,
                  ": non-blocking calls cannot be issued inside a group (the group itself runs at group_end())");
  return state.enqueue(std::move(run), what);
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

// Returns the displacements to use (displs, or the packed ones).
std::vector<std::size_t> check_allgatherv(const detail::CommImpl& comm, const void* send, const void* recv,
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
  return at;
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

// ---- running (arguments already checked) ----
// `device` (the direct GPU path, docs/gpu.md): the buffers are device memory,
// handed to the transport as they are and copied and reduced by `device`;
// null for host memory. Every run_* below takes it.
void run_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
                   CallMemory* device = nullptr) {
  const std::size_t n = count * dtype_size(dtype);
  const Algo algo = n <= kBroadcastTreeMaxBytes ? Algo::binomial_tree : Algo::chain;
  Call call(comm, Signature{Kind::broadcast, count, dtype, ReduceOp::sum, root, algo});
  if (device != nullptr) call.carry_device_payloads(*device);
  if (comm.size() == 1) {
    if (send != recv && n > 0) std::memcpy(recv, send, n);
    return;
  }
  if (algo == Algo::chain)
    broadcast_chain(call, bytes(send), bytes(recv), n, root);
  else
    broadcast_binomial_tree(call, bytes(send), bytes(recv), n, root);
}

void run_barrier(detail::CommImpl& comm) {
  Call call(comm, Signature{Kind::barrier, 0, DataType::u8, ReduceOp::sum, -1, Algo::dissemination});
  if (comm.size() > 1) barrier_dissemination(call);
}

void run_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                        ReduceOp op, CallMemory* device = nullptr) {
  Call call(comm, Signature{Kind::reduce_scatter, recv_count, dtype, op, -1, Algo::ring});
  if (device != nullptr) call.carry_device_payloads(*device);
  reduce_scatter_ring(call, bytes(send), bytes(recv), recv_count, dtype, op);
}

void run_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                    std::span<const std::size_t> displs, DataType dtype, CallMemory* device = nullptr) {
  // The counts are in the signature (as a hash), so ranks that disagree on any
  // rank's count fail at the first message instead of misplacing data.
  std::uint64_t layout = 0xcbf29ce484222325ULL;
  std::size_t total = 0;
  for (std::size_t c : counts) {
    layout = (layout ^ c) * 0x100000001b3ULL;
    total += c;
  }
  Call call(comm, Signature{Kind::allgatherv, total, dtype, ReduceOp::sum, -1, Algo::ring, layout | 1});
  if (device != nullptr) call.carry_device_payloads(*device);
  allgather_ring(call, bytes(send), bytes(recv), counts, displs, dtype_size(dtype));
}

void run_allgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype) {
  Call call(comm, Signature{Kind::allgather, send_count, dtype, ReduceOp::sum, -1, Algo::ring});
  const auto n = static_cast<std::size_t>(comm.size());
  if (n == 1) {
    if (send != recv && send_count > 0) std::memcpy(recv, send, send_count * dtype_size(dtype));
    return;
  }
  // Equal blocks: the ring's counts and displacements, built once per call.
  std::vector<std::size_t> counts(n, send_count), displs(n);
  for (std::size_t b = 0; b < n; ++b) displs[b] = b * send_count;
  allgather_ring(call, bytes(send), bytes(recv), counts, displs, dtype_size(dtype));
}

void run_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                int root, CallMemory* device = nullptr) {
  const std::size_t n = count * dtype_size(dtype);
  const Algo algo = n <= kReduceTreeMaxBytes ? Algo::binomial_tree : Algo::chain;
  Call call(comm, Signature{Kind::reduce, count, dtype, op, root, algo});
  if (device != nullptr) call.carry_device_payloads(*device);
  if (comm.size() == 1) {
    if (send != recv && n > 0) std::memcpy(recv, send, n);
    return;
  }
  if (algo == Algo::chain)
    reduce_chain(call, bytes(send), bytes(recv), count, dtype, op, root);
  else
    reduce_binomial_tree(call, bytes(send), bytes(recv), count, dtype, op, root);
}

void run_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                  CallMemory* device = nullptr) {
  const std::size_t block = count * dtype_size(dtype);
  const std::size_t total = block * static_cast<std::size_t>(comm.size());
  Call call(comm, Signature{Kind::alltoall, count, dtype, ReduceOp::sum, -1, Algo::pairwise});
  if (device != nullptr) call.carry_device_payloads(*device);
  const std::byte* from = bytes(send);
  if (send == recv && total > 0) {
    // In place: every block is overwritten before it may have been sent.
    auto copy = call.memory().scratch(call, total);
    call.memory().copy(copy.data(), bytes(send), total);
    call.memory().settle();
    from = copy.data();
  }
  alltoall_pairwise(call, from, bytes(recv), block);
}

}  // namespace

// ---------------------------------------------------------------------------
// Algorithm choice
// ---------------------------------------------------------------------------
namespace {
// The model behind ANTDT_ALGO=auto, in picoseconds: a step (one message's
// latency, header checks and wake-up) and the per-byte costs of moving and of
// reducing data through memory.
constexpr std::uint64_t kAlphaPs = 3'000'000;
constexpr std::uint64_t kBetaPsPerByte = 200;
constexpr std::uint64_t kGammaPsPerByte = 200;
}  // namespace

std::size_t recursive_doubling_max_bytes(int nranks) {
  if (nranks < 2) return 0;
  const auto n = static_cast<std::uint64_t>(nranks);
  std::uint64_t p = 1, log2p = 0;
  while (p * 2 <= n) {
    p *= 2;
    ++log2p;
  }
  const std::uint64_t fold = n != p ? 1 : 0;
  const std::uint64_t rd_steps = log2p + 2 * fold;
  const std::uint64_t rd_reductions = log2p + fold;
  const std::uint64_t ring_steps = 2 * (n - 1);
  if (ring_steps <= rd_steps) return 0;
  // Per-byte costs, times n (the ring's are multiples of 1/n).
  const std::uint64_t rd_per_byte = n * (rd_steps * kBetaPsPerByte + rd_reductions * kGammaPsPerByte);
  const std::uint64_t ring_per_byte = 2 * (n - 1) * kBetaPsPerByte + (n - 1) * kGammaPsPerByte;
  if (rd_per_byte <= ring_per_byte) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>((ring_steps - rd_steps) * kAlphaPs * n / (rd_per_byte - ring_per_byte));
}

Algo allreduce_algorithm(std::size_t count, DataType dtype, int nranks, AllreduceAlgo forced) {
  switch (forced) {
    case AllreduceAlgo::ring: return Algo::ring;
    case AllreduceAlgo::recursive_doubling: return Algo::recursive_doubling;
    case AllreduceAlgo::shm:  // beyond the shared-memory path's reach: as auto
    case AllreduceAlgo::automatic: break;
  }
  const std::size_t esize = dtype_size(dtype);
  const bool small = count <= recursive_doubling_max_bytes(nranks) / esize;
  return small && nranks > 1 ? Algo::recursive_doubling : Algo::ring;
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------
namespace {
bool shm_allowed(const detail::CommImpl& comm, detail::ShmArea area) {
  const AllreduceAlgo algo = comm.config().allreduce_algo;
  return (algo == AllreduceAlgo::automatic || algo == AllreduceAlgo::shm) && comm.size() > 1 &&
         (!comm.shm_tried(area) || comm.shm(area) != nullptr);
}
}  // namespace

bool use_shm_allreduce(const detail::CommImpl& comm, std::size_t bytes) {
  const Config& cfg = comm.config();
  return bytes <= cfg.shm_max_bytes && cfg.shm_max_bytes > 0 && shm_allowed(comm, detail::ShmArea::mailbox);
}

bool use_shm_bulk_allreduce(const detail::CommImpl& comm, std::size_t bytes) {
  const Config& cfg = comm.config();
  return bytes > cfg.shm_max_bytes && cfg.shm_bulk_bytes > 0 && shm_allowed(comm, detail::ShmArea::bulk);
}

bool use_shm_pushpull(const detail::CommImpl& comm) {
  return comm.config().shm_bulk_bytes > 0 && shm_allowed(comm, detail::ShmArea::pushpull);
}

void run_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op) {
  const std::size_t bytes_total = count * dtype_size(dtype);
  if (use_shm_allreduce(comm, bytes_total)) {
    Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::shm});
    if (shm_ready(call, detail::ShmArea::mailbox)) {
      allreduce_shm(call, bytes(send), bytes(recv), count, dtype, op);
      return;
    }
    // Set-up found no common node: every rank learnt it in this call and
    // finishes it with recursive doubling; later calls choose without shm.
    allreduce_recursive_doubling(call, bytes(send), bytes(recv), count, dtype, op);
    return;
  }
  if (use_shm_bulk_allreduce(comm, bytes_total)) {
    Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, Algo::shm_bulk});
    if (shm_ready(call, detail::ShmArea::bulk))
      allreduce_shm_bulk(call, bytes(send), bytes(recv), count, dtype, op);
    else  // as above: this call finishes with the ring on every rank
      allreduce_ring(call, bytes(send), bytes(recv), count, dtype, op);
    return;
  }
  const Algo algo = allreduce_algorithm(count, dtype, comm.size(), comm.config().allreduce_algo);
  Call call(comm, Signature{Kind::allreduce, count, dtype, op, -1, algo});
  if (comm.size() == 1) {
    const std::size_t n = count * dtype_size(dtype);
    if (send != recv && n > 0) std::memcpy(recv, send, n);
    return;
  }
  if (algo == Algo::recursive_doubling)
    allreduce_recursive_doubling(call, bytes(send), bytes(recv), count, dtype, op);
  else
    allreduce_ring(call, bytes(send), bytes(recv), count, dtype, op);
}

// ---------------------------------------------------------------------------
// Device buffers (collectives/device/device_collectives.hpp): every entry point runs
// through these, so blocking, grouped and non-blocking calls all take the
// device path when a buffer is device memory; host buffers run as before.
// ---------------------------------------------------------------------------
void plain_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                     int root, CallMemory* device) {
  run_broadcast(comm, send, recv, count, dtype, root, device);
}
void plain_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                  int root, CallMemory* device) {
  run_reduce(comm, send, recv, count, dtype, op, root, device);
}
void plain_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                          DataType dtype, ReduceOp op, CallMemory* device) {
  run_reduce_scatter(comm, send, recv, recv_count, dtype, op, device);
}
void plain_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType dtype, CallMemory* device) {
  run_allgatherv(comm, send, recv, counts, displs, dtype, device);
}
void plain_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                    CallMemory* device) {
  run_alltoall(comm, send, recv, count, dtype, device);
}

namespace {

void dispatch_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                        ReduceOp op, void* stream) {
  if (device::is_device_call(send, recv)) return device::allreduce(comm, send, recv, count, dtype, op, stream);
  device::synchronize_host_call(comm, stream, "allreduce");
  cuda::NvtxRange range("antdt allreduce");
  run_allreduce(comm, send, recv, count, dtype, op);
}
void dispatch_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                        int root, void* stream) {
  if (device::is_device_call(comm.rank() == root ? send : nullptr, recv))
    return device::broadcast(comm, send, recv, count, dtype, root, stream);
  device::synchronize_host_call(comm, stream, "broadcast");
  cuda::NvtxRange range("antdt broadcast");
  run_broadcast(comm, send, recv, count, dtype, root);
}
void dispatch_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                     ReduceOp op, int root, void* stream) {
  if (device::is_device_call(send, comm.rank() == root ? recv : nullptr))
    return device::reduce(comm, send, recv, count, dtype, op, root, stream);
  device::synchronize_host_call(comm, stream, "reduce");
  cuda::NvtxRange range("antdt reduce");
  run_reduce(comm, send, recv, count, dtype, op, root);
}
void dispatch_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                             DataType dtype, ReduceOp op, void* stream) {
  if (device::is_device_call(send, recv))
    return device::reduce_scatter(comm, send, recv, recv_count, dtype, op, stream);
  device::synchronize_host_call(comm, stream, "reduce_scatter");
  cuda::NvtxRange range("antdt reduce_scatter");
  run_reduce_scatter(comm, send, recv, recv_count, dtype, op);
}
void dispatch_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                         std::span<const std::size_t> displs, DataType dtype, void* stream = nullptr) {
  if (device::is_device_call(send, recv)) return device::allgatherv(comm, send, recv, counts, displs, dtype, stream);
  device::synchronize_host_call(comm, stream, "allgatherv");
  cuda::NvtxRange range("antdt allgatherv");
  run_allgatherv(comm, send, recv, counts, displs, dtype);
}
void dispatch_allgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype,
                        void* stream) {
  if (device::is_device_call(send, recv)) {
    const auto n = static_cast<std::size_t>(comm.size());
    std::vector<std::size_t> counts(n, send_count), displs(n);
    for (std::size_t b = 0; b < n; ++b) displs[b] = b * send_count;
    return device::allgatherv(comm, send, recv, counts, displs, dtype, stream);
  }
  device::synchronize_host_call(comm, stream, "allgather");
  cuda::NvtxRange range("antdt allgather");
  run_allgather(comm, send, recv, send_count, dtype);
}
void dispatch_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype) {
  if (device::is_device_call(send, recv)) return device::alltoall(comm, send, recv, count, dtype, nullptr);
  cuda::NvtxRange range("antdt alltoall");
  run_alltoall(comm, send, recv, count, dtype);
}

}  // namespace

void allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  allreduce_on(comm, send, recv, count, dtype, op, nullptr);
}

void allreduce_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                  ReduceOp op, void* stream) {
  check_allreduce(send, recv, count, dtype, op);
  const bool on_device = device::is_device_call(send, recv);
  if (SuiteState* state = existing_suite(comm)) {
    if (state->in_group()) {
      if (on_device)
        state->record(GroupedCollective{.run = [&comm, send, recv, count, dtype, op, stream] {
          device::allreduce(comm, send, recv, count, dtype, op, stream);
        }});
      else
        state->record(GroupedCollective{true, bytes(send), bytes(recv), count, dtype, op, {}});
      return;
    }
    state->run_queued();
  }
  dispatch_allreduce(comm, send, recv, count, dtype, op, stream);
}

void broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  broadcast_on(comm, send, recv, count, dtype, root, nullptr);
}

void broadcast_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, int root,
                  void* stream) {
  check_broadcast(comm, send, recv, count, dtype, root);
  run_or_record(comm, [&comm, send, recv, count, dtype, root, stream] {
    dispatch_broadcast(comm, send, recv, count, dtype, root, stream);
  });
}

void barrier(detail::CommImpl& comm) {
  run_or_record(comm, [&comm] { run_barrier(comm); });
}

void reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                    ReduceOp op) {
  reduce_scatter_on(comm, send, recv, recv_count, dtype, op, nullptr);
}

void reduce_scatter_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count, DataType dtype,
                       ReduceOp op, void* stream) {
  check_reduce_scatter(comm, send, recv, recv_count, dtype, op);
  run_or_record(comm, [&comm, send, recv, recv_count, dtype, op, stream] {
    dispatch_reduce_scatter(comm, send, recv, recv_count, dtype, op, stream);
  });
}

void allgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype) {
  allgather_on(comm, send, recv, send_count, dtype, nullptr);
}

void allgather_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype,
                  void* stream) {
  check_allgather(comm, send, recv, send_count, dtype);
  run_or_record(comm, [&comm, send, recv, send_count, dtype, stream] {
    dispatch_allgather(comm, send, recv, send_count, dtype, stream);
  });
}

void allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                std::span<const std::size_t> displs, DataType dtype) {
  auto at = check_allgatherv(comm, send, recv, counts, displs, dtype);
  // The closure owns copies of the counts: a recorded call runs after the caller's spans may be gone.
  run_or_record(comm, [&comm, send, recv, c = std::vector<std::size_t>(counts.begin(), counts.end()),
                       at = std::move(at), dtype] { dispatch_allgatherv(comm, send, recv, c, at, dtype); });
}

void reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
            int root) {
  reduce_on(comm, send, recv, count, dtype, op, root, nullptr);
}

void reduce_on(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
               int root, void* stream) {
  check_reduce(comm, send, recv, count, dtype, op, root);
  run_or_record(comm, [&comm, send, recv, count, dtype, op, root, stream] {
    dispatch_reduce(comm, send, recv, count, dtype, op, root, stream);
  });
}

void alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype) {
  check_alltoall(comm, send, recv, count, dtype);
  run_or_record(comm, [&comm, send, recv, count, dtype] { dispatch_alltoall(comm, send, recv, count, dtype); });
}

void send(detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer) {
  check_transfer(comm, buf, count, dtype, peer, "send");
  // The transport only reads a send's payload.
  std::span<std::byte> payload(const_cast<std::byte*>(bytes(buf)), count * dtype_size(dtype));
  SuiteState& state = suite(comm);
  if (state.in_group())
    state.record(state.post_transfer(true, payload, count, dtype, peer));
  else
    transfer_now(comm, true, payload, count, dtype, peer);
}

void recv(detail::CommImpl& comm, void* buf, std::size_t count, DataType dtype, int peer) {
  check_transfer(comm, buf, count, dtype, peer, "recv");
  std::span<std::byte> payload(bytes(buf), count * dtype_size(dtype));
  SuiteState& state = suite(comm);
  if (state.in_group())
    state.record(state.post_transfer(false, payload, count, dtype, peer));
  else
    transfer_now(comm, false, payload, count, dtype, peer);
}

void group_start(detail::CommImpl& comm) { suite(comm).group_start(); }
void group_end(detail::CommImpl& comm) { suite(comm).group_end(); }

// ---------------------------------------------------------------------------
// Non-blocking variants
// ---------------------------------------------------------------------------
RequestPtr iallreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                      ReduceOp op) {
  check_allreduce(send, recv, count, dtype, op);
  return enqueue(comm, [&comm, send, recv, count, dtype, op] { dispatch_allreduce(comm, send, recv, count, dtype, op, nullptr); },
                 "iallreduce");
}

RequestPtr ibroadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                      int root) {
  check_broadcast(comm, send, recv, count, dtype, root);
  return enqueue(comm, [&comm, send, recv, count, dtype, root] { dispatch_broadcast(comm, send, recv, count, dtype, root, nullptr); },
                 "ibroadcast");
}

RequestPtr ibarrier(detail::CommImpl& comm) {
  return enqueue(comm, [&comm] { run_barrier(comm); }, "ibarrier");
}

RequestPtr ireduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                           DataType dtype, ReduceOp op) {
  check_reduce_scatter(comm, send, recv, recv_count, dtype, op);
  return enqueue(comm, [&comm, send, recv, recv_count, dtype, op] {
    dispatch_reduce_scatter(comm, send, recv, recv_count, dtype, op, nullptr);
  }, "ireduce_scatter");
}

RequestPtr iallgather(detail::CommImpl& comm, const void* send, void* recv, std::size_t send_count, DataType dtype) {
  check_allgather(comm, send, recv, send_count, dtype);
  return enqueue(comm, [&comm, send, recv, send_count, dtype] { dispatch_allgather(comm, send, recv, send_count, dtype, nullptr); },
                 "iallgather");
}

RequestPtr iallgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, DataType dtype) {
  auto at = check_allgatherv(comm, send, recv, counts, displs, dtype);
  return enqueue(comm, [&comm, send, recv, c = std::vector<std::size_t>(counts.begin(), counts.end()),
                        at = std::move(at), dtype] { dispatch_allgatherv(comm, send, recv, c, at, dtype); },
                 "iallgatherv");
}

RequestPtr ireduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op, int root) {
  check_reduce(comm, send, recv, count, dtype, op, root);
  return enqueue(comm, [&comm, send, recv, count, dtype, op, root] {
    dispatch_reduce(comm, send, recv, count, dtype, op, root, nullptr);
  }, "ireduce");
}

RequestPtr ialltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype) {
  check_alltoall(comm, send, recv, count, dtype);
  return enqueue(comm, [&comm, send, recv, count, dtype] { dispatch_alltoall(comm, send, recv, count, dtype); },
                 "ialltoall");
}

RequestPtr isend(detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer) {
  check_transfer(comm, buf, count, dtype, peer, "isend");
  std::span<std::byte> payload(const_cast<std::byte*>(bytes(buf)), count * dtype_size(dtype));
  return suite(comm).post_transfer(true, payload, count, dtype, peer);
}

RequestPtr irecv(detail::CommImpl& comm, void* buf, std::size_t count, DataType dtype, int peer) {
  check_transfer(comm, buf, count, dtype, peer, "irecv");
  return suite(comm).post_transfer(false, std::span<std::byte>(bytes(buf), count * dtype_size(dtype)), count, dtype,
                                   peer);
}

}  // namespace antdt::coll
