// A communicator's issued calls (collectives/issued_calls.hpp).
#include "collectives/issued_calls.hpp"

namespace antdt::coll {

IssuedCalls& issued_calls(detail::CommImpl& comm) {
  auto& state = comm.collective_state();
  if (!state) state = std::make_unique<IssuedCalls>(comm);
  return static_cast<IssuedCalls&>(*state);
}

void drain_queue(detail::CommImpl& comm) {
  // Caller mode: nothing runs alongside the caller, and partial steps keep
  // their old rule (they do not run queued collectives first).
  IssuedCalls* issued = existing_issued_calls(comm);
  if (issued != nullptr && issued->requests().background()) issued->requests().run_queued();
}

}  // namespace antdt::coll
