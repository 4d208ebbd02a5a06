// The outcome every request keeps (collectives/request.hpp).
#include "collectives/request.hpp"

#include "core/error.hpp"

namespace antdt::coll {

void RequestBase::finish(std::exception_ptr error) noexcept {
  error_ = std::move(error);
  finished_.store(true, std::memory_order_release);
}

void RequestBase::rethrow_if_failed() const {
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr RequestBase::detached_error() noexcept {
  return std::make_exception_ptr(
      InvalidArgument("request used after its communicator was destroyed before the operation completed"));
}

}  // namespace antdt::coll
