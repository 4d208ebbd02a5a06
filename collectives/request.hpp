// The operation behind an antdt::Request, and what every kind of request
// shares: its outcome, kept so that a second wait() reports the same result.
// The kinds: a queued non-blocking collective (collectives/request_queue.hpp)
// and a point-to-point transfer (collectives/transfer.hpp). Uses core/error.hpp only.
#pragma once

#include <atomic>
#include <exception>

namespace antdt::detail {

class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
  virtual bool cancel() = 0;
  virtual bool cancelled() const noexcept = 0;
  // The communicator is being destroyed: release it; later waits report that.
  virtual void detach() noexcept = 0;
};

}  // namespace antdt::detail

namespace antdt::coll {

class RequestBase : public detail::RequestState {
 public:
  bool cancelled() const noexcept override { return cancelled_; }
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }

 protected:
  // Sets the outcome, then publishes it: a thread that sees finished() sees the error too.
  void finish(std::exception_ptr error = nullptr) noexcept;
  void rethrow_if_failed() const;
  static std::exception_ptr detached_error() noexcept;

  // Atomic: a queued collective is finished by the progress thread while the caller tests it.
  std::atomic<bool> finished_{false};
  bool cancelled_ = false;
  std::exception_ptr error_;
};

}  // namespace antdt::coll
