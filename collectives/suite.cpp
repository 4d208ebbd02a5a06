// Per-communicator suite state and the queue of non-blocking collectives.
#include "collectives/suite.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace antdt::coll {

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------
void RequestBase::finish(std::exception_ptr error) noexcept {
  finished_ = true;
  error_ = std::move(error);
}

void RequestBase::rethrow_if_failed() const {
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr RequestBase::detached_error() noexcept {
  return std::make_exception_ptr(
      InvalidArgument("request used after its communicator was destroyed before the operation completed"));
}

void QueuedCollective::run_now() noexcept {
  try {
    run_();
    finish();
  } catch (...) {
    finish(std::current_exception());
  }
  run_ = nullptr;  // releases what the closure holds (v-variant counts)
}

void QueuedCollective::wait() {
  if (!finished_) {
    ANTDT_ASSERT(suite_ != nullptr);
    suite_->run_queued(this);
  }
  rethrow_if_failed();
}

bool QueuedCollective::test() {
  wait();
  return true;
}

void QueuedCollective::detach() noexcept {
  suite_ = nullptr;
  if (!finished_) finish(detached_error());
  run_ = nullptr;
}

// ---------------------------------------------------------------------------
// Suite state
// ---------------------------------------------------------------------------
SuiteState::SuiteState(detail::CommImpl& comm)
    : comm_(comm),
      sends_to_(static_cast<std::size_t>(comm.size()), 0),
      recvs_from_(static_cast<std::size_t>(comm.size()), 0) {}

SuiteState::~SuiteState() {
  // The communicator goes away: requests the caller still holds must not
  // touch it (transfers in flight are cancelled while the transport lives).
  for (auto& weak : live_)
    if (auto request = weak.lock()) request->detach();
  for (auto& transfer : group_transfers_) transfer->detach();
}

void SuiteState::track(const std::shared_ptr<detail::RequestState>& request) {
  // Forget requests nobody holds any more, so the list stays as long as the live ones.
  if (live_.size() >= 16 && live_.size() == live_.capacity())
    std::erase_if(live_, [](const auto& weak) { return weak.expired(); });
  live_.push_back(request);
}

std::shared_ptr<detail::RequestState> SuiteState::enqueue(std::function<void()> run) {
  auto request = std::make_shared<QueuedCollective>(*this, std::move(run));
  queue_.push_back(request);
  track(request);
  return request;
}

void SuiteState::run_queued(const QueuedCollective* last) {
  while (!queue_.empty()) {
    std::shared_ptr<QueuedCollective> next = std::move(queue_.front());
    queue_.pop_front();
    next->run_now();
    if (next.get() == last) return;
  }
}

std::shared_ptr<Transfer> SuiteState::post_transfer(bool is_send, std::span<std::byte> payload, std::size_t count,
                                                    DataType dtype, int peer) {
  const std::uint64_t seq = is_send ? next_send_seq(peer) : next_recv_seq(peer);
  auto transfer = std::make_shared<Transfer>(comm_, is_send, payload, count, dtype, peer, seq);
  track(transfer);
  return transfer;
}

SuiteState& suite(detail::CommImpl& comm) {
  auto& state = comm.collective_state();
  if (!state) state = std::make_unique<SuiteState>(comm);
  return static_cast<SuiteState&>(*state);
}

}  // namespace antdt::coll
