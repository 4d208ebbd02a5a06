// One step of a partial collective (collectives/partial/partial_allreduce.cpp) with a
// pluggable data movement among the step's contributors. The arbiter client,
// the result cache, catch-up of late ranks and the accounting are shared; only
// how the contributors combine their data differs: the ring for
// partial_allreduce, the push-pull servers for partial push
// (collectives/pushpull/pushpull_state.cpp, partial_push.cpp).
#pragma once

#include "collectives/call.hpp"
#include "collectives/partial/partial_protocol.hpp"

#include <functional>
#include <span>

namespace antdt::coll {

// Runs at every contributor of a step, on the step's data-plane call (its slot
// indexes free from 0). `send` is this rank's contribution, `result` where the
// step's result goes; every contributor must end with the same bytes.
using PartialReduce = std::function<void(Call& call, std::span<const partial::Contributor> contributors,
                                         const std::byte* send, std::byte* result)>;

struct PartialStepKind {
  // Mixed into the step's signatures (arbiter and data plane), so that ranks
  // mixing kinds of partial calls in one run fail with MismatchError. 0: partial_allreduce.
  std::uint64_t salt = 0;
  const PartialReduce* reduce = nullptr;  // null: the ring of partial_allreduce
};

// partial_allreduce's semantics (docs/partial.md) with `kind`'s data movement.
PartialResult partial_step(detail::CommImpl& comm, const void* send, void* recv, std::size_t count, DataType dtype,
                           ReduceOp op, const PartialOptions& opts, const PartialStepKind& kind);

}  // namespace antdt::coll
