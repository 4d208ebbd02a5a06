// Push and pull of one key (collectives/pushpull/pushpull_state.hpp):
// docs/collectives.md#push-pull.
//
// push(key): every worker sends, to each server of the key, its weight and
// then its data for that server's partitions (in partition order); each server
// posts every receive at once and adds the partitions in worker rank order as
// they arrive, so the aggregate is the same bytes whatever the arrival order
// and a partition's reduction overlaps the next one's transfer.
// pull(key): each server sends its partitions of the aggregate (the sum, or
// the weighted average) to every worker.
// Device buffers (docs/pushpull.md#device-buffers): a worker's pushed tensor
// is downloaded into a host copy segment by segment, each segment's pieces
// sent as soon as they have landed; a pulled result is received into a host
// copy and uploaded segment by segment as its pieces arrive. Servers keep
// their aggregates in host memory either way.
#include "collectives/pushpull/pushpull_state.hpp"

#include "collectives/collectives.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/pushpull/weights.hpp"
#include "collectives/shm_common.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace antdt::detail {

using coll::Algo;
using coll::Call;
using coll::Kind;
using coll::Signature;
using namespace coll::pushpull;

PushPullState::PushPullState(CommImpl& comm, PartitionMap map) : comm_(comm), map_(std::move(map)) {
  const int me = comm.rank();
  worker_ = std::binary_search(map_.workers.begin(), map_.workers.end(), me);
  server_ = std::binary_search(map_.servers.begin(), map_.servers.end(), me);
  shards_.resize(map_.keys.size());
  for (std::size_t ki = 0; ki < map_.keys.size(); ++ki) {
    const auto pieces = map_.pieces_of(ki);
    auto& sh = shards_[ki];
    auto mine = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return p.server == me; });
    sh.first_piece = static_cast<std::size_t>(mine - pieces.begin());
    while (mine != pieces.end() && mine->server == me) ++sh.pieces, ++mine;
    if (sh.pieces == 0) continue;
    sh.lo = pieces[sh.first_piece].first;
    sh.hi = pieces[sh.first_piece + sh.pieces - 1].first + pieces[sh.first_piece + sh.pieces - 1].count;
    const auto& e = map_.keys[ki];
    sh.acc.assign((sh.hi - sh.lo) * dtype_size(weighted_sum_type(e.spec.dtype)), std::byte{0});
  }
  remote_weights_.resize(map_.workers.size());
  // Each key's servers and their ranges (a server's pieces of a key are contiguous).
  server_ranges_.resize(map_.keys.size());
  for (std::size_t ki = 0; ki < map_.keys.size(); ++ki) {
    for (const auto& p : map_.pieces_of(ki)) {
      auto& ranges = server_ranges_[ki];
      if (ranges.empty() || ranges.back().rank != p.server)
        ranges.push_back({p.server, p.first, p.first + p.count});
      else
        ranges.back().hi = p.first + p.count;
    }
  }
}

void PushPullState::check_push(std::size_t ki, const void* data, double weight) const {
  const auto& e = map_.keys[ki];
  check_weight(e.spec.dtype, weight, "push");
  ANTDT_CHECK_ARG(!worker_ || e.spec.count == 0 || data != nullptr, "push: data is null for key ", e.spec.key,
                  " with count ", e.spec.count);
}

void PushPullState::check_pull(std::size_t ki, const void* out, ReduceOp op) const {
  const auto& e = map_.keys[ki];
  ANTDT_CHECK_ARG(op == ReduceOp::sum || op == ReduceOp::avg, "pull: op must be sum or avg, got ", op_name(op));
  ANTDT_CHECK_ARG(op == ReduceOp::sum || is_float(e.spec.dtype), "pull: avg needs a floating-point dtype; key ",
                  e.spec.key, " is ", dtype_name(e.spec.dtype));
  ANTDT_CHECK_ARG(!worker_ || e.spec.count == 0 || out != nullptr, "pull: out is null for key ", e.spec.key,
                  " with count ", e.spec.count);
}

ShmKey PushPullState::shm_key(std::size_t ki) {
  const auto& e = map_.keys[ki];
  auto& sh = shards_[ki];
  ShmKey k;
  k.dtype = e.spec.dtype;
  k.esize = e.esize;
  k.count = e.spec.count;
  k.worker = worker_;
  k.server = sh.pieces > 0;
  k.workers = map_.workers;
  k.servers = map_.servers;
  k.server_ranges = server_ranges_[ki];
  k.shard_lo = sh.lo;
  k.shard_hi = sh.hi;
  k.acc = sh.acc.data();
  k.first_push = !sh.round_open;
  return k;
}

