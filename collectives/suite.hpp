// Transitional: the names push-pull (collectives/pushpull/pushpull.cpp) and
// the device paths (collectives/device/device_collectives.cpp) still use for
// what is now collectives/issued_calls.hpp and collectives/execute.hpp. Remove
// once they include those headers and say IssuedCalls / issued_calls() /
// GroupedCall. Uses those two headers only.
#pragma once

#include "collectives/execute.hpp"
#include "collectives/issued_calls.hpp"

namespace antdt::coll {

using SuiteState = IssuedCalls;
using GroupedCollective = GroupedCall;
inline IssuedCalls& suite(detail::CommImpl& comm) { return issued_calls(comm); }

}  // namespace antdt::coll
