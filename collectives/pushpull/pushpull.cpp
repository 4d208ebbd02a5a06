// Push-pull (parameter-server mode): docs/collectives.md#push-pull.
//
// push(key): every worker sends, to each server of the key, its weight and
// then its data for that server's partitions (in partition order); each server
// posts every receive at once and adds the partitions in worker rank order as
// they arrive, so the aggregate is the same bytes whatever the arrival order
// and a partition's reduction overlaps the next one's transfer.
// pull(key): each server sends its partitions of the aggregate (the sum, or
// the weighted average) to every worker.
// partial_push(key): one partial step (collectives/partial/partial_step.hpp) whose
// contributors aggregate the key's partitions among themselves the same way.
// Device buffers (docs/pushpull.md#device-buffers): a worker's pushed tensor
// is downloaded into a host copy segment by segment, each segment's pieces
// sent as soon as they have landed; a pulled result is received into a host
// copy and uploaded segment by segment as its pieces arrive. Servers keep
// their aggregates in host memory either way.
#include "collectives/pushpull/pushpull.hpp"

#include "collectives/collectives.hpp"
#include "collectives/device/device_collectives.hpp"
#include "collectives/partial/partial_step.hpp"
#include "collectives/shm_common.hpp"
#include "collectives/suite.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_set>

