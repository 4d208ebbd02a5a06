#include "passthrough_steps.hpp"

#include <deque>
#include <map>
#include <mutex>
#include <optional>

namespace antdt_nccl::passthrough {
namespace {

struct CommSteps {
  std::deque<antdt::StepTimes> steps;
  std::optional<std::chrono::steady_clock::time_point> last_return;  // CPU: end of the previous collective
  void* last_end = nullptr;                                          // device: its end event
};

struct StepLog {
  std::mutex mu;
  std::map<ncclComm_t, CommSteps> comms;
};
StepLog& log() {
  static StepLog l;
  return l;
}

void keep(CommSteps& c, double compute_s, double collective_s) {
  c.steps.push_back({compute_s, collective_s, 1});
  if (c.steps.size() > kKeptSteps) c.steps.pop_front();
}

}  // namespace

void cpu_step(ncclComm_t comm, std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end) {
  StepLog& l = log();
  std::lock_guard lock(l.mu);
  CommSteps& c = l.comms[comm];
  if (c.last_return)
    keep(c, std::chrono::duration<double>(start - *c.last_return).count(),
         std::chrono::duration<double>(end - start).count());
  c.last_return = end;
}

void gpu_step(ncclComm_t comm, void* begin, void* end, const CudaRuntime& cuda) {
  StepLog& l = log();
  std::lock_guard lock(l.mu);
  CommSteps& c = l.comms[comm];
  float collective_ms = 0, compute_ms = 0;
  const bool timed = cuda.EventElapsedTime(&collective_ms, begin, end) == 0;
  if (c.last_end != nullptr) {
    if (timed && cuda.EventElapsedTime(&compute_ms, c.last_end, begin) == 0)
      keep(c, compute_ms / 1e3, collective_ms / 1e3);
    cuda.EventDestroy(c.last_end);
  }
  cuda.EventDestroy(begin);
  c.last_end = end;
}

std::vector<antdt::StepTimes> take_steps(ncclComm_t comm) {
  StepLog& l = log();
  std::lock_guard lock(l.mu);
  auto it = l.comms.find(comm);
  if (it == l.comms.end()) return {};
  std::vector<antdt::StepTimes> out(it->second.steps.begin(), it->second.steps.end());
  if (it->second.last_end != nullptr) cuda_runtime().EventDestroy(it->second.last_end);
  l.comms.erase(it);
  return out;
}

}  // namespace antdt_nccl::passthrough
