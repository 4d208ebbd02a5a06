// The collective entry (collectives/execute.hpp): the modes of a call, the
// device/host split, and each collective's run from its selected algorithm to
// the algorithm's file. Also run_allreduce and the plain_* functions the
// device paths call: run_algorithm on records they build.
#include "collectives/execute.hpp"

#include "collectives/algorithms.hpp"
#include "collectives/checks.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/issued_calls.hpp"
#include "collectives/partial/partial_step.hpp"
#include "collectives/selection.hpp"
#include "collectives/shm_common.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "cuda/nvtx.hpp"

#include <cstring>
#include <vector>

namespace antdt::coll {
namespace {

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

// The call's name in errors ("allreduce") and the NVTX range around its run.
struct CallNames {
  const char* call;
  const char* nonblocking;
  const char* nvtx_range;
};

CallNames names_of(Kind kind) {
  switch (kind) {
    case Kind::allreduce: return {"allreduce", "iallreduce", "antdt allreduce"};
    case Kind::broadcast: return {"broadcast", "ibroadcast", "antdt broadcast"};
    case Kind::reduce: return {"reduce", "ireduce", "antdt reduce"};
    case Kind::reduce_scatter: return {"reduce_scatter", "ireduce_scatter", "antdt reduce_scatter"};
    case Kind::allgather: return {"allgather", "iallgather", "antdt allgather"};
    case Kind::allgatherv: return {"allgatherv", "iallgatherv", "antdt allgatherv"};
    case Kind::alltoall: return {"alltoall", "ialltoall", "antdt alltoall"};
    case Kind::barrier: return {"barrier", "ibarrier", nullptr};
    default: return {"collective", "non-blocking collective", nullptr};
  }
}

// Block b at element displs[b] of recv, packed in rank order when the caller gave no displacements.
std::vector<std::size_t> packed_displacements(std::span<const std::size_t> counts) {
  std::vector<std::size_t> displs(counts.size());
  std::size_t at = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    displs[b] = at;
    at += counts[b];
  }
  return displs;
}

bool on_device(const detail::CommImpl& comm, const CollectiveArgs& a) {
  switch (a.kind) {
    case Kind::broadcast: return device::is_device_call(comm.rank() == a.root ? a.send : nullptr, a.recv);
    case Kind::reduce: return device::is_device_call(a.send, comm.rank() == a.root ? a.recv : nullptr);
    case Kind::barrier: return false;
    default: return device::is_device_call(a.send, a.recv);
  }
}

void run_on_device(detail::CommImpl& comm, const CollectiveArgs& a) {
  switch (a.kind) {
    case Kind::allreduce: return device::allreduce(comm, a.send, a.recv, a.count, a.dtype, a.op, a.stream);
    case Kind::broadcast: return device::broadcast(comm, a.send, a.recv, a.count, a.dtype, a.root, a.stream);
    case Kind::reduce: return device::reduce(comm, a.send, a.recv, a.count, a.dtype, a.op, a.root, a.stream);
    case Kind::reduce_scatter:
      return device::reduce_scatter(comm, a.send, a.recv, a.count, a.dtype, a.op, a.stream);
    case Kind::allgatherv:
      return device::allgatherv(comm, a.send, a.recv, a.counts, a.displs, a.dtype, a.stream);
    case Kind::allgather: {
      // The device paths take equal blocks as the v-variant.
      const auto n = static_cast<std::size_t>(comm.size());
      std::vector<std::size_t> counts(n, a.count), displs(n);
      for (std::size_t b = 0; b < n; ++b) displs[b] = b * a.count;
      return device::allgatherv(comm, a.send, a.recv, counts, displs, a.dtype, a.stream);
    }
    case Kind::alltoall: return device::alltoall(comm, a.send, a.recv, a.count, a.dtype, nullptr);
    default: raise<InternalError>("run_on_device: no device path for call kind ", static_cast<int>(a.kind));
  }
}

// ---- each collective from its selection to its algorithm (arguments checked) ----
void run_allreduce_on_host(detail::CommImpl& comm, const CollectiveArgs& a) {
  const Selection choice = select_algorithm(comm, Kind::allreduce, a.count, a.dtype);
  Call call(comm, Signature{Kind::allreduce, a.count, a.dtype, a.op, -1, choice.algo});
  Algo algo = choice.algo;
  if ((algo == Algo::shm && !shm_ready(call, detail::ShmArea::mailbox)) ||
      (algo == Algo::shm_bulk && !shm_ready(call, detail::ShmArea::bulk))) {
    // Set-up found no common node: every rank learnt it in this call and
    // finishes it with the row's fallback; later calls choose without shm.
    algo = choice.fallback;
  } else if (comm.size() == 1) {
    const std::size_t n = a.count * dtype_size(a.dtype);
    if (a.send != a.recv && n > 0) std::memcpy(a.recv, a.send, n);
    return;
  }
  switch (algo) {
    case Algo::shm: return allreduce_shm(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
    case Algo::shm_bulk: return allreduce_shm_bulk(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
    case Algo::recursive_doubling:
      return allreduce_recursive_doubling(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
    case Algo::rabenseifner:
      return allreduce_rabenseifner(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
    case Algo::hierarchical:
      return allreduce_hierarchical(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
    default: return allreduce_ring(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op);
  }
}

// Broadcast and reduce: one rank's data to or from every rank.
void run_rooted(detail::CommImpl& comm, const CollectiveArgs& a, CallMemory* device) {
  const std::size_t n = a.count * dtype_size(a.dtype);
  const Algo algo = select_algorithm(comm, a.kind, a.count, a.dtype).algo;
  Call call(comm, Signature{a.kind, a.count, a.dtype, a.kind == Kind::reduce ? a.op : ReduceOp::sum, a.root, algo});
  if (device != nullptr) call.carry_device_payloads(*device);
  if (comm.size() == 1) {
    if (a.send != a.recv && n > 0) std::memcpy(a.recv, a.send, n);
    return;
  }
  if (a.kind == Kind::broadcast) {
    if (algo == Algo::hierarchical)
      broadcast_hierarchical(call, bytes(a.send), bytes(a.recv), n, a.root, dtype_size(a.dtype));
    else if (algo == Algo::chain)
      broadcast_chain(call, bytes(a.send), bytes(a.recv), n, a.root);
    else
      broadcast_binomial_tree(call, bytes(a.send), bytes(a.recv), n, a.root);
  } else if (algo == Algo::chain) {
    reduce_chain(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op, a.root);
  } else {
    reduce_binomial_tree(call, bytes(a.send), bytes(a.recv), a.count, a.dtype, a.op, a.root);
  }
}

void run_allgatherv(detail::CommImpl& comm, const CollectiveArgs& a, CallMemory* device) {
  // The counts are in the signature (as a hash), so ranks that disagree on any
  // rank's count fail at the first message instead of misplacing data.
  std::uint64_t layout = hash::kSeed;
  std::size_t total = 0;
  for (std::size_t c : a.counts) {
    layout = hash::mix(layout, c);
    total += c;
  }
  const Algo algo = select_algorithm(comm, Kind::allgatherv, total, a.dtype).algo;
  Call call(comm, Signature{Kind::allgatherv, total, a.dtype, ReduceOp::sum, -1, algo, hash::nonzero(layout)});
  if (device != nullptr) call.carry_device_payloads(*device);
  if (algo == Algo::hierarchical)
    return allgather_hierarchical(call, bytes(a.send), bytes(a.recv), a.counts, a.displs, dtype_size(a.dtype));
  allgather_ring(call, bytes(a.send), bytes(a.recv), a.counts, a.displs, dtype_size(a.dtype));
}

void run_allgather(detail::CommImpl& comm, const CollectiveArgs& a) {
  const Algo algo = select_algorithm(comm, Kind::allgather, a.count, a.dtype).algo;
  Call call(comm, Signature{Kind::allgather, a.count, a.dtype, ReduceOp::sum, -1, algo});
  const auto n = static_cast<std::size_t>(comm.size());
  if (n == 1) {
    if (a.send != a.recv && a.count > 0) std::memcpy(a.recv, a.send, a.count * dtype_size(a.dtype));
    return;
  }
  if (algo == Algo::recursive_doubling)
    return allgather_doubling(call, bytes(a.send), bytes(a.recv), a.count, dtype_size(a.dtype));
  // Equal blocks: the ring's counts and displacements, built once per call.
  std::vector<std::size_t> counts(n, a.count), displs(n);
  for (std::size_t b = 0; b < n; ++b) displs[b] = b * a.count;
  if (algo == Algo::hierarchical)
    return allgather_hierarchical(call, bytes(a.send), bytes(a.recv), counts, displs, dtype_size(a.dtype));
  allgather_ring(call, bytes(a.send), bytes(a.recv), counts, displs, dtype_size(a.dtype));
}

void run_alltoall(detail::CommImpl& comm, const CollectiveArgs& a, CallMemory* device) {
  const std::size_t block = a.count * dtype_size(a.dtype);
  const std::size_t total = block * static_cast<std::size_t>(comm.size());
  const Algo algo = select_algorithm(comm, Kind::alltoall, a.count, a.dtype).algo;
  Call call(comm, Signature{Kind::alltoall, a.count, a.dtype, ReduceOp::sum, -1, algo});
  if (device != nullptr) call.carry_device_payloads(*device);
  const std::byte* from = bytes(a.send);
  if (a.send == a.recv && total > 0) {
    // In place: every block is overwritten before it may have been sent.
    auto copy = call.memory().scratch(call, total);
    call.memory().copy(copy.data(), bytes(a.send), total);
    call.memory().settle();
    from = copy.data();
  }
  alltoall_pairwise(call, from, bytes(a.recv), block);
}

PartialResult run_partial(detail::CommImpl& comm, const CollectiveArgs& a) {
  ANTDT_ASSERT(a.partial != nullptr);
  // Device buffers: staged whole through host memory around the host protocol.
  if (device::is_device_call(a.send, a.recv))
    return device::partial_allreduce(comm, a.send, a.recv, a.count, a.dtype, a.op, *a.partial);
  return partial_step(comm, a.send, a.recv, a.count, a.dtype, a.op, *a.partial, PartialStepKind{});
}

}  // namespace

CallOutcome execute(detail::CommImpl& comm, const CollectiveArgs& args, Mode mode) {
  if (mode == Mode::partial) return CallOutcome{nullptr, run_partial(comm, args)};
  check_args(comm, args);
  if (mode == Mode::nonblocking)
    return CallOutcome{issued_calls(comm).enqueue(DeferredCollective(args), names_of(args.kind).nonblocking), {}};
  const bool now = run_queued_or_record(comm, [&] {
    const bool fusable = args.kind == Kind::allreduce && !device::is_device_call(args.send, args.recv);
    return GroupedCall{.collective = DeferredCollective(args), .fusable = fusable};
  });
  if (!now) return {};
  run_now(comm, args);
  return {};
}

void run_now(detail::CommImpl& comm, const CollectiveArgs& args) {
  if (args.kind == Kind::barrier) return run_algorithm(comm, args);  // no buffers, no stream
  if (args.kind == Kind::allgatherv && args.displs.empty()) {
    const std::vector<std::size_t> packed = packed_displacements(args.counts);
    CollectiveArgs resolved = args;
    resolved.displs = packed;
    return run_now(comm, resolved);
  }
  if (on_device(comm, args)) return run_on_device(comm, args);
  const CallNames names = names_of(args.kind);
  device::synchronize_host_call(comm, args.stream, names.call);
  cuda::NvtxRange range(names.nvtx_range);
  run_algorithm(comm, args);
}

void run_algorithm(detail::CommImpl& comm, const CollectiveArgs& args, CallMemory* device) {
  switch (args.kind) {
    case Kind::allreduce:
      ANTDT_ASSERT(device == nullptr);
      return run_allreduce_on_host(comm, args);
    case Kind::broadcast:
    case Kind::reduce: return run_rooted(comm, args, device);
    case Kind::reduce_scatter: {
      const Algo algo = select_algorithm(comm, Kind::reduce_scatter, args.count, args.dtype).algo;
      Call call(comm, Signature{Kind::reduce_scatter, args.count, args.dtype, args.op, -1, algo});
      if (device != nullptr) call.carry_device_payloads(*device);
      if (algo == Algo::hierarchical)
        return reduce_scatter_hierarchical(call, bytes(args.send), bytes(args.recv), args.count, args.dtype, args.op);
      if (algo == Algo::recursive_halving)
        return reduce_scatter_halving(call, bytes(args.send), bytes(args.recv), args.count, args.dtype, args.op);
      return reduce_scatter_ring(call, bytes(args.send), bytes(args.recv), args.count, args.dtype, args.op);
    }
    case Kind::allgather: return run_allgather(comm, args);
    case Kind::allgatherv:
      if (args.displs.empty()) {
        const std::vector<std::size_t> packed = packed_displacements(args.counts);
        CollectiveArgs resolved = args;
        resolved.displs = packed;
        return run_allgatherv(comm, resolved, device);
      }
      return run_allgatherv(comm, args, device);
    case Kind::alltoall: return run_alltoall(comm, args, device);
    case Kind::barrier: {
      const Algo algo = select_algorithm(comm, Kind::barrier, 0, DataType::u8).algo;
      Call call(comm, Signature{Kind::barrier, 0, DataType::u8, ReduceOp::sum, -1, algo});
      if (comm.size() > 1) barrier_dissemination(call);
      return;
    }
    default: raise<InternalError>("run_algorithm: no algorithm for call kind ", static_cast<int>(args.kind));
  }
}

void run_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::allreduce, .send = send, .recv = recv, .count = count,
                                     .dtype = dtype, .op = op});
}

// ---- the device paths' host algorithms ----
void plain_broadcast(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                     int root, CallMemory* device) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::broadcast, .send = send, .recv = recv, .count = count,
                                     .dtype = dtype, .root = root}, device);
}
void plain_reduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                  int root, CallMemory* device) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::reduce, .send = send, .recv = recv, .count = count,
                                     .dtype = dtype, .op = op, .root = root}, device);
}
void plain_reduce_scatter(detail::CommImpl& comm, const void* send, void* recv, std::size_t recv_count,
                          DataType dtype, ReduceOp op, CallMemory* device) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::reduce_scatter, .send = send, .recv = recv, .count = recv_count,
                                     .dtype = dtype, .op = op}, device);
}
void plain_allgatherv(detail::CommImpl& comm, const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType dtype, CallMemory* device) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::allgatherv, .send = send, .recv = recv, .dtype = dtype,
                                     .counts = counts, .displs = displs}, device);
}
void plain_alltoall(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                    CallMemory* device) {
  run_algorithm(comm, CollectiveArgs{.kind = Kind::alltoall, .send = send, .recv = recv, .count = count,
                                     .dtype = dtype}, device);
}

}  // namespace antdt::coll
