// ProcessGroupAntdt: construction, the worker queue, errors, barrier and the
// user's send/recv. The collectives are in pg_collectives.cpp.
#include "process_group.hpp"

#include "rendezvous.hpp"
#include "staged_tensor.hpp"
#include "tensor_types.hpp"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace antdt::pytorch {

ProcessGroupAntdt::ProcessGroupAntdt(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      timeout_(timeout),
      collectives_(join_through_store(*store, "antdt/collectives", rank, size, timeout)),
      transfers_(join_through_store(*store, "antdt/transfers", rank, size, timeout)),
      collective_watch_(timeout, [this](const std::string& reason) { collectives_.abort(reason); }),
      transfer_watch_(timeout, [this](const std::string& reason) { transfers_.abort(reason); }) {
  TORCH_CHECK(timeout.count() > 0, "antdt: the process group's timeout must be positive, got ", timeout.count(),
              " ms");
  init();
}

ProcessGroupAntdt::~ProcessGroupAntdt() = default;

std::exception_ptr ProcessGroupAntdt::describe_failure(const char* name, const Watchdog& dog) const {
  std::string cause;
  try {
    throw;
  } catch (const std::exception& e) {
    cause = e.what();
  } catch (...) {
    cause = "an unknown error";
  }
  std::string message = std::string("antdt: ") + name + " failed on rank " + std::to_string(rank_) + ": " + cause;
  if (dog.expired() && cause.find("timeout") == std::string::npos)
    message += " (the operation did not complete within the process group's timeout of " +
               std::to_string(dog.timeout().count()) + " ms)";
  return std::make_exception_ptr(std::runtime_error(message));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::enqueue(c10d::OpType type, const char* name,
                                                          std::vector<at::Tensor> outputs,
                                                          std::function<void()> body) {
  auto work = c10::make_intrusive<AntdtWork>(rank_, type, name, std::move(outputs));
  worker_.submit([this, work, name, body = std::move(body)] {
    std::exception_ptr error;
    try {
      at::NoGradGuard no_grad;  // copies into the caller's tensors are not part of any graph
      Watchdog::Guard watched(collective_watch_, std::string(name) + " on rank " + std::to_string(rank_));
      body();
    } catch (...) {
      error = describe_failure(name, collective_watch_);
    }
    if (error) {
      work->fail(error);
    } else {
      work->complete();
    }
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, [this] { collectives_.barrier(); });
}

void ProcessGroupAntdt::check_peer(int peer, const char* operation) const {
  TORCH_CHECK(peer >= 0 && peer < size_, "antdt: ", operation, " names rank ", peer,
              ", which is not in this process group of ", size_, " ranks");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::post_transfer(std::vector<at::Tensor>& tensors, int peer, int tag,
                                                                bool is_send) {
  const char* name = is_send ? "send" : "recv";
  TORCH_CHECK(tensors.size() == 1, "antdt: ", name, " takes one tensor, got ", tensors.size());
  check_peer(peer, name);
  TORCH_CHECK(peer != rank_, "antdt: rank ", rank_, " cannot ", name, is_send ? " to" : " from", " itself");
  // antdt matches the n-th send to a peer with that peer's n-th receive from
  // this rank; it has no tags, so a tagged exchange would match by order only.
  TORCH_CHECK(tag == 0, "antdt: ", name, " with tag ", tag,
              " is not supported: antdt matches point-to-point messages in issue order per peer (use tag 0)");
  const at::Tensor& tensor = tensors[0];
  TORCH_CHECK(!tensor.is_sparse(), "antdt: ", name, " does not support sparse tensors");
  TORCH_CHECK(tensor.is_cpu(), "antdt: ", name, " supports CPU tensors only (got ", tensor.device(), ")");
  auto staged = std::make_shared<StagedTensor>(tensor, is_send ? StagedTensor::Use::read : StagedTensor::Use::write);
  Request request;
  {
    std::lock_guard lock(transfer_post_mu_);
    request = is_send ? transfers_.isend(staged->data(), staged->nbytes(), kBytes, peer)
                      : transfers_.irecv(staged->data(), staged->nbytes(), kBytes, peer);
  }
  auto work = c10::make_intrusive<AntdtWork>(rank_, is_send ? c10d::OpType::SEND : c10d::OpType::RECV, name,
                                             std::vector<at::Tensor>{tensor}, is_send ? -1 : peer);
  auto pending = std::make_shared<Request>(std::move(request));
  completions_.submit([this, work, staged, pending, name, peer] {
    std::exception_ptr error;
    try {
      at::NoGradGuard no_grad;
      Watchdog::Guard watched(transfer_watch_, std::string(name) + " between ranks " + std::to_string(rank_) +
                                                   " and " + std::to_string(peer));
      pending->wait();
      staged->write_back();
    } catch (...) {
      error = describe_failure(name, transfer_watch_);
    }
    if (error) {
      work->fail(error);
    } else {
      work->complete();
    }
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return post_transfer(tensors, dst, tag, /*is_send=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return post_transfer(tensors, src, tag, /*is_send=*/false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupAntdt::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "antdt: recv from any source is not supported (antdt matches a receive with one peer's "
              "sends); pass src=");
}

}  // namespace antdt::pytorch
