// antdt::PushPull (include/antdt/pushpull.hpp): checks a call's arguments,
// then runs it now, records it in an open group or queues it as a
// non-blocking request; the protocol itself is PushPullState
// (collectives/pushpull/pushpull_state.hpp).
#include <antdt/pushpull.hpp>

#include "collectives/pushpull/partition_map.hpp"
#include "collectives/pushpull/pushpull_state.hpp"
#include "collectives/issued_calls.hpp"
#include "core/error.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace antdt {
namespace {

// A blocking call: recorded when a group is open, else run now, after the
// non-blocking collectives issued before it (the entry's blocking mode).
template <class Run>
void run_or_record(detail::CommImpl& comm, Run&& run) {
  if (coll::run_queued_or_record(comm, [&] { return coll::GroupedCall{.run = std::function<void()>(run)}; })) run();
}

Request enqueue(detail::CommImpl& comm, std::function<void()> run, const char* what) {
  return Request(coll::issued_calls(comm).enqueue(std::move(run), what));
}

}  // namespace

PushPull::PushPull(Communicator& comm, std::span<const PushPullKey> keys, const PushPullOptions& opts) {
  detail::CommImpl& impl = comm.impl();
  impl.check_usable();
  const std::size_t partition_bytes = opts.partition_bytes != 0 ? opts.partition_bytes : impl.config().ps_partition_bytes;
  auto map = coll::pushpull::PartitionMap::make(keys, opts.servers, comm.size(), partition_bytes, impl.config().chunk_bytes);
  ANTDT_CHECK_ARG(!impl.collective_state() || !coll::issued_calls(impl).in_group(),
                  "PushPull: cannot be created inside a group (it checks the key table with a collective)");
  // Every rank must have built the same partition map: compare the hashes.
  const std::uint64_t mine = map.hash();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, all.data(), 1, DataType::u64);
  for (int r = 0; r < comm.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0])
      raise<MismatchError>("PushPull: rank ", r, "'s key table or options (keys, counts, dtypes, servers, partition ",
                           "size) differ from rank 0's; every rank must pass the same");
  state_ = std::make_shared<detail::PushPullState>(impl, std::move(map));
}

PushPull::~PushPull() = default;
PushPull::PushPull(PushPull&&) noexcept = default;
PushPull& PushPull::operator=(PushPull&&) noexcept = default;

bool PushPull::is_worker() const noexcept { return state_->worker(); }
bool PushPull::is_server() const noexcept { return state_->server(); }
int PushPull::workers() const noexcept { return static_cast<int>(state_->map().workers.size()); }
std::vector<int> PushPull::servers() const { return state_->map().servers; }

std::vector<PushPullPartition> PushPull::partitions(std::uint64_t key) const {
  const auto& map = state_->map();
  std::vector<PushPullPartition> out;
  for (const auto& p : map.partitions_of(map.key_index(key))) out.push_back({key, p.first, p.count, p.server});
  return out;
}

void PushPull::push(std::uint64_t key, const void* data, double weight) { push(key, data, weight, nullptr); }

void PushPull::push(std::uint64_t key, const void* data, double weight, void* stream) {
  const std::size_t ki = state_->map().key_index(key);
  state_->check_push(ki, data, weight);
  state_->comm().check_usable();
  // A call recorded in a group keeps the state alive until group_end() runs it.
  run_or_record(state_->comm(), [st = state_, ki, data, weight, stream] {
    st->push(ki, static_cast<const std::byte*>(data), weight, stream);
  });
}

void PushPull::pull(std::uint64_t key, void* out, ReduceOp op) { pull(key, out, op, nullptr); }

void PushPull::pull(std::uint64_t key, void* out, ReduceOp op, void* stream) {
  const std::size_t ki = state_->map().key_index(key);
  state_->check_pull(ki, out, op);
  state_->comm().check_usable();
  run_or_record(state_->comm(),
                [st = state_, ki, out, op, stream] { st->pull(ki, static_cast<std::byte*>(out), op, stream); });
}

Request PushPull::ipush(std::uint64_t key, const void* data, double weight) {
  return ipush(key, data, weight, nullptr);
}

Request PushPull::ipush(std::uint64_t key, const void* data, double weight, void* stream) {
  const std::size_t ki = state_->map().key_index(key);
  state_->check_push(ki, data, weight);
  // The request keeps the state alive: it may run after this object is gone.
  return enqueue(state_->comm(), [st = state_, ki, data, weight, stream] {
    st->push(ki, static_cast<const std::byte*>(data), weight, stream);
  }, "ipush");
}

Request PushPull::ipull(std::uint64_t key, void* out, ReduceOp op) { return ipull(key, out, op, nullptr); }

Request PushPull::ipull(std::uint64_t key, void* out, ReduceOp op, void* stream) {
  const std::size_t ki = state_->map().key_index(key);
  state_->check_pull(ki, out, op);
  return enqueue(state_->comm(),
                 [st = state_, ki, out, op, stream] { st->pull(ki, static_cast<std::byte*>(out), op, stream); },
                 "ipull");
}

PartialResult PushPull::partial_push(std::uint64_t key, const void* data, void* result, ReduceOp op,
                                     const PartialOptions& opts) {
  return partial_push(key, data, result, op, opts, nullptr);
}

PartialResult PushPull::partial_push(std::uint64_t key, const void* data, void* result, ReduceOp op,
                                     const PartialOptions& opts, void* stream) {
  const std::size_t ki = state_->map().key_index(key);
  return state_->partial_push(ki, data, result, op, opts, stream);
}

}  // namespace antdt
