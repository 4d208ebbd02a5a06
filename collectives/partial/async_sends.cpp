#include "collectives/partial/async_sends.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <cstring>

namespace antdt::coll::partial {
namespace {

// How often the thread drives the transport while a batch is in flight. A
// rendezvous needs the sender's progress when the receiver asks for the data
// (and no wake-up tells the sender so on every transport: UCX's shared-memory
// pipeline does not), so sleeping until an event could leave a receiver
// waiting a whole poll slice (100 ms, measured); a 1 ms tick bounds that wait
// at a few microseconds of work per tick.
constexpr auto kTick = std::chrono::milliseconds(1);
// Buffers kept for reuse: about the batches in flight at the staleness bound.
constexpr std::size_t kSpareBuffers = 8;

}  // namespace

struct AsyncSends::Batch {
  std::vector<std::byte> data;
  std::unique_ptr<detail::OpSlot[]> slots;  // never moved: the transport holds their addresses
  std::size_t count = 0;
  std::optional<Call> call;
  Clock::time_point posted;
};

AsyncSends::AsyncSends(detail::CommImpl& comm) : comm_(comm) {}

AsyncSends::~AsyncSends() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  // ~Call cancels what is still in flight (a receiver that never came: the
  // communicator failed) before its buffers go.
  batches_.clear();
}

void AsyncSends::rethrow_failure() {
  if (failure_) std::rethrow_exception(failure_);
}

void AsyncSends::post(const Signature& sig, std::uint64_t seq, std::vector<std::byte> data,
                      std::span<const Message> messages) {
  {
    std::lock_guard lock(mu_);
    rethrow_failure();
  }
  auto batch = std::make_unique<Batch>();
  batch->data = std::move(data);
  batch->count = messages.size();
  batch->slots = std::make_unique<detail::OpSlot[]>(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i)
    batch->slots[i].completion.state.store(transport::State::done);  // idle until posted
  batch->call.emplace(comm_, sig, seq, std::span(batch->slots.get(), messages.size()));
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    ANTDT_ASSERT(m.offset + m.bytes <= batch->data.size());
    batch->call->send(i, m.peer, std::span<const std::byte>(batch->data.data() + m.offset, m.bytes));
  }
  batch->posted = Clock::now();
  {
    std::lock_guard lock(mu_);
    batches_.push_back(std::move(batch));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  changed_.notify_all();
}

std::vector<std::byte> AsyncSends::take(std::size_t bytes) {
  std::vector<std::byte> buffer;
  {
    std::lock_guard lock(mu_);
    if (!spare_.empty()) {
      buffer = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  buffer.resize(bytes);
  return buffer;
}

// Whether every send of `batch` completed (one progress pass of the transport).
bool AsyncSends::finished(Batch& batch) {
  for (std::size_t i = 0; i < batch.count; ++i)
    if (!batch.call->done(i)) return false;
  return true;
}

void AsyncSends::run() {
  log::set_thread_rank(comm_.rank());
  std::unique_lock lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !batches_.empty(); });
    if (stop_) break;
    Batch* front = batches_.front().get();
    lock.unlock();
    bool complete = false;
    std::exception_ptr failed;
    try {
      complete = finished(*front);
      if (!complete && Clock::now() - front->posted > comm_.config().timeout)
        raise<TimeoutError>("partial collectives: rank ", comm_.rank(), " waited ", comm_.config().timeout.count(),
                            " ms (ANTDT_TIMEOUT_MS) for ", front->call->signature().describe(), " #",
                            front->call->seq(), " to be received");
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    if (failed && !failure_) failure_ = failed;
    if (complete || failed) {
      // Goes while the lock is held: drain() never sees half a batch. A
      // failed one's Call cancels what is still in flight.
      auto done = std::move(batches_.front());
      batches_.pop_front();
      done->call.reset();
      if (complete && spare_.size() < kSpareBuffers) spare_.push_back(std::move(done->data));
      changed_.notify_all();
      continue;
    }
    changed_.wait_for(lock, kTick, [&] { return stop_; });
  }
  log::set_thread_rank(-1);
}

void AsyncSends::drain() {
  std::unique_lock lock(mu_);
  const auto timeout = comm_.config().timeout;
  if (!changed_.wait_for(lock, timeout, [&] { return batches_.empty() || failure_ != nullptr; })) {
    raise<TimeoutError>("partial collectives: rank ", comm_.rank(), " waited ", timeout.count(),
                        " ms (ANTDT_TIMEOUT_MS) for ", batches_.size(),
                        " deposit(s) or result(s) pushed ahead to be received");
  }
  rethrow_failure();
}

}  // namespace antdt::coll::partial