namespace antdt::coll::pushpull {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A key's contribution to message signatures: never 0 (0 means "no layout").
std::uint64_t key_salt(std::uint64_t key, std::uint64_t kind) noexcept {
  std::uint64_t h = mix(mix(0xcbf29ce484222325ULL, key), kind);
  return h == 0 ? 1 : h;
}

bool is_float(DataType t) noexcept {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}

// The server of a piece starting at element `first` of `count` elements, out
// of a total of `total` elements spread over `servers` by range: the one
// whose range holds the piece's midpoint.
std::size_t range_owner(std::size_t first, std::size_t count, std::size_t total, std::size_t servers) {
  const double midpoint = (static_cast<double>(first) + static_cast<double>(count) / 2) / static_cast<double>(total);
  return std::min(servers - 1, static_cast<std::size_t>(midpoint * static_cast<double>(servers)));
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> split(std::size_t count, std::size_t esize,
                                                       std::size_t partition_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  if (count == 0) return parts;
  const std::size_t per_part = std::max<std::size_t>(1, partition_bytes / esize);  // elements
  const std::size_t n = count / per_part + (count % per_part != 0 ? 1 : 0);
  const std::size_t base = count / n, extra = count % n;
  std::size_t first = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = base + (i < extra ? 1 : 0);
    parts.emplace_back(first, c);
    first += c;
  }
  return parts;
}

Layout Layout::make(std::span<const PushPullKey> keys, std::span<const int> servers, int nranks,
                    std::size_t partition_bytes, std::size_t chunk_bytes) {
  ANTDT_CHECK_ARG(partition_bytes >= 4096, "push-pull: partition size must be at least 4096 bytes, got ",
                  partition_bytes);
  ANTDT_CHECK_ARG(chunk_bytes >= 1, "push-pull: chunk size must be at least 1 byte");
  Layout l;
  l.partition_bytes = partition_bytes;
  l.chunk_bytes = chunk_bytes;
  for (int s : servers) {
    ANTDT_CHECK_ARG(s >= 0 && s < nranks, "push-pull: server rank ", s, " is out of range [0, ", nranks, ")");
    l.servers.push_back(s);
  }
  std::sort(l.servers.begin(), l.servers.end());
  ANTDT_CHECK_ARG(std::adjacent_find(l.servers.begin(), l.servers.end()) == l.servers.end(),
                  "push-pull: a server rank is listed twice");
  if (l.servers.empty()) {
    for (int r = 0; r < nranks; ++r) l.servers.push_back(r), l.workers.push_back(r);
  } else {
    for (int r = 0; r < nranks; ++r)
      if (!std::binary_search(l.servers.begin(), l.servers.end(), r)) l.workers.push_back(r);
    ANTDT_CHECK_ARG(!l.workers.empty(), "push-pull: every one of the ", nranks,
                    " ranks is a dedicated server; at least one rank must be a worker");
  }

  std::unordered_set<std::uint64_t> seen;
  for (const auto& k : keys) {
    check_dtype(k.dtype);
    ANTDT_CHECK_ARG(seen.insert(k.key).second, "push-pull: key ", k.key, " is registered twice");
    const std::size_t esize = dtype_size(k.dtype);
    ANTDT_CHECK_ARG(k.count <= std::numeric_limits<std::size_t>::max() / esize, "push-pull: key ", k.key, " count ",
                    k.count, " overflows size_t bytes");
    l.keys.push_back(KeyEntry{k, esize, 0, 0});
  }
  std::sort(l.keys.begin(), l.keys.end(), [](const auto& a, const auto& b) { return a.spec.key < b.spec.key; });

  // Partitions in key order, then their byte ranges spread over the servers.
  std::vector<std::size_t> offsets;  // byte offset of each partition in the concatenated table
  std::size_t total = 0;
  for (std::size_t ki = 0; ki < l.keys.size(); ++ki) {
    auto& e = l.keys[ki];
    e.first_partition = l.partitions.size();
    for (auto [first, count] : split(e.spec.count, e.esize, partition_bytes)) {
      l.partitions.push_back(Partition{ki, first, count, -1});
      offsets.push_back(total);
      ANTDT_CHECK_ARG(total <= std::numeric_limits<std::size_t>::max() - count * e.esize,
                      "push-pull: the key table's total size overflows size_t");
      total += count * e.esize;
    }
    e.partitions = l.partitions.size() - e.first_partition;
  }
  for (std::size_t p = 0; p < l.partitions.size(); ++p) {
    auto& part = l.partitions[p];
    const std::size_t bytes = part.count * l.keys[part.key_index].esize;
    part.server = l.servers[range_owner(offsets[p], bytes, total, l.servers.size())];
  }
  for (auto& e : l.keys) {
    e.first_piece = l.pieces.size();
    const std::size_t per_piece = std::max<std::size_t>(1, chunk_bytes / e.esize);  // elements
    for (std::size_t p = e.first_partition; p < e.first_partition + e.partitions; ++p) {
      const auto& part = l.partitions[p];
      for (std::size_t off = 0; off < part.count; off += per_piece)
        l.pieces.push_back(Piece{part.first + off, std::min(per_piece, part.count - off), part.server, p});
    }
    e.pieces = l.pieces.size() - e.first_piece;
  }
  return l;
}

std::size_t Layout::key_index(std::uint64_t key) const {
  auto it = std::lower_bound(keys.begin(), keys.end(), key, [](const auto& e, std::uint64_t k) { return e.spec.key < k; });
  ANTDT_CHECK_ARG(it != keys.end() && it->spec.key == key, "push-pull: key ", key, " is not in the table");
  return static_cast<std::size_t>(it - keys.begin());
}

std::span<const Partition> Layout::partitions_of(std::size_t key_index) const {
  const auto& e = keys[key_index];
  return std::span(partitions).subspan(e.first_partition, e.partitions);
}

std::span<const Piece> Layout::pieces_of(std::size_t key_index) const {
  const auto& e = keys[key_index];
  return std::span(pieces).subspan(e.first_piece, e.pieces);
}

std::uint64_t Layout::hash() const noexcept {
  std::uint64_t h = mix(0xcbf29ce484222325ULL, keys.size());
  for (const auto& e : keys) h = mix(mix(mix(h, e.spec.key), e.spec.count), static_cast<std::uint64_t>(e.spec.dtype));
  h = mix(mix(mix(h, partition_bytes), chunk_bytes), servers.size());
  for (int s : servers) h = mix(h, static_cast<std::uint64_t>(s));
  return h;
}

void check_weight(DataType t, double weight, const char* what) {
  ANTDT_CHECK_ARG(std::isfinite(weight) && weight >= 0, what, ": weight must be finite and >= 0, got ", weight);
  if (!is_float(t))
    ANTDT_CHECK_ARG(weight == std::trunc(weight) && weight <= 9.0e18, what, ": integer dtype ", dtype_name(t),
                    " needs an integral weight, got ", weight);
}

bool finish_is_copy(DataType t, ReduceOp op) noexcept { return op == ReduceOp::sum && weighted_sum_type(t) == t; }

}  // namespace antdt::coll::pushpull

