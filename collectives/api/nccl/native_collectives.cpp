// Native mode: collectives, point-to-point, groups and PreMulSum operators.
#include "native.hpp"
#include "native_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

namespace antdt_nccl::native {
namespace {

using antdt::DataType;
using antdt::ReduceOp;

std::string text(const char* what, const std::string& detail) { return std::string(what) + ": " + detail; }

// The checks every collective makes before it runs (NCCL's ncclInvalidArgument cases).
ncclResult_t check_buffers(ncclComm_t comm, const char* what, const void* send, const void* recv, size_t count,
                           bool need_send = true, bool need_recv = true) {
  if (count == 0) return ncclSuccess;
  if ((need_send && send == nullptr) || (need_recv && recv == nullptr))
    return fail(comm, ncclInvalidArgument, text(what, "a buffer is NULL with count " + std::to_string(count)));
  return ncclSuccess;
}

ncclResult_t check_root(ncclComm_t comm, const char* what, int root) {
  if (root < 0 || root >= comm->nranks)
    return fail(comm, ncclInvalidArgument,
                text(what, "root " + std::to_string(root) + " is not in [0, " + std::to_string(comm->nranks) + ")"));
  return ncclSuccess;
}

// IEEE half / bfloat16 <-> float, for PreMulSum's multiplication on the host.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man != 0 ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign != 0 ? -v : v;
}
std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (a < 6.103515625e-05f) return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(a * 16777216.0f)));
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  std::uint32_t mant = static_cast<std::uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  std::uint32_t exp = static_cast<std::uint32_t>(e - 1 + 15);
  if (mant == 1024) { mant = 0; ++exp; }
  return static_cast<std::uint16_t>(sign | (exp << 10) | mant);
}
float bf16_to_float(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

template <class T>
void scale_as(const void* in, std::byte* out, size_t count, double s) {
  const T* src = static_cast<const T*>(in);
  T* dst = reinterpret_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<T>(static_cast<double>(src[i]) * s);
}

// out = scalar * in, elementwise, in `dtype`.
void pre_multiply(const void* in, std::byte* out, size_t count, ncclDataType_t dtype, double s) {
  switch (dtype) {
    case ncclInt8: scale_as<std::int8_t>(in, out, count, s); break;
    case ncclUint8: scale_as<std::uint8_t>(in, out, count, s); break;
    case ncclInt32: scale_as<std::int32_t>(in, out, count, s); break;
    case ncclUint32: scale_as<std::uint32_t>(in, out, count, s); break;
    case ncclInt64: scale_as<std::int64_t>(in, out, count, s); break;
    case ncclUint64: scale_as<std::uint64_t>(in, out, count, s); break;
    case ncclFloat32: scale_as<float>(in, out, count, s); break;
    case ncclFloat64: scale_as<double>(in, out, count, s); break;
    case ncclFloat16:
    case ncclBfloat16: {
      const auto* src = static_cast<const std::uint16_t*>(in);
      auto* dst = reinterpret_cast<std::uint16_t*>(out);
      for (size_t i = 0; i < count; ++i)
        dst[i] = dtype == ncclFloat16 ? float_to_half(static_cast<float>(half_to_float(src[i]) * s))
                                      : float_to_bf16(static_cast<float>(bf16_to_float(src[i]) * s));
      break;
    }
    default: break;
  }
}

double read_scalar(const void* p, ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: return *static_cast<const std::int8_t*>(p);
    case ncclUint8: return *static_cast<const std::uint8_t*>(p);
    case ncclInt32: return *static_cast<const std::int32_t*>(p);
    case ncclUint32: return *static_cast<const std::uint32_t*>(p);
    case ncclInt64: return static_cast<double>(*static_cast<const std::int64_t*>(p));
    case ncclUint64: return static_cast<double>(*static_cast<const std::uint64_t*>(p));
    case ncclFloat16: return half_to_float(*static_cast<const std::uint16_t*>(p));
    case ncclBfloat16: return bf16_to_float(*static_cast<const std::uint16_t*>(p));
    case ncclFloat32: return *static_cast<const float*>(p);
    default: return *static_cast<const double*>(p);
  }
}

// A reduction as antdt runs it: the op, and for PreMulSum the scalar that
// multiplies the send buffer first (into scratch).
struct Reduction {
  ReduceOp op = ReduceOp::sum;
  bool premul = false;
  double scalar = 1;
};