void PushPullState::close_push(std::size_t ki, double own_weight) {
  auto& sh = shards_[ki];
  if (sh.pieces == 0) return;
  for (std::size_t w = 0; w < map_.workers.size(); ++w)
    if (map_.workers[w] == comm_.rank()) remote_weights_[w] = own_weight;
  if (!sh.round_open) sh.total_weight = 0;
  for (std::size_t w = 0; w < map_.workers.size(); ++w) sh.total_weight += remote_weights_[w];
  sh.round_open = true;
  sh.result_op.reset();
}

const std::byte* PushPullState::shard_result(std::size_t ki, ReduceOp op) {
  const auto& e = map_.keys[ki];
  auto& sh = shards_[ki];
  if (finish_is_copy(e.spec.dtype, op)) return sh.acc.data();
  if (sh.result_op != op) {
    const std::size_t n = sh.hi - sh.lo;
    sh.result.resize(n * e.esize);
    finish_weighted(e.spec.dtype, op, sh.acc.data(), sh.result.data(), n, sh.total_weight);
    sh.result_op = op;
  }
  return sh.result.data();
}

void PushPullState::push(std::size_t ki, const std::byte* device_or_host_data, double weight, void* stream) {
  const auto& e = map_.keys[ki];
  const auto pieces = map_.pieces_of(ki);
  if (pieces.empty()) return;
  const int me = comm_.rank();
  // A worker's device tensor is sent from a host copy (a dedicated server's data is ignored).
  const bool on_device = worker_ && coll::device::is_device_call(device_or_host_data, nullptr);
  if (worker_ && !on_device) coll::device::synchronize_host_call(comm_, stream, "push");
  std::optional<coll::device::StagedCall> device;
  const std::byte* data = device_or_host_data;
  if (on_device) {
    device.emplace(comm_, device_or_host_data, stream, "push");
    if (device_copy_.size() < e.spec.count * e.esize) device_copy_.resize(e.spec.count * e.esize);
    data = device_copy_.data();
  }
  const bool through_shm = coll::use_shm_pushpull(comm_);
  Signature sig{Kind::push, e.spec.count, e.spec.dtype, ReduceOp::sum, -1, through_shm ? Algo::shm_bulk : Algo::none};
  sig.salt = key_salt(e.spec.key, KeyCall::push);
  Call call(comm_, sig);
  if (through_shm && coll::shm_ready(call, detail::ShmArea::pushpull)) {
    if (on_device)  // the whole tensor first: the blocks do not follow the staging segments
      device->download(device_or_host_data, std::span(device_copy_.data(), e.spec.count * e.esize), [](std::size_t) {});
    shm_push(call, *comm_.shm(detail::ShmArea::pushpull), shm_key(ki), data, weight, remote_weights_);
    close_push(ki, weight);
    call.wait_all();
    if (device) device->finish();
    return;
  }
  std::size_t index = 0;
  // 1. As a worker: to each other server, the weight, then the pieces it
  //    serves, in element order; a piece is sent once data[0, ready) holds it.
  if (worker_) {
    own_weight_ = weight;
    const auto weight_bytes = std::as_bytes(std::span(&own_weight_, 1));
    int previous = -1;
    std::size_t next = 0;  // the first piece not sent yet
    const auto send_ready = [&](std::size_t ready) {
      for (; next < pieces.size() && (pieces[next].first + pieces[next].count) * e.esize <= ready; ++next) {
        const auto& p = pieces[next];
        if (p.server == me) continue;
        if (p.server != previous) call.send(index++, p.server, weight_bytes);
        previous = p.server;
        call.send(index++, p.server, std::span(data + p.first * e.esize, p.count * e.esize));
      }
    };
    if (on_device)
      device->download(device_or_host_data, std::span(device_copy_.data(), e.spec.count * e.esize), send_ready);
    else
      send_ready(e.spec.count * e.esize);
  }
  // 2. As a server: every receive posted at once, then each piece added in worker rank order.
  auto& sh = shards_[ki];
  if (sh.pieces > 0) {
    const std::size_t shard_bytes = (sh.hi - sh.lo) * e.esize;
    const std::size_t nworkers = map_.workers.size();
    // One scratch slot per other worker: slot(w) skips this rank's own position.
    const std::size_t own = worker_ ? static_cast<std::size_t>(std::lower_bound(map_.workers.begin(),
                                                                                map_.workers.end(), me) -
                                                               map_.workers.begin())
                                    : nworkers;
    auto slot = [own](std::size_t w) { return w > own ? w - 1 : w; };
    auto staging = call.scratch((worker_ ? nworkers - 1 : nworkers) * shard_bytes);
    const std::size_t recv_base = index;
    const std::size_t per_worker = sh.pieces + 1;  // weight, then pieces
    for (std::size_t w = 0; w < nworkers; ++w) {
      const int rank = map_.workers[w];
      if (rank == me) continue;
      call.recv(recv_base + w * per_worker, rank, std::as_writable_bytes(std::span(&remote_weights_[w], 1)));
      for (std::size_t q = 0; q < sh.pieces; ++q) {
        const auto& p = pieces[sh.first_piece + q];
        call.recv(recv_base + w * per_worker + 1 + q, rank,
                  staging.subspan(slot(w) * shard_bytes + (p.first - sh.lo) * e.esize, p.count * e.esize));
      }
    }
    for (std::size_t w = 0; w < nworkers; ++w) {
      if (map_.workers[w] == me)
        remote_weights_[w] = weight;
      else
        call.wait(recv_base + w * per_worker);
      check_weight(e.spec.dtype, remote_weights_[w], "push (a worker's weight)");
    }
    const bool first_push = !sh.round_open;
    const std::size_t acc_size = dtype_size(weighted_sum_type(e.spec.dtype));
    for (std::size_t q = 0; q < sh.pieces; ++q) {
      const auto& p = pieces[sh.first_piece + q];
      for (std::size_t w = 0; w < nworkers; ++w) {
        const std::byte* src;
        if (map_.workers[w] == me) {
          src = data + p.first * e.esize;
        } else {
          call.wait(recv_base + w * per_worker + 1 + q);
          src = staging.data() + slot(w) * shard_bytes + (p.first - sh.lo) * e.esize;
        }
        accumulate_weighted(e.spec.dtype, sh.acc.data() + (p.first - sh.lo) * acc_size, src, p.count, remote_weights_[w],
                   first_push && w == 0);
      }
    }
  }
  close_push(ki, weight);
  call.wait_all();
  if (device) device->finish();
}

