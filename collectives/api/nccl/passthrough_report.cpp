// Passthrough mode's cross-rank straggler report (docs/nccl.md#passthrough):
// when a communicator is finalized (or destroyed without a finalize), its ranks
// exchange their kept step times with one AllGather on the real NCCL, and
// rank 0 prints the Monitor's summary of them. Every rank of a communicator
// finalizes or destroys it, so the extra collective meets on every rank; an
// abort (maybe for a dead peer) exchanges nothing. ANTDT_NCCL_REPORT=0 turns
// the exchange off.
#include "cuda_runtime_loader.hpp"
#include "passthrough.hpp"
#include "passthrough_steps.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <vector>

namespace antdt_nccl::passthrough {
namespace {

bool report_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ANTDT_NCCL_REPORT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Per rank: [steps, compute_0, collective_0, ...] as floats, kKeptSteps pairs.
constexpr std::size_t kRecordFloats = 1 + 2 * kKeptSteps;

std::vector<float> encode(const std::vector<antdt::StepTimes>& steps) {
  std::vector<float> out(kRecordFloats, 0.0f);
  out[0] = static_cast<float>(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    out[1 + 2 * i] = static_cast<float>(steps[i].compute_s);
    out[2 + 2 * i] = static_cast<float>(steps[i].collective_s);
  }
  return out;
}

std::vector<antdt::StepTimes> decode(const float* record) {
  const auto n = static_cast<std::size_t>(record[0]);
  std::vector<antdt::StepTimes> steps(n > kKeptSteps ? kKeptSteps : n);
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = {record[1 + 2 * i], record[2 + 2 * i], 1};
  return steps;
}

// One AllGather of `mine` on the real NCCL: through device memory where there
// is a device (the real NCCL needs it), host memory otherwise (a stand-in).
bool all_gather(ncclComm_t comm, const std::vector<float>& mine, std::vector<float>& all) {
  const Table& nccl = real();
  const CudaRuntime& cuda = cuda_runtime();
  const std::size_t bytes = mine.size() * sizeof(float);
  if (!cuda.has_device)
    return nccl.AllGather(mine.data(), all.data(), mine.size(), ncclFloat32, comm, nullptr) == ncclSuccess;
  void* send = nullptr;
  void* recv = nullptr;
  bool ok = cuda.Malloc(&send, bytes) == 0 && cuda.Malloc(&recv, all.size() * sizeof(float)) == 0 &&
            cuda.Memcpy(send, mine.data(), bytes, 1) == 0 &&
            nccl.AllGather(send, recv, mine.size(), ncclFloat32, comm, nullptr) == ncclSuccess &&
            cuda.DeviceSynchronize() == 0 && cuda.Memcpy(all.data(), recv, all.size() * sizeof(float), 2) == 0;
  if (send != nullptr) cuda.Free(send);
  if (recv != nullptr) cuda.Free(recv);
  return ok;
}

void report(ncclComm_t comm) {
  settle_events();
  const std::vector<antdt::StepTimes> steps = take_steps(comm);
  const Table& nccl = real();
  int nranks = 0, rank = -1;
  if (nccl.AllGather == nullptr || nccl.CommCount == nullptr || nccl.CommUserRank == nullptr ||
      nccl.CommCount(comm, &nranks) != ncclSuccess || nccl.CommUserRank(comm, &rank) != ncclSuccess || nranks < 1)
    return;
  std::vector<float> all(kRecordFloats * static_cast<std::size_t>(nranks));
  if (!all_gather(comm, encode(steps), all)) {
    std::fprintf(stderr, "libantdt_nccl passthrough: the straggler report's AllGather failed; no report\n");
    return;
  }
  if (rank != 0) return;
  std::vector<std::vector<antdt::StepTimes>> per_rank;
  for (int r = 0; r < nranks; ++r) per_rank.push_back(decode(&all[kRecordFloats * static_cast<std::size_t>(r)]));
  try {
    std::fprintf(stderr, "libantdt_nccl passthrough: %s", antdt::monitor_summary(per_rank).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libantdt_nccl passthrough: no straggler report: %s\n", e.what());
  }
}

}  // namespace

void before_teardown(Fn fn, ncclComm_t comm) {
  static std::mutex mu;
  static std::set<ncclComm_t> finalized;
  const bool finalize = fn == Fn::CommFinalize;
  const bool destroy = fn == Fn::CommDestroy;
  const bool abort = fn == Fn::CommAbort;
  if (!finalize && !destroy && !abort) return;
  {
    std::lock_guard lock(mu);
    if (destroy && finalized.erase(comm) > 0) return;  // reported at its finalize
    if (finalize) finalized.insert(comm);
    if (abort) finalized.erase(comm);
  }
  if (abort || !report_enabled()) {
    take_steps(comm);
    return;
  }
  report(comm);
}

}  // namespace antdt_nccl::passthrough
