// The "antdt" backend of torch.distributed: a c10d::ProcessGroup over the
// public antdt API (docs/torch.md).
//
// Two communicators per process group:
//  * collectives_: every collective, run in issue order by one worker thread
//    (SerialExecutor), so the caller computes while it runs (async_op=True) and
//    every antdt call on it comes from one thread. gather, scatter and the
//    all-to-alls are point-to-point exchanges in a group call on it.
//  * transfers_: the user's send/recv, posted at once on the caller's thread
//    (isend/irecv) and completed by a second thread, as gloo does: a send never
//    waits behind a collective, and it cannot be confused with the transfers
//    inside a gather (both count per-peer sequence numbers).
// Each running operation is bounded by the process group's timeout (Watchdog).
#pragma once

#include "serial_executor.hpp"
#include "watchdog.hpp"
#include "work.hpp"

#include <antdt/comm.hpp>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <vector>

namespace antdt::pytorch {

class ProcessGroupAntdt final : public c10d::ProcessGroup {
 public:
  // Collective: every rank of the group constructs it with the same store.
  ProcessGroupAntdt(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupAntdt() override;

  const std::string getBackendName() const override { return "antdt"; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // Queues `body` on the collective worker; the Work completes with `outputs`
  // when it returned, or fails with its error (as a RuntimeError naming `name`).
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                         std::function<void()> body);
  // The error a failed operation reports: antdt's message, with the timeout
  // named when the watchdog aborted the communicator.
  std::exception_ptr describe_failure(const char* name, const Watchdog& dog) const;
  c10::intrusive_ptr<c10d::Work> post_transfer(std::vector<at::Tensor>& tensors, int peer, int tag, bool is_send);
  void check_peer(int peer, const char* operation) const;

  const std::chrono::milliseconds timeout_;
  Communicator collectives_;
  Communicator transfers_;
  std::mutex transfer_post_mu_;  // callers on several threads post transfers one at a time
  Watchdog collective_watch_;
  Watchdog transfer_watch_;
  // Declared last: destroyed first, so their queued jobs run while the communicators exist.
  SerialExecutor completions_{"antdt-torch-p2p"};
  SerialExecutor worker_{"antdt-torch"};
};

}  // namespace antdt::pytorch