void PushPullState::pull(std::size_t ki, std::byte* device_or_host_out, ReduceOp op, void* stream) {
  const auto& e = map_.keys[ki];
  const auto pieces = map_.pieces_of(ki);
  if (pieces.empty()) return;
  const int me = comm_.rank();
  // A worker's device result is received into a host copy, then uploaded.
  const bool on_device = worker_ && coll::device::is_device_call(nullptr, device_or_host_out);
  if (worker_ && !on_device) coll::device::synchronize_host_call(comm_, stream, "pull");
  std::optional<coll::device::StagedCall> device;
  std::byte* out = device_or_host_out;
  if (on_device) {
    device.emplace(comm_, device_or_host_out, stream, "pull");
    if (device_copy_.size() < e.spec.count * e.esize) device_copy_.resize(e.spec.count * e.esize);
    out = device_copy_.data();
  }
  const bool through_shm = coll::use_shm_pushpull(comm_);
  Signature sig{Kind::pull, e.spec.count, e.spec.dtype, op, -1, through_shm ? Algo::shm_bulk : Algo::none};
  sig.salt = key_salt(e.spec.key, KeyCall::pull);
  Call call(comm_, sig);
  auto& sh = shards_[ki];
  if (through_shm && coll::shm_ready(call, detail::ShmArea::pushpull)) {
    shm_pull(call, *comm_.shm(detail::ShmArea::pushpull), shm_key(ki), sh.pieces > 0 ? shard_result(ki, op) : nullptr,
             out);
    sh.round_open = false;
    if (on_device)
      device->upload(device_or_host_out, std::span(device_copy_.data(), e.spec.count * e.esize),
                     [](std::size_t, std::size_t) {});
    call.wait_all();
    if (device) device->finish();
    return;
  }
  std::size_t index = 0;
  // 1. As a worker: every receive from the other servers, straight into out
  //    (receive k is the k-th piece served by another rank).
  if (worker_) {
    for (const auto& p : pieces)
      if (p.server != me) call.recv(index++, p.server, std::span(out + p.first * e.esize, p.count * e.esize));
  }
  // 2. As a server: this server's pieces of the result to every other worker.
  if (sh.pieces > 0) {
    const std::size_t n = sh.hi - sh.lo;
    const std::byte* src = shard_result(ki, op);
    for (int rank : map_.workers) {
      if (rank == me) continue;
      for (std::size_t q = 0; q < sh.pieces; ++q) {
        const auto& p = pieces[sh.first_piece + q];
        call.send(index++, rank, std::span(src + (p.first - sh.lo) * e.esize, p.count * e.esize));
      }
    }
    if (worker_) std::memcpy(out + sh.lo * e.esize, src, n * e.esize);
    sh.round_open = false;
  }
  // 3. A device result: each segment is uploaded once the pieces it overlaps
  //    have arrived, while the next pieces are still being received.
  if (on_device) {
    std::size_t next = 0, receive = 0;  // the first piece not waited for; its receive's index
    device->upload(device_or_host_out, std::span(device_copy_.data(), e.spec.count * e.esize),
                   [&](std::size_t, std::size_t end) {
                     for (; next < pieces.size() && pieces[next].first * e.esize < end; ++next)
                       if (pieces[next].server != me) call.wait(receive++);
                   });
  }
  call.wait_all();
  if (device) device->finish();
}

}  // namespace antdt::detail
