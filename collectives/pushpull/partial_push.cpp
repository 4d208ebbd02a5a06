// Partial push of one key (collectives/pushpull/pushpull_state.hpp,
// docs/partial.md#partial-push): one partial step
// (collectives/partial/partial_step.hpp) whose contributors aggregate the
// key's partitions among themselves, the way servers aggregate a push.
#include "collectives/pushpull/pushpull_state.hpp"

#include "collectives/device/device_collectives.hpp"
#include "collectives/pushpull/weights.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace antdt::detail {

using coll::Call;
using namespace coll::pushpull;

// A partial step's data movement: the key's partitions spread by range over
// the step's contributors (a late rank cannot serve the step it missed), each
// aggregated by its owner in contributor order with the contributors' weights
// and sent back to every contributor, piece by piece. Per pair of
// contributors, data messages precede result messages, in piece order, on
// both sides.
void PushPullState::partial_reduce(Call& call, std::size_t ki, ReduceOp op,
                                   std::span<const coll::partial::Contributor> contributors, const std::byte* send,
                                   std::byte* result) {
  const auto& e = map_.keys[ki];
  const auto pieces = map_.pieces_of(ki);
  const std::size_t m = contributors.size();
  const int me = comm_.rank();
  auto owner = [&](const Piece& p) {
    const auto& part = map_.partitions[p.partition];
    return range_owner(part.first, part.count, e.spec.count, m);
  };
  std::size_t my_index = 0;
  while (contributors[my_index].rank != me) ++my_index;
  std::size_t qa = pieces.size(), qb = pieces.size();  // this rank's pieces [qa, qb)
  for (std::size_t q = 0; q < pieces.size(); ++q) {
    if (owner(pieces[q]) != my_index) continue;
    if (qa == pieces.size()) qa = q;
    qb = q + 1;
  }
  const std::size_t lo = qa < qb ? pieces[qa].first : 0;
  const std::size_t hi = qa < qb ? pieces[qb - 1].first + pieces[qb - 1].count : 0;
  const std::size_t shard_bytes = (hi - lo) * e.esize;
  auto slot = [my_index](std::size_t i) { return i > my_index ? i - 1 : i; };  // skips this rank
  auto staging = call.scratch((m - 1) * shard_bytes);
  const std::size_t acc_size = dtype_size(weighted_sum_type(e.spec.dtype));
  if (partial_acc_.size() < (hi - lo) * acc_size) partial_acc_.resize((hi - lo) * acc_size);
  double total = 0;
  for (const auto& c : contributors) total += c.weight;

  // 1. Receives from each other contributor: its data for my pieces, then the results of its pieces.
  std::size_t index = 0;
  recv_index_.assign(m, 0);
  for (std::size_t i = 0; i < m; ++i) {
    if (i == my_index) continue;
    recv_index_[i] = index;
    for (std::size_t q = qa; q < qb; ++q)
      call.recv(index++, contributors[i].rank,
                staging.subspan(slot(i) * shard_bytes + (pieces[q].first - lo) * e.esize, pieces[q].count * e.esize));
    for (const auto& p : pieces)
      if (owner(p) == i) call.recv(index++, contributors[i].rank, std::span(result + p.first * e.esize, p.count * e.esize));
  }
  // 2. My data for the other owners' pieces.
  for (const auto& p : pieces) {
    const std::size_t o = owner(p);
    if (o != my_index) call.send(index++, contributors[o].rank, std::span(send + p.first * e.esize, p.count * e.esize));
  }
  // 3. My pieces: aggregate in contributor order, finish, send to every other contributor.
  for (std::size_t q = qa; q < qb; ++q) {
    const auto& p = pieces[q];
    std::byte* acc = partial_acc_.data() + (p.first - lo) * acc_size;
    for (std::size_t i = 0; i < m; ++i) {
      const std::byte* src = send + p.first * e.esize;
      if (i != my_index) {
        call.wait(recv_index_[i] + (q - qa));
        src = staging.data() + slot(i) * shard_bytes + (p.first - lo) * e.esize;
      }
      accumulate_weighted(e.spec.dtype, acc, src, p.count, contributors[i].weight, i == 0);
    }
    std::byte* out = result + p.first * e.esize;
    finish_weighted(e.spec.dtype, op, acc, out, p.count, total);
    for (std::size_t i = 0; i < m; ++i)
      if (i != my_index) call.send(index++, contributors[i].rank, std::span(out, p.count * e.esize));
  }
  call.wait_all();
}

PartialResult PushPullState::partial_push(std::size_t ki, const void* data, void* result, ReduceOp op,
                                          const PartialOptions& opts, void* stream) {
  const auto& e = map_.keys[ki];
  if (map_.workers.size() != static_cast<std::size_t>(comm_.size()) ||
      map_.servers.size() != static_cast<std::size_t>(comm_.size()))
    raise<UnsupportedError>("partial_push: the round is aggregated by its contributors, so every rank must be a "
                            "worker; this PushPull has dedicated servers");
  ANTDT_CHECK_ARG(op == ReduceOp::sum || op == ReduceOp::avg, "partial_push: op must be sum or avg, got ",
                  op_name(op));
  ANTDT_CHECK_ARG(op == ReduceOp::sum || is_float(e.spec.dtype), "partial_push: avg needs a floating-point dtype; key ",
                  e.spec.key, " is ", dtype_name(e.spec.dtype));
  check_weight(e.spec.dtype, opts.weight, "partial_push");
  const coll::PartialReduce reduce = [this, ki, op](Call& call, std::span<const coll::partial::Contributor> contributors,
                                                    const std::byte* send, std::byte* out) {
    partial_reduce(call, ki, op, contributors, send, out);
  };
  const auto step = [&](const void* send, void* out) {
    return coll::partial_step(comm_, send, out, e.spec.count, e.spec.dtype, op, opts,
                              coll::PartialStepKind{key_salt(e.spec.key, KeyCall::partial_push), &reduce});
  };
  if (!coll::device::is_device_call(data, result)) {
    coll::device::synchronize_host_call(comm_, stream, "partial_push");
    return step(data, result);
  }
  // Device buffers are staged whole: the step's contributors and the share
  // this rank aggregates are known only once the arbiter has closed the step.
  // result is downloaded too: a step may leave it as it was.
  const std::size_t bytes = e.spec.count * e.esize;
  PartialResult outcome;
  coll::device::run_staged(comm_, data, data != nullptr ? bytes : 0, result, bytes, true, stream,
                           [&](const std::byte* send, std::byte* out) { outcome = step(send, out); });
  return outcome;
}

}  // namespace antdt::detail
