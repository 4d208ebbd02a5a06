// Native mode: unique ids, communicator creation (blocking and not), split,
// shrink, teardown and queries.
#include "cuda_runtime_loader.hpp"
#include "native.hpp"
#include "native_support.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

namespace antdt_nccl::native {
namespace {

antdt::UniqueId to_antdt(const ncclUniqueId& id) {
  static_assert(sizeof(ncclUniqueId) == ANTDT_UNIQUE_ID_BYTES, "the antdt id travels inside ncclUniqueId");
  antdt::UniqueId out;
  std::memcpy(out.bytes.data(), id.internal, sizeof(id.internal));
  return out;
}

ncclUniqueId to_nccl(const antdt::UniqueId& id) {
  ncclUniqueId out;
  std::memcpy(out.internal, id.bytes.data(), sizeof(out.internal));
  return out;
}

bool valid_config(const ncclConfig_t* config) { return config == nullptr || config->magic == 0xcafebeef; }

bool wants_nonblocking(const ncclConfig_t* config) {
  return config != nullptr && config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking == 0;
}

// Creates the antdt communicator of `c` (rank, nranks, transport set) from `id`.
void connect(ncclComm_t c, const antdt::UniqueId& id) {
  antdt::CommOptions opts;
  opts.transport = c->transport;
  c->comm.emplace(antdt::Communicator::create(id, c->rank, c->nranks, opts));
  c->comm->begin_step();  // the Monitor's first step: closed by the first AllReduce
  c->step_open = true;
}

// Starts the communicator of `c`: now (blocking) or on a thread (non-blocking:
// the caller polls ncclCommGetAsyncError until it is no longer ncclInProgress).
ncclResult_t start(ncclComm_t c, const antdt::UniqueId& id, const char* what) {
  if (c->blocking) {
    const ncclResult_t r = guarded(c, what, [&] { connect(c, id); });
    c->async = r;
    return r;
  }
  c->async = ncclInProgress;
  c->init_thread = std::thread([c, id, what] { c->async = guarded(c, what, [&] { connect(c, id); }); });
  return ncclInProgress;
}

ncclResult_t make_comm(ncclComm_t* out, int nranks, const antdt::UniqueId& id, int rank, const ncclConfig_t* config,
                       const std::string& transport, const char* what) {
  if (out == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(what) + ": comm is NULL");
  *out = nullptr;
  if (nranks < 1) return fail(nullptr, ncclInvalidArgument, std::string(what) + ": nranks must be at least 1");
  if (rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument,
                std::string(what) + ": rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  if (!valid_config(config))
    return fail(nullptr, ncclInvalidArgument,
                std::string(what) + ": config was not initialized with NCCL_CONFIG_INITIALIZER");
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->transport = transport;
  c->blocking = !wants_nonblocking(config);
  const ncclResult_t r = start(c, id, what);
  if (r != ncclSuccess && r != ncclInProgress) {
    delete c;
    return r;
  }
  *out = c;
  return r;
}

// Every member of one color learns its leader's fresh id: every rank of the
// parent contributes (color, key), the leaders (lowest key, then rank) their id.
void split_impl(ncclComm_t parent, int color, int key, ncclComm_t* newcomm, const ncclConfig_t* config) {
  end_partial_run(parent);
  antdt::Communicator& p = *parent->comm;
  const int n = p.size();
  std::vector<std::int32_t> mine = {color, key};
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(n));
  p.allgather(mine.data(), all.data(), 2, antdt::DataType::i32);
  std::vector<int> members;  // of my color, in (key, rank) order
  for (int r = 0; r < n; ++r)
    if (color != NCCL_SPLIT_NOCOLOR && all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  antdt::UniqueId id;
  if (!members.empty() && members.front() == p.rank()) id = antdt::UniqueId::create();
  std::vector<std::byte> ids(static_cast<std::size_t>(n) * ANTDT_UNIQUE_ID_BYTES);
  p.allgather(id.bytes.data(), ids.data(), ANTDT_UNIQUE_ID_BYTES, antdt::DataType::u8);
  if (members.empty()) return;  // NCCL_SPLIT_NOCOLOR: *newcomm stays NULL
  std::memcpy(id.bytes.data(), ids.data() + static_cast<std::size_t>(members.front()) * ANTDT_UNIQUE_ID_BYTES,
              ANTDT_UNIQUE_ID_BYTES);
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), p.rank()) - members.begin());
  ncclConfig_t blocking = config != nullptr ? *config : ncclConfig_t{};
  blocking.magic = 0xcafebeef;
  blocking.blocking = 1;  // the split's own result is reported by the call
  const ncclResult_t r = make_comm(newcomm, static_cast<int>(members.size()), id, new_rank, &blocking,
                                   parent->transport, "ncclCommSplit");
  if (r != ncclSuccess) throw antdt::BootstrapError("ncclCommSplit: " + last_error(nullptr));
}

}  // namespace