ncclResult_t resolve(ncclComm_t comm, const char* what, ncclRedOp_t op, ncclDataType_t dtype, Reduction& out) {
  switch (op) {
    case ncclSum: out.op = ReduceOp::sum; return ncclSuccess;
    case ncclProd: out.op = ReduceOp::prod; return ncclSuccess;
    case ncclMax: out.op = ReduceOp::max; return ncclSuccess;
    case ncclMin: out.op = ReduceOp::min; return ncclSuccess;
    case ncclAvg: out.op = ReduceOp::avg; return ncclSuccess;
    default: break;
  }
  std::lock_guard lock(comm->mu);
  const auto it = comm->ops.find(static_cast<int>(op));
  if (it == comm->ops.end()) {
    comm->last_error = text(what, "unknown reduction op " + std::to_string(static_cast<int>(op)));
    return fail(nullptr, ncclInvalidArgument, comm->last_error);
  }
  if (it->second.dtype != dtype) {
    comm->last_error = text(what, "PreMulSum op was created for another datatype");
    return fail(nullptr, ncclInvalidArgument, comm->last_error);
  }
  out.op = ReduceOp::sum;
  out.premul = true;
  out.scalar = it->second.residence == ncclScalarHostImmediate ? it->second.scalar
                                                               : read_scalar(it->second.scalar_ptr, dtype);
  return ncclSuccess;
}

// The checks every reduction starts with: a usable comm, a dtype antdt has, an op.
ncclResult_t check_reduction(ncclComm_t comm, const char* what, ncclDataType_t datatype, ncclRedOp_t op, DataType& dt,
                             Reduction& red) {
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  return resolve(comm, what, op, datatype, red);
}

// The PreMulSum scratch a call keeps alive until it ran (grouped calls run
// later); none for the other ops, so a plain call allocates nothing.
std::shared_ptr<std::vector<std::byte>> premul_scratch(const Reduction& red) {
  return red.premul ? std::make_shared<std::vector<std::byte>>() : nullptr;
}

// The send buffer a reduction reads: scratch = scalar * send for PreMulSum.
const void* premultiplied(const Reduction& red, const void* send, size_t count, ncclDataType_t dtype,
                          const std::shared_ptr<std::vector<std::byte>>& scratch) {
  if (!red.premul || count == 0) return send;
  scratch->resize(count * nccl_dtype_size(dtype));
  pre_multiply(send, scratch->data(), count, dtype, red.scalar);
  return scratch->data();
}

// The Monitor's steps: each ncclAllReduce outside a group ends one (compute =
// the time between AllReduces less the collectives, measured by antdt).
void close_step(ncclComm_t comm) {
  if (!comm->comm || !shim_options().steps) return;
  if (comm->step_open) comm->comm->end_step(1);
  comm->comm->begin_step();
  comm->step_open = true;
}

void* stream_of(cudaStream_t stream) { return static_cast<void*>(stream); }

}  // namespace

ncclResult_t RedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op == nullptr || scalar == nullptr || comm == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op, scalar or comm is NULL");
  DataType dt;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: unknown residence");
  std::lock_guard lock(comm->mu);
  const int id = comm->next_op++;
  comm->ops[id] = PreMulSum{datatype, residence, residence == ncclScalarHostImmediate ? read_scalar(scalar, datatype) : 0,
                            scalar};
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ncclResult_t RedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  std::lock_guard lock(comm->mu);
  if (static_cast<int>(op) < ncclNumOps || comm->ops.erase(static_cast<int>(op)) == 0) {
    comm->last_error = "ncclRedOpDestroy: op " + std::to_string(static_cast<int>(op)) + " was not created on this comm";
    return fail(nullptr, ncclInvalidArgument, comm->last_error);
  }
  return ncclSuccess;
}

