// Joins an antdt communicator through the c10d Store that torch.distributed
// hands a backend: rank 0 makes the UniqueId (its listener address and the
// job secret) and publishes it under `key`; the other ranks wait for it.
#pragma once

#include <antdt/comm.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace antdt::pytorch {

// The store wait is bounded by `timeout`; the bootstrap by ANTDT_TIMEOUT_MS.
Communicator join_through_store(c10d::Store& store, const std::string& key, int rank, int size,
                                std::chrono::milliseconds timeout);

}  // namespace antdt::pytorch