ncclResult_t MemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  const CudaRuntime& cuda = cuda_runtime();
  if (cuda.has_device) {
    if (cuda.Malloc(ptr, size) != 0) return fail(nullptr, ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc failed");
    return ncclSuccess;
  }
  // No GPU: host memory, page-aligned (what ncclMemAlloc's granularity promises).
  *ptr = std::aligned_alloc(4096, (std::max<size_t>(size, 1) + 4095) / 4096 * 4096);
  return *ptr != nullptr ? ncclSuccess : fail(nullptr, ncclSystemError, "ncclMemAlloc: out of host memory");
}

ncclResult_t MemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  const CudaRuntime& cuda = cuda_runtime();
  if (cuda.has_device) return cuda.Free(ptr) == 0 ? ncclSuccess : fail(nullptr, ncclUnhandledCudaError, "ncclMemFree: cudaFree failed");
  std::free(ptr);
  return ncclSuccess;
}

ncclResult_t GetVersion(int* version) {
  if (version == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t GetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  return guarded(nullptr, "ncclGetUniqueId", [&] { *uniqueId = to_nccl(antdt::UniqueId::create()); });
}

ncclResult_t CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return make_comm(comm, nranks, to_antdt(commId), rank, config, "ucx", "ncclCommInitRankConfig");
}

ncclResult_t CommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return make_comm(comm, nranks, to_antdt(commId), rank, nullptr, "ucx", "ncclCommInitRank");
}

ncclResult_t CommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                  ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: needs at least one id");
  // antdt bootstraps from one root: the first id.
  return make_comm(newcomm, nranks, to_antdt(commIds[0]), myrank, config, "ucx", "ncclCommInitRankScalable");
}

// One process, ndev ranks: one communicator per rank, made on a thread each
// (UCX between them: antdt's in-process transport needs its ranks created together).
ncclResult_t CommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr || ndev < 1) return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comm NULL or ndev < 1");
  antdt::UniqueId id;
  if (const ncclResult_t r = guarded(nullptr, "ncclCommInitAll", [&] { id = antdt::UniqueId::create(); }); r != ncclSuccess)
    return r;
  std::vector<ncclComm_t> made(static_cast<std::size_t>(ndev), nullptr);
  std::vector<ncclResult_t> results(static_cast<std::size_t>(ndev), ncclSuccess);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i)
    threads.emplace_back([&, i] { results[i] = make_comm(&made[i], ndev, id, i, nullptr, "ucx", "ncclCommInitAll"); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < ndev; ++i) {
    if (results[i] != ncclSuccess) {
      for (ncclComm_t c : made) delete c;
      return results[i];
    }
    made[i]->device = devlist != nullptr ? devlist[i] : i;
    comm[i] = made[i];
  }
  return ncclSuccess;
}

ncclResult_t CommFinalize(ncclComm_t comm) {
  if (const ncclResult_t r = usable(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  // Every call completed before it returned; a partial run (ANTDT_NCCL_LATE) ends
  // here, where every rank meets, so no rank is left inside a partial step.
  const ncclResult_t r = guarded(comm, "ncclCommFinalize", [&] { end_partial_run(comm); });
  comm->finalized = true;
  return r;
}

ncclResult_t CommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
  if (comm->init_thread.joinable()) comm->init_thread.join();
  const ncclResult_t r = guarded(nullptr, "ncclCommDestroy", [&] {
    // A destroy without finalize still ends a partial run with every rank: the
    // arbiter may live in this process, and a slower rank's last steps need it.
    if (comm->comm) end_partial_run(comm);
    if (comm->comm && comm->step_open) comm->comm->end_step(1);
    comm->comm.reset();
  });
  delete comm;
  return r;
}

ncclResult_t CommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->init_thread.joinable()) comm->init_thread.join();  // bounded by ANTDT_TIMEOUT_MS
  if (comm->comm) comm->comm->abort("ncclCommAbort");
  guarded(nullptr, "ncclCommAbort", [&] { comm->comm.reset(); });
  delete comm;
  return ncclSuccess;
}