ncclResult_t AllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* what = "ncclAllReduce";
  DataType dt;
  Reduction red;
  if (ncclResult_t r = check_reduction(comm, what, datatype, op, dt, red); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count); r != ncclSuccess) return r;
  auto scratch = premul_scratch(red);
  if (group_depth() == 0 && shim_options().partial) {
    // A partial AllReduce (docs/nccl.md#antdt_nccl_latedefer): with defer no rank waits
    // for a laggard; with wait it is BSP, and its step records reach the arbiter's
    // Monitor (its summary names the slow ranks and their class at exit).
    const ncclResult_t r = guarded(comm, what, [&] {
      // Stale-synchronous (docs/nccl.md#defer): an NCCL caller cannot skip
      // compute, so a late rank calls once per step; the arbiter holds a step
      // open while closing it would put a rank more than S steps behind, and no
      // ResyncError (nor a dropped contribution) can reach the caller.
      ++comm->allreduce_calls;
      const std::tuple<size_t, int, int> signature{count, static_cast<int>(dt), static_cast<int>(red.op)};
      if (comm->partial_signature && *comm->partial_signature != signature) end_partial_run(comm);
      comm->partial_signature = signature;
      antdt::PartialOptions opts;
      opts.policy = shim_options().defer ? antdt::LatePolicy::defer : antdt::LatePolicy::wait;
      opts.staleness = shim_options().staleness;
      opts.stale_synchronous = true;
      opts.samples = 1;
      comm->comm->partial_allreduce(premultiplied(red, sendbuff, count, datatype, scratch), recvbuff, count, dt, red.op,
                                    opts);
    });
    if (r == ncclSuccess) close_step(comm);
    return r;
  }
  const ncclResult_t r = run_or_record(comm, what, [=](antdt::Communicator& c) {
    const void* send = premultiplied(red, sendbuff, count, datatype, scratch);
    if (stream != nullptr && group_depth() == 0) c.allreduce(send, recvbuff, count, dt, red.op, stream_of(stream));
    else c.allreduce(send, recvbuff, count, dt, red.op);
  });
  if (r == ncclSuccess && group_depth() == 0) guarded(comm, what, [&] { close_step(comm); });
  return r;
}

ncclResult_t Broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* what = "ncclBroadcast";
  DataType dt;
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_root(comm, what, root); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count, comm->rank == root); r != ncclSuccess) return r;
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    if (stream != nullptr && group_depth() == 0) c.broadcast(sendbuff, recvbuff, count, dt, root, stream_of(stream));
    else c.broadcast(sendbuff, recvbuff, count, dt, root);
  });
}

ncclResult_t Bcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return Broadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t Reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                    int root, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* what = "ncclReduce";
  DataType dt;
  Reduction red;
  if (ncclResult_t r = check_reduction(comm, what, datatype, op, dt, red); r != ncclSuccess) return r;
  if (ncclResult_t r = check_root(comm, what, root); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count, true, comm->rank == root); r != ncclSuccess)
    return r;
  auto scratch = premul_scratch(red);
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    const void* send = premultiplied(red, sendbuff, count, datatype, scratch);
    if (stream != nullptr && group_depth() == 0) c.reduce(send, recvbuff, count, dt, red.op, root, stream_of(stream));
    else c.reduce(send, recvbuff, count, dt, red.op, root);
  });
}

ncclResult_t ReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  constexpr const char* what = "ncclReduceScatter";
  DataType dt;
  Reduction red;
  if (ncclResult_t r = check_reduction(comm, what, datatype, op, dt, red); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, recvcount); r != ncclSuccess) return r;
  auto scratch = premul_scratch(red);
  const size_t total = recvcount * static_cast<size_t>(comm->nranks);
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    const void* send = premultiplied(red, sendbuff, total, datatype, scratch);
    if (stream != nullptr && group_depth() == 0) c.reduce_scatter(send, recvbuff, recvcount, dt, red.op, stream_of(stream));
    else c.reduce_scatter(send, recvbuff, recvcount, dt, red.op);
  });
}

ncclResult_t AllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                       cudaStream_t stream) {
  constexpr const char* what = "ncclAllGather";
  DataType dt;
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, sendcount); r != ncclSuccess) return r;
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    if (stream != nullptr && group_depth() == 0) c.allgather(sendbuff, recvbuff, sendcount, dt, stream_of(stream));
    else c.allgather(sendbuff, recvbuff, sendcount, dt);
  });
}

ncclResult_t AlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                      cudaStream_t) {
  constexpr const char* what = "ncclAlltoAll";
  DataType dt;
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count); r != ncclSuccess) return r;
  return run_or_record(comm, what, [=](antdt::Communicator& c) { c.alltoall(sendbuff, recvbuff, count, dt); });
}

// Gather and Scatter: antdt has no such collective; they are a group of
// point-to-point transfers with the root (as NCCL itself builds them).
ncclResult_t Gather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                    ncclComm_t comm, cudaStream_t) {
  constexpr const char* what = "ncclGather";
  DataType dt;
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_root(comm, what, root); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count, true, comm->rank == root); r != ncclSuccess)
    return r;
  const size_t bytes = count * nccl_dtype_size(datatype);
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    if (count == 0) return;
    c.group_start();
    if (c.rank() == root) {
      for (int r = 0; r < c.size(); ++r) {
        auto* block = static_cast<std::byte*>(recvbuff) + static_cast<size_t>(r) * bytes;
        if (r != root) c.recv(block, count, dt, r);
        else if (block != sendbuff) std::memcpy(block, sendbuff, bytes);
      }
    } else {
      c.send(sendbuff, count, dt, root);
    }
    c.group_end();
  });
}

