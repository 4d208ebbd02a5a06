// PushPullState: one PushPull's protocol state on this rank (its role, its
// partition map, each served key's aggregate) and the calls that move a key:
// push and pull (pushpull_state.cpp), partial push (partial_push.cpp). The
// public class (include/antdt/pushpull.hpp, collectives/api/pushpull.cpp)
// checks arguments and queues or records these calls.
#pragma once

#include <antdt/pushpull.hpp>

#include "collectives/call.hpp"
#include "collectives/partial/partial_step.hpp"
#include "collectives/pushpull/partition_map.hpp"
#include "collectives/pushpull/pushpull_shm.hpp"
#include "core/hash.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace antdt::coll::pushpull {

// Which of a key's calls a message belongs to (part of its salt).
enum class KeyCall : std::uint64_t { push = 1, pull = 2, partial_push = 3 };

// A key's call's contribution to message signatures (Signature::salt): never
// 0, which means "no salt".
constexpr std::uint64_t key_salt(std::uint64_t key, KeyCall call) noexcept {
  return hash::nonzero(hash::mix(hash::mix(hash::kSeed, key), static_cast<std::uint64_t>(call)));
}

}  // namespace antdt::coll::pushpull

namespace antdt::detail {

class PushPullState {
 public:
  PushPullState(CommImpl& comm, coll::pushpull::PartitionMap map);

  const coll::pushpull::PartitionMap& map() const noexcept { return map_; }
  bool worker() const noexcept { return worker_; }
  bool server() const noexcept { return server_; }
  CommImpl& comm() noexcept { return comm_; }

  // InvalidArgument unless the arguments suit key `ki` and this rank's role.
  void check_push(std::size_t ki, const void* data, double weight) const;
  void check_pull(std::size_t ki, const void* out, ReduceOp op) const;

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

  void partial_reduce(coll::Call& call, std::size_t ki, ReduceOp op,
                      std::span<const coll::partial::Contributor> contributors, const std::byte* send,
                      std::byte* result);
  // The shared-memory view of key `ki` (pushpull_shm.cpp).
  coll::pushpull::ShmKey shm_key(std::size_t ki);
  // The server's bookkeeping after a push of key `ki` (either path).
  void close_push(std::size_t ki, double own_weight);
  // The finished aggregate of this server's range of key `ki` for `op`.
  const std::byte* shard_result(std::size_t ki, ReduceOp op);

  CommImpl& comm_;
  coll::pushpull::PartitionMap map_;
  bool worker_ = false, server_ = false;
  std::vector<Shard> shards_;
  double own_weight_ = 0;                // the weight message this rank sends (alive until the call ends)
  std::vector<double> remote_weights_;   // weights received, by worker index
  std::vector<std::byte> partial_acc_;   // grow-only: a partial step's aggregate of this rank's partitions
  std::vector<std::size_t> recv_index_;  // grow-only: per contributor, where its receives start
  std::vector<std::byte> device_copy_;   // grow-only: host copy of a worker's device tensor (push or pull)
  std::vector<std::vector<coll::pushpull::ServerRange>> server_ranges_;  // per key
};

}  // namespace antdt::detail