ncclResult_t CommRevoke(ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommRevoke: comm is NULL");
  if (revokeFlags != NCCL_REVOKE_DEFAULT) return fail(comm, ncclInvalidArgument, "ncclCommRevoke: revokeFlags must be 0");
  // No call is in flight (each completed before it returned); later collectives are refused.
  comm->revoked = true;
  return ncclSuccess;
}

ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (newcomm == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < NCCL_SPLIT_NOCOLOR) return fail(comm, ncclInvalidArgument, "ncclCommSplit: color must be >= 0 or NCCL_SPLIT_NOCOLOR");
  if (!valid_config(config)) return fail(comm, ncclInvalidArgument, "ncclCommSplit: config not initialized");
  if (const ncclResult_t r = usable(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  *newcomm = nullptr;
  std::optional<ncclConfig_t> cfg;
  if (config != nullptr) cfg = *config;
  GroupedCall call{comm, [comm, color, key, newcomm, cfg](antdt::Communicator&) {
                     split_impl(comm, color, key, newcomm, cfg ? &*cfg : nullptr);
                   }, {}};
  call.collective = false;
  if (group_depth() > 0) {
    group_calls().push_back(std::move(call));
    return ncclSuccess;
  }
  return guarded(comm, "ncclCommSplit", [&] { call.run(*comm->comm); });
}

// The excluded ranks do not call (they may be dead): the new rank 0 sends its
// fresh id to each survivor point-to-point over the parent.
ncclResult_t CommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                        ncclConfig_t* config, int shrinkFlags) {
  if (newcomm == nullptr || (excludeRanksCount > 0 && excludeRanksList == nullptr) || excludeRanksCount < 0)
    return fail(comm, ncclInvalidArgument, "ncclCommShrink: newcomm NULL or bad exclude list");
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(comm, ncclInvalidArgument, "ncclCommShrink: unknown shrinkFlags");
  if (!valid_config(config)) return fail(comm, ncclInvalidArgument, "ncclCommShrink: config not initialized");
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclCommShrink: comm is NULL");
  if (comm->init_thread.joinable()) comm->init_thread.join();
  if (!comm->comm) return fail(comm, ncclInvalidUsage, "ncclCommShrink: the communicator is not usable");
  *newcomm = nullptr;
  const std::set<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  if (excluded.count(comm->rank) != 0)
    return fail(comm, ncclInvalidUsage, "ncclCommShrink: an excluded rank must not call ncclCommShrink");
  std::vector<int> survivors;
  for (int r = 0; r < comm->nranks; ++r)
    if (excluded.count(r) == 0) survivors.push_back(r);
  return guarded(comm, "ncclCommShrink", [&] {
    antdt::Communicator& p = *comm->comm;
    antdt::UniqueId id;
    if (survivors.front() == comm->rank) {
      id = antdt::UniqueId::create();
      p.group_start();
      for (std::size_t i = 1; i < survivors.size(); ++i)
        p.send(id.bytes.data(), ANTDT_UNIQUE_ID_BYTES, antdt::DataType::u8, survivors[i]);
      p.group_end();
    } else {
      p.recv(id.bytes.data(), ANTDT_UNIQUE_ID_BYTES, antdt::DataType::u8, survivors.front());
    }
    const int new_rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), comm->rank) - survivors.begin());
    const ncclResult_t r =
        make_comm(newcomm, static_cast<int>(survivors.size()), id, new_rank, config, comm->transport, "ncclCommShrink");
    if (r != ncclSuccess && r != ncclInProgress) throw antdt::BootstrapError(last_error(nullptr));
  });
}

const char* GetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* GetLastError(ncclComm_t comm) {
  thread_local std::string text;
  text = last_error(comm);
  return text.c_str();
}

void ResetDebugInit() {}

ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  *asyncError = comm->async.load();
  if (*asyncError != ncclInProgress && comm->init_thread.joinable()) comm->init_thread.join();
  return ncclSuccess;
}

ncclResult_t CommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t CommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
  *device = comm->device;  // -1: the communicator was made without a CUDA device (host memory)
  return ncclSuccess;
}

ncclResult_t CommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

// Registration is an optimization in NCCL; antdt needs none: a no-op handle.
ncclResult_t CommRegister(const ncclComm_t comm, void* buff, size_t, void** handle) {
  if (comm == nullptr || handle == nullptr || buff == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclCommRegister: comm, buff or handle is NULL");
  *handle = buff;
  return ncclSuccess;
}

ncclResult_t CommDeregister(const ncclComm_t comm, void* handle) {
  if (comm == nullptr || handle == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommDeregister: NULL argument");
  return ncclSuccess;
}

// Symmetric windows need NCCL's device-side API, which antdt does not offer.
ncclResult_t CommWindowRegister(ncclComm_t comm, void*, size_t, ncclWindow_t* win, int) {
  if (win != nullptr) *win = nullptr;
  return fail(comm, ncclInvalidUsage, "ncclCommWindowRegister: symmetric windows are not supported by libantdt_nccl (native mode)");
}

ncclResult_t CommWindowDeregister(ncclComm_t comm, ncclWindow_t) {
  return fail(comm, ncclInvalidUsage, "ncclCommWindowDeregister: symmetric windows are not supported by libantdt_nccl (native mode)");
}

ncclResult_t GroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
  simInfo->estimatedTime = NCCL_UNDEF_FLOAT;  // no cost model: undefined, as NCCL reports when it has none
  return ncclSuccess;
}

}  // namespace antdt_nccl::native
