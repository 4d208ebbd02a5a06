// The partial AllReduce's host protocol and its companions (docs/partial.md),
// defined in collectives/partial/partial_allreduce.cpp. The public
// partial_allreduce is coll::execute's Mode::partial (collectives/execute.hpp),
// which stages device buffers and then calls partial_allreduce here.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"

#include <cstddef>

namespace antdt::coll {

// One step on host buffers (the device path's staged call runs it on host views).
PartialResult partial_allreduce(detail::CommImpl& comm, const void* send, void* recv, std::size_t count,
                                DataType dtype, ReduceOp op, const PartialOptions& opts);
// Ends this rank's run of partial steps.
PartialResult partial_finish(detail::CommImpl& comm);
// The class the arbiter last reported for `rank` (healthy before any step).
StragglerClass straggler_class(detail::CommImpl& comm, int rank);

}  // namespace antdt::coll
