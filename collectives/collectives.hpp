// What the API layer (collectives/api/) and the other entries (push-pull, the
// device paths) use of the collectives: the one entry of every collective
// call (execute.hpp) and of point-to-point transfers (transfer.hpp), the
// algorithm choice (selection.hpp), the calls issued on a communicator
// (issued_calls.hpp: groups, requests), and the partial collectives' calls
// (partial/partial_allreduce.hpp). Uses those headers only.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/collective_args.hpp"
#include "collectives/communicator.hpp"
#include "collectives/execute.hpp"
#include "collectives/issued_calls.hpp"
#include "collectives/partial/partial_allreduce.hpp"
#include "collectives/selection.hpp"
#include "collectives/transfer.hpp"
