// What the API layer (collectives/api/) and the other entries (push-pull, the
// device paths) use of the collectives: the one entry of every collective
// call (execute.hpp) and of point-to-point transfers (transfer.hpp), the
// algorithm choice (selection.hpp), the calls issued on a communicator
// (issued_calls.hpp: groups, requests), and the partial collectives' calls. Uses those headers only.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"
#include "collectives/execute.hpp"
#include "collectives/issued_calls.hpp"
#include "collectives/selection.hpp"
#include "collectives/transfer.hpp"

namespace antdt::coll {

// Partial collectives (collectives/partial/partial_allreduce.cpp,
// docs/partial.md); partial_allreduce itself is coll::execute's Mode::partial.
// The host partial AllReduce, on host buffers (the device path's staged call).
PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts);
PartialResult partial_finish(detail::CommImpl& comm);
StragglerClass straggler_class(detail::CommImpl& comm, int rank);

}  // namespace antdt::coll
