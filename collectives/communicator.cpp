#include "collectives/communicator.hpp"

#include "collectives/telemetry/step_timing.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/shm_channel.hpp"

#include <algorithm>

namespace antdt::detail {

CommImpl::CommImpl(std::unique_ptr<transport::Transport> transport, std::uint32_t comm_id, const Config& cfg,
                   control::Endpoints control)
    : transport_(std::move(transport)), id_(comm_id), cfg_(cfg), control_(std::move(control)) {
  ANTDT_ASSERT(transport_ != nullptr);
  rank_ = transport_->rank();
  size_ = transport_->size();
}

CommImpl::~CommImpl() = default;

void CommImpl::set_rank_nodes(std::span<const std::uint64_t> identities) {
  ANTDT_ASSERT(identities.size() == static_cast<std::size_t>(size_));
  std::vector<std::uint64_t> seen;
  std::vector<int> ranks_on;
  node_of_rank_.assign(identities.size(), 0);
  for (std::size_t r = 0; r < identities.size(); ++r) {
    auto at = std::find(seen.begin(), seen.end(), identities[r]);
    if (at == seen.end()) {
      seen.push_back(identities[r]);
      ranks_on.push_back(0);
      at = seen.end() - 1;
    }
    const auto node = static_cast<std::size_t>(at - seen.begin());
    node_of_rank_[r] = static_cast<int>(node);
    ++ranks_on[node];
  }
  node_count_ = static_cast<int>(seen.size());
  nodes_uniform_ = std::all_of(ranks_on.begin(), ranks_on.end(), [&](int k) { return k == ranks_on.front(); });
}

telemetry::StepTiming& CommImpl::step_timing() {
  if (!step_timing_) {
    step_timing_ = std::make_unique<telemetry::StepTiming>(cfg_, rank_, "antdt-c" + std::to_string(id_));
    step_timing_started_.store(true, std::memory_order_release);
  }
  return *step_timing_;
}

void CommImpl::set_shm(ShmArea area, std::unique_ptr<ShmChannel> channel) noexcept {
  shm_[index(area)] = std::move(channel);
  shm_tried_[index(area)] = true;
}

OpSlot& CommImpl::slot(std::size_t index) {
  // A new slot starts idle (not pending): it has never been posted.
  while (slots_.size() <= index) slots_.emplace_back().completion.state.store(transport::State::done);
  return slots_[index];
}

std::span<std::byte> CommImpl::scratch(std::size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return std::span(scratch_).first(bytes);
}

void CommImpl::check_usable() const {
  if (!failed_.load(std::memory_order_acquire)) return;  // every call asks: no lock in the common case
  std::lock_guard lock(failure_mu_);
  if (failure_)
    throw_status(failure_->first, cat("communicator is unusable after an earlier failure: ", failure_->second));
}

void CommImpl::mark_failed(Status status, const std::string& reason) {
  std::lock_guard lock(failure_mu_);
  if (!failure_) failure_.emplace(status, reason);
  failed_.store(true, std::memory_order_release);
}

void CommImpl::abort(std::string_view reason) noexcept {
  try {
    mark_failed(Status::aborted, cat("rank ", rank_, " aborted: ", reason));
  } catch (...) {
    // Out of memory while recording the reason: the transport abort below still stops everyone.
  }
  transport_->abort(static_cast<int>(Status::aborted), reason);
}

}  // namespace antdt::detail