ncclResult_t Scatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                     ncclComm_t comm, cudaStream_t) {
  constexpr const char* what = "ncclScatter";
  DataType dt;
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_root(comm, what, root); r != ncclSuccess) return r;
  if (ncclResult_t r = check_buffers(comm, what, sendbuff, recvbuff, count, comm->rank == root); r != ncclSuccess)
    return r;
  const size_t bytes = count * nccl_dtype_size(datatype);
  return run_or_record(comm, what, [=](antdt::Communicator& c) {
    if (count == 0) return;
    c.group_start();
    if (c.rank() == root) {
      for (int r = 0; r < c.size(); ++r) {
        const auto* block = static_cast<const std::byte*>(sendbuff) + static_cast<size_t>(r) * bytes;
        if (r != root) c.send(block, count, dt, r);
        else if (block != recvbuff) std::memcpy(recvbuff, block, bytes);
      }
    } else {
      c.recv(recvbuff, count, dt, root);
    }
    c.group_end();
  });
}

// The checks ncclSend and ncclRecv share: a usable communicator, a known
// dtype, a peer in range and a buffer unless count is 0.
static ncclResult_t check_point_to_point(ncclComm_t comm, const char* what, const void* buff, size_t count,
                                         ncclDataType_t datatype, int peer, DataType& dt) {
  if (ncclResult_t r = usable(comm, what); r != ncclSuccess) return r;
  if (!to_dtype(comm, datatype, dt)) return ncclInvalidArgument;
  if (ncclResult_t r = check_root(comm, what, peer); r != ncclSuccess) return r;
  return check_buffers(comm, what, buff, buff, count);
}

ncclResult_t Send(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t) {
  DataType dt;
  if (ncclResult_t r = check_point_to_point(comm, "ncclSend", sendbuff, count, datatype, peer, dt); r != ncclSuccess)
    return r;
  return run_or_record(comm, "ncclSend", [=](antdt::Communicator& c) { c.send(sendbuff, count, dt, peer); },
                       CallKind::point_to_point);
}

ncclResult_t Recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t) {
  DataType dt;
  if (ncclResult_t r = check_point_to_point(comm, "ncclRecv", recvbuff, count, datatype, peer, dt); r != ncclSuccess)
    return r;
  return run_or_record(comm, "ncclRecv", [=](antdt::Communicator& c) { c.recv(recvbuff, count, dt, peer); },
                       CallKind::point_to_point);
}

ncclResult_t GroupStart() {
  ++group_depth();
  return ncclSuccess;
}

// Runs the calls recorded since the outermost ncclGroupStart: each
// communicator's calls inside one antdt group (allreduces of one dtype and op
// fused); several communicators (ncclCommInitAll's ranks) on a thread each.
ncclResult_t GroupEnd() {
  if (group_depth() == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open");
  if (group_depth() > 1) {
    --group_depth();
    return ncclSuccess;
  }
  // The depth stays 1 while the calls run, so that they take the group's path.
  struct Close {
    ~Close() { group_depth() = 0; }
  } close;
  std::vector<GroupedCall> calls = std::move(group_calls());
  group_calls().clear();
  std::vector<ncclComm_t> comms;
  for (const GroupedCall& call : calls)
    if (std::find(comms.begin(), comms.end(), call.comm) == comms.end()) comms.push_back(call.comm);
  auto run_one = [&calls](ncclComm_t comm) {
    return guarded(comm, "ncclGroupEnd", [&] {
      antdt::Communicator& c = *comm->comm;
      bool open = false;
      std::size_t mine = 0;
      bool only_point_to_point = true;
      for (const GroupedCall& call : calls) {
        if (call.comm != comm) continue;
        ++mine;
        only_point_to_point = only_point_to_point && call.point_to_point;
      }
      if (!only_point_to_point) end_partial_run(comm);
      for (GroupedCall& call : calls) {
        if (call.comm != comm) continue;
        if (call.collective && !open && mine > 1) { c.group_start(); open = true; }
        if (!call.collective && open) { c.group_end(); open = false; }
        call.run(c);
      }
      if (open) c.group_end();
    });
  };
  if (comms.size() == 1) return run_one(comms.front());
  std::vector<ncclResult_t> results(comms.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < comms.size(); ++i) threads.emplace_back([&, i] { results[i] = run_one(comms[i]); });
  for (auto& t : threads) t.join();
  for (ncclResult_t r : results)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

}  // namespace antdt_nccl::native
