// A public Communicator around a transport the caller made: how the public
// API's factories (Communicator::create, from_env), the tests and the tools
// build one. Defined in collectives/api/communicator_factory.cpp.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/communicator.hpp"

#include <cstdint>
#include <memory>

namespace antdt::detail {

// rank_nodes: each rank's node identity (core/node_identity.hpp), in rank
// order; empty: every rank counts as one node. tcp_links: some rank reaches a
// peer over TCP (Transport::tcp_links, combined over the ranks).
Communicator make_communicator(std::unique_ptr<transport::Transport> transport, std::uint32_t comm_id,
                               const Config& cfg, control::Endpoints control = {},
                               std::span<const std::uint64_t> rank_nodes = {}, bool tcp_links = false);

}  // namespace antdt::detail
