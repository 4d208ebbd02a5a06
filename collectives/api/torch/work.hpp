// The c10d::Work of one antdt operation: completed by the thread that ran it,
// with a future that holds the operation's output tensors (DDP chains its
// gradient handling on Work::getFuture()).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>

#include <exception>
#include <vector>

namespace antdt::pytorch {

class AntdtWork final : public c10d::Work {
 public:
  // `outputs`: what the operation writes (the future's value, result()).
  // `source_rank`: the peer of a receive, -1 for everything else.
  AntdtWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
            int source_rank = -1);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;

  // Called once, by the thread that ran the operation: the future completes
  // (running its callbacks on that thread), then wait() returns. Never throws.
  void complete();
  // As complete(), with the operation's error: the future's value and wait() rethrow it.
  void fail(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  int source_rank_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace antdt::pytorch