namespace antdt::detail {

using coll::Algo;
using coll::Call;
using coll::Kind;
using coll::Signature;
using namespace coll::pushpull;

class PushPullState {
 public:
  PushPullState(detail::CommImpl& comm, Layout layout) : comm_(comm), layout_(std::move(layout)) {
    const int me = comm.rank();
    worker_ = std::binary_search(layout_.workers.begin(), layout_.workers.end(), me);
    server_ = std::binary_search(layout_.servers.begin(), layout_.servers.end(), me);
    shards_.resize(layout_.keys.size());
    for (std::size_t ki = 0; ki < layout_.keys.size(); ++ki) {
      const auto pieces = layout_.pieces_of(ki);
      auto& sh = shards_[ki];
      auto mine = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return p.server == me; });
      sh.first_piece = static_cast<std::size_t>(mine - pieces.begin());
      while (mine != pieces.end() && mine->server == me) ++sh.pieces, ++mine;
      if (sh.pieces == 0) continue;
      sh.lo = pieces[sh.first_piece].first;
      sh.hi = pieces[sh.first_piece + sh.pieces - 1].first + pieces[sh.first_piece + sh.pieces - 1].count;
      const auto& e = layout_.keys[ki];
      sh.acc.assign((sh.hi - sh.lo) * dtype_size(weighted_sum_type(e.spec.dtype)), std::byte{0});
    }
    remote_weights_.resize(layout_.workers.size());
    // Each key's servers and their ranges (a server's pieces of a key are contiguous).
    server_ranges_.resize(layout_.keys.size());
    for (std::size_t ki = 0; ki < layout_.keys.size(); ++ki) {
      for (const auto& p : layout_.pieces_of(ki)) {
        auto& ranges = server_ranges_[ki];
        if (ranges.empty() || ranges.back().rank != p.server)
          ranges.push_back({p.server, p.first, p.first + p.count});
        else
          ranges.back().hi = p.first + p.count;
      }
    }
  }

  const Layout& layout() const noexcept { return layout_; }
  bool worker() const noexcept { return worker_; }
  bool server() const noexcept { return server_; }
  detail::CommImpl& comm() noexcept { return comm_; }

  void check_push(std::size_t ki, const void* data, double weight) const {
    const auto& e = layout_.keys[ki];
    check_weight(e.spec.dtype, weight, "push");
    ANTDT_CHECK_ARG(!worker_ || e.spec.count == 0 || data != nullptr, "push: data is null for key ", e.spec.key,
                    " with count ", e.spec.count);
  }
  void check_pull(std::size_t ki, const void* out, ReduceOp op) const {
    const auto& e = layout_.keys[ki];
    ANTDT_CHECK_ARG(op == ReduceOp::sum || op == ReduceOp::avg, "pull: op must be sum or avg, got ", op_name(op));
    ANTDT_CHECK_ARG(op == ReduceOp::sum || is_float(e.spec.dtype), "pull: avg needs a floating-point dtype; key ",
                    e.spec.key, " is ", dtype_name(e.spec.dtype));
    ANTDT_CHECK_ARG(!worker_ || e.spec.count == 0 || out != nullptr, "pull: out is null for key ", e.spec.key,
                    " with count ", e.spec.count);
  }

  // `stream`: a cudaStream_t (nullptr: the legacy default stream) that a
  // call on a device buffer is ordered after and makes wait for it; with host
  // buffers, a non-null stream is synchronised first.
  void push(std::size_t ki, const std::byte* data, double weight, void* stream);
  void pull(std::size_t ki, std::byte* out, ReduceOp op, void* stream);
  PartialResult partial_push(std::size_t ki, const void* data, void* result, ReduceOp op, const PartialOptions& opts,
                             void* stream);

 private:
  // This server's element range [lo, hi) of one key: its pieces
  // [first_piece, first_piece + pieces) of the key.
  struct Shard {
    std::size_t first_piece = 0, pieces = 0;
    std::size_t lo = 0, hi = 0;
    std::vector<std::byte> acc;     // weighted_sum_type elements
    std::vector<std::byte> result;  // dtype elements, when finish() is not a copy
    std::optional<ReduceOp> result_op;  // result holds finish(op) of the current aggregate
    double total_weight = 0;
    bool round_open = false;  // pushed since the last pull
  };

  void partial_reduce(Call& call, std::size_t ki, ReduceOp op, std::span<const coll::partial::Contributor> contributors,
                      const std::byte* send, std::byte* result);
  // The shared-memory view of key `ki` (pushpull_shm.cpp).
  ShmKey shm_key(std::size_t ki) {
    const auto& e = layout_.keys[ki];
    auto& sh = shards_[ki];
    ShmKey k;
    k.dtype = e.spec.dtype;
    k.esize = e.esize;
    k.count = e.spec.count;
    k.worker = worker_;
    k.server = sh.pieces > 0;
    k.workers = layout_.workers;
    k.servers = layout_.servers;
    k.server_ranges = server_ranges_[ki];
    k.shard_lo = sh.lo;
    k.shard_hi = sh.hi;
    k.acc = sh.acc.data();
    k.first_push = !sh.round_open;
    return k;
  }
  // The server's bookkeeping after a push of key `ki` (either path).
  void close_push(std::size_t ki, double own_weight);
  // The finished aggregate of this server's range of key `ki` for `op`.
  const std::byte* shard_result(std::size_t ki, ReduceOp op);

  detail::CommImpl& comm_;
  Layout layout_;
  bool worker_ = false, server_ = false;
  std::vector<Shard> shards_;
  double own_weight_ = 0;                // the weight message this rank sends (alive until the call ends)
  std::vector<double> remote_weights_;   // weights received, by worker index
  std::vector<std::byte> partial_acc_;   // grow-only: a partial step's aggregate of this rank's partitions
  std::vector<std::size_t> recv_index_;  // grow-only: per contributor, where its receives start
  std::vector<std::byte> device_copy_;   // grow-only: host copy of a worker's device tensor (push or pull)
  std::vector<std::vector<ServerRange>> server_ranges_;  // per key
};

