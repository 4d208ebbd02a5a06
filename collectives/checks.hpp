// The argument checks of every collective and point-to-point call: everything
// is checked before anything is sent, so a bad call fails on the rank that
// made it (InvalidArgument) instead of as a mismatch on its peers. Uses
// collectives/collective_args.hpp, the communicator and core/error.hpp.
#pragma once

#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"

namespace antdt::coll {

// The checks of args.kind (not of partial calls: partial_step checks its own).
void check_args(const detail::CommImpl& comm, const CollectiveArgs& args);

// A send or receive of `count` elements with `peer`; `what` names the call ("isend").
void check_transfer(const detail::CommImpl& comm, const void* buf, std::size_t count, DataType dtype, int peer,
                    const char* what);

}  // namespace antdt::coll
