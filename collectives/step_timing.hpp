// Step timing per rank (see collectives/step_timing.cpp and docs/monitor.md).
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"

#include <optional>

namespace antdt::coll {

void begin_step(detail::CommImpl& comm);
void begin_compute(detail::CommImpl& comm, void* stream);
void end_compute(detail::CommImpl& comm, void* stream);
// `cls` is this rank's class as last reported by the arbiter (for the trace).
void end_step(detail::CommImpl& comm, std::uint64_t samples, StragglerClass cls);
// Collectives report the time they waited for peers and moved data.
void record_collective(detail::CommImpl& comm, double wait_s, double transfer_s);
// Whether record_collective() would count anything now (inside a marked step).
bool collective_timing_active(detail::CommImpl& comm);
// Compute time of the last finished step, when the trainer marks steps.
std::optional<double> last_compute_seconds(detail::CommImpl& comm);

}  // namespace antdt::coll