void PushPullState::close_push(std::size_t ki, double own_weight) {
  auto& sh = shards_[ki];
  if (sh.pieces == 0) return;
  for (std::size_t w = 0; w < layout_.workers.size(); ++w)
    if (layout_.workers[w] == comm_.rank()) remote_weights_[w] = own_weight;
  if (!sh.round_open) sh.total_weight = 0;
  for (std::size_t w = 0; w < layout_.workers.size(); ++w) sh.total_weight += remote_weights_[w];
  sh.round_open = true;
  sh.result_op.reset();
}

const std::byte* PushPullState::shard_result(std::size_t ki, ReduceOp op) {
  const auto& e = layout_.keys[ki];
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
  const auto& e = layout_.keys[ki];
  const auto pieces = layout_.pieces_of(ki);
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
  sig.salt = key_salt(e.spec.key, 1);
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
    const std::size_t nworkers = layout_.workers.size();
    // One scratch slot per other worker: slot(w) skips this rank's own position.
    const std::size_t own = worker_ ? static_cast<std::size_t>(std::lower_bound(layout_.workers.begin(),
                                                                                layout_.workers.end(), me) -
                                                               layout_.workers.begin())
                                    : nworkers;
    auto slot = [own](std::size_t w) { return w > own ? w - 1 : w; };
    auto staging = call.scratch((worker_ ? nworkers - 1 : nworkers) * shard_bytes);
    const std::size_t recv_base = index;
    const std::size_t per_worker = sh.pieces + 1;  // weight, then pieces
    for (std::size_t w = 0; w < nworkers; ++w) {
      const int rank = layout_.workers[w];
      if (rank == me) continue;
      call.recv(recv_base + w * per_worker, rank, std::as_writable_bytes(std::span(&remote_weights_[w], 1)));
      for (std::size_t q = 0; q < sh.pieces; ++q) {
        const auto& p = pieces[sh.first_piece + q];
        call.recv(recv_base + w * per_worker + 1 + q, rank,
                  staging.subspan(slot(w) * shard_bytes + (p.first - sh.lo) * e.esize, p.count * e.esize));
      }
    }
    for (std::size_t w = 0; w < nworkers; ++w) {
      if (layout_.workers[w] == me)
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
        if (layout_.workers[w] == me) {
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
  const auto& e = layout_.keys[ki];
  const auto pieces = layout_.pieces_of(ki);
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
  sig.salt = key_salt(e.spec.key, 2);
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
    for (int rank : layout_.workers) {
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

// A partial step's data movement: the key's partitions spread by range over
// the step's contributors (a late rank cannot serve the step it missed), each
// aggregated by its owner in contributor order with the contributors' weights
// and sent back to every contributor, piece by piece. Per pair of
// contributors, data messages precede result messages, in piece order, on
// both sides.
void PushPullState::partial_reduce(Call& call, std::size_t ki, ReduceOp op,
                                   std::span<const coll::partial::Contributor> contributors, const std::byte* send,
                                   std::byte* result) {
  const auto& e = layout_.keys[ki];
  const auto pieces = layout_.pieces_of(ki);
  const std::size_t m = contributors.size();
  const int me = comm_.rank();
  auto owner = [&](const Piece& p) {
    const auto& part = layout_.partitions[p.partition];
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
  const auto& e = layout_.keys[ki];
  if (layout_.workers.size() != static_cast<std::size_t>(comm_.size()) ||
      layout_.servers.size() != static_cast<std::size_t>(comm_.size()))
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
                              coll::PartialStepKind{key_salt(e.spec.key, 3), &reduce});
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

namespace antdt {
namespace {

// A blocking call: recorded when a group is open, else run now, after the
// non-blocking collectives issued before it (collectives/collectives.cpp does the same).
template <class Run>
void run_or_record(detail::CommImpl& comm, Run&& run) {
  if (comm.collective_state()) {
    auto& state = coll::suite(comm);
    if (state.in_group()) {
      state.record(coll::GroupedCollective{.run = std::function<void()>(std::forward<Run>(run))});
      return;
    }
    state.run_queued();
  }
  run();
}

Request enqueue(detail::CommImpl& comm, std::function<void()> run, const char* what) {
  auto& state = coll::suite(comm);
  ANTDT_CHECK_ARG(!state.in_group(), what,
                  ": non-blocking calls cannot be issued inside a group (the group itself runs at group_end())");
  return Request(state.enqueue(std::move(run)));
}

}  // namespace

PushPull::PushPull(Communicator& comm, std::span<const PushPullKey> keys, const PushPullOptions& opts) {
  detail::CommImpl& impl = comm.impl();
  impl.check_usable();
  const std::size_t partition_bytes = opts.partition_bytes != 0 ? opts.partition_bytes : impl.config().ps_partition_bytes;
  auto layout = coll::pushpull::Layout::make(keys, opts.servers, comm.size(), partition_bytes, impl.config().chunk_bytes);
  ANTDT_CHECK_ARG(!impl.collective_state() || !coll::suite(impl).in_group(),
                  "PushPull: cannot be created inside a group (it checks the key table with a collective)");
  // Every rank must have built the same layout: compare the hashes.
  const std::uint64_t mine = layout.hash();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, all.data(), 1, DataType::u64);
  for (int r = 0; r < comm.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0])
      raise<MismatchError>("PushPull: rank ", r, "'s key table or options (keys, counts, dtypes, servers, partition ",
                           "size) differ from rank 0's; every rank must pass the same");
  state_ = std::make_shared<detail::PushPullState>(impl, std::move(layout));
}

PushPull::~PushPull() = default;
PushPull::PushPull(PushPull&&) noexcept = default;
PushPull& PushPull::operator=(PushPull&&) noexcept = default;

bool PushPull::is_worker() const noexcept { return state_->worker(); }
bool PushPull::is_server() const noexcept { return state_->server(); }
int PushPull::workers() const noexcept { return static_cast<int>(state_->layout().workers.size()); }
std::vector<int> PushPull::servers() const { return state_->layout().servers; }

std::vector<PushPullPartition> PushPull::partitions(std::uint64_t key) const {
  const auto& l = state_->layout();
  std::vector<PushPullPartition> out;
  for (const auto& p : l.partitions_of(l.key_index(key))) out.push_back({key, p.first, p.count, p.server});
  return out;
}

void PushPull::push(std::uint64_t key, const void* data, double weight) { push(key, data, weight, nullptr); }

void PushPull::push(std::uint64_t key, const void* data, double weight, void* stream) {
  const std::size_t ki = state_->layout().key_index(key);
  state_->check_push(ki, data, weight);
  state_->comm().check_usable();
  // A call recorded in a group keeps the state alive until group_end() runs it.
  run_or_record(state_->comm(), [st = state_, ki, data, weight, stream] {
    st->push(ki, static_cast<const std::byte*>(data), weight, stream);
  });
}

void PushPull::pull(std::uint64_t key, void* out, ReduceOp op) { pull(key, out, op, nullptr); }

void PushPull::pull(std::uint64_t key, void* out, ReduceOp op, void* stream) {
  const std::size_t ki = state_->layout().key_index(key);
  state_->check_pull(ki, out, op);
  state_->comm().check_usable();
  run_or_record(state_->comm(),
                [st = state_, ki, out, op, stream] { st->pull(ki, static_cast<std::byte*>(out), op, stream); });
}

Request PushPull::ipush(std::uint64_t key, const void* data, double weight) {
  return ipush(key, data, weight, nullptr);
}

Request PushPull::ipush(std::uint64_t key, const void* data, double weight, void* stream) {
  const std::size_t ki = state_->layout().key_index(key);
  state_->check_push(ki, data, weight);
  // The request keeps the state alive: it may run after this object is gone.
  return enqueue(state_->comm(), [st = state_, ki, data, weight, stream] {
    st->push(ki, static_cast<const std::byte*>(data), weight, stream);
  }, "ipush");
}

Request PushPull::ipull(std::uint64_t key, void* out, ReduceOp op) { return ipull(key, out, op, nullptr); }

Request PushPull::ipull(std::uint64_t key, void* out, ReduceOp op, void* stream) {
  const std::size_t ki = state_->layout().key_index(key);
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
  const std::size_t ki = state_->layout().key_index(key);
  return state_->partial_push(ki, data, result, op, opts, stream);
}

}  // namespace antdt
