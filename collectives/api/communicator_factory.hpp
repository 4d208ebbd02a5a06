// How a rank gets its Communicator, behind Communicator::create (a UniqueId
// the caller shared) and Communicator::from_env (the launcher's environment:
// ANTDT_RANK/ANTDT_ROOT, or mpirun-style ranks that meet through an id file
// rank 0 publishes, or a single rank): checking the rank, the startup log,
// placing the rank on its cores, the bootstrap, the transport (UCX, or inproc
// groups of threads that share an id) and the arbiter's control links.
// Defined in collectives/api/communicator_factory.cpp, which also defines
// detail::make_communicator (collectives/api/make_communicator.hpp).
#pragma once

#include <functional>

#include <antdt/comm.hpp>

namespace antdt::api {

// InvalidArgument for a bad rank, size or transport name.
// `still_wanted` (rank 0, TCP bootstrap only): asked while ranks are missing;
// throws to give the communicator up (core/bootstrap_admission.hpp).
Communicator communicator_from_unique_id(const UniqueId& id, int rank, int size, const CommOptions& opts,
                                        std::function<void()> still_wanted = {});
// ConfigError when the environment names an incomplete job.
Communicator communicator_from_env();

}  // namespace antdt::api
