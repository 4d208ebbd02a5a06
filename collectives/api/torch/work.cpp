#include "work.hpp"

#include <ATen/core/jit_type.h>

#include <utility>

namespace antdt::pytorch {

AntdtWork::AntdtWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
                     int source_rank)
    : c10d::Work(rank, type, profiling_title),
      outputs_(std::move(outputs)),
      source_rank_(source_rank),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

c10::intrusive_ptr<c10::ivalue::Future> AntdtWork::getFuture() { return future_; }

std::vector<at::Tensor> AntdtWork::result() { return outputs_; }

int AntdtWork::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0, "antdt: sourceRank() is only defined for a receive");
  return source_rank_;
}

void AntdtWork::complete() {
  try {
    future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {
    // A callback chained on the future threw: the operation itself succeeded,
    // but whoever waits for the Work learns about it rather than nobody.
    finish(std::current_exception());
    return;
  }
  finish();
}

void AntdtWork::fail(std::exception_ptr error) {
  future_->setError(error);
  finish(error);
}

}  // namespace antdt::pytorch
