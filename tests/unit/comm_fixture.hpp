// Ranks as threads: runs one function per rank on its own thread, each with its
// own Communicator over the chosen transport, and collects every rank's outcome.
#pragma once

#include <antdt/comm.hpp>

#include "collectives/api/make_communicator.hpp"
#include "core/bootstrap.hpp"
#include "collectives/communicator.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "transport/inproc/inproc_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace antdt::test {

enum class TransportKind { inproc, ucx };

inline std::string to_string(TransportKind k) { return k == TransportKind::inproc ? "inproc" : "ucx"; }

inline Config test_config() {
  Config cfg;
  cfg.timeout = std::chrono::seconds(30);
  cfg.chunk_bytes = 4096;  // small chunks so that modest counts exercise the pipeline
  return cfg;
}

// Per-rank outcome: null when the rank's function returned normally.
using Outcomes = std::vector<std::exception_ptr>;

// What a test may do to each rank's transport before its communicator takes
// it (wrap it for fault injection, say); null: nothing.
using TransportWrap =
    std::function<std::unique_ptr<transport::Transport>(std::unique_ptr<transport::Transport>, int rank)>;

// How run_ranks sets each rank up, beyond the transport kind.
struct RankSetup {
  Config cfg = test_config();
  // A configuration per rank (to force disagreeing settings); null: cfg for every rank.
  std::function<Config(int rank)> config_of;
  // Each rank's node id (topology tests fake a node map); empty: the machine's own.
  std::vector<std::uint64_t> nodes;
  TransportWrap wrap;
  // The communicator's UniqueId bytes as the control plane holds them (an
  // arbiter outside the ranks groups their links by it); empty: none.
  std::vector<std::byte> unique_id;
  // Tests of the direct GPU path on the fake device, whose device memory is
  // host memory: when set, the transports accept device payloads; inproc
  // copies them with it, UCX takes them as host memory.
  transport::InprocFabric::DeviceCopy device_copy;
};

inline Outcomes run_ranks(int n, TransportKind kind, const RankSetup& setup,
                          const std::function<void(Communicator&)>& fn) {
  ::setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
  auto fabric = std::make_shared<transport::InprocFabric>(n, setup.device_copy);
  auto rendezvous = std::make_shared<InprocRendezvous>(n, setup.cfg.timeout);
  auto control = control::make_inproc_endpoints(n);  // element r is moved into rank r's communicator
  Outcomes outcomes(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      log::set_thread_rank(r);
      try {
        const Config cfg = setup.config_of ? setup.config_of(r) : setup.cfg;
        std::unique_ptr<transport::Transport> t;
        if (kind == TransportKind::inproc) {
          t = transport::make_inproc_transport(fabric, r, cfg);
        } else {
          InprocBootstrap boot(rendezvous, r);
          t = transport::make_ucx_transport(
              boot, cfg,
              transport::UcxOptions{.device_payloads_in_host_memory = static_cast<bool>(setup.device_copy)});
        }
        if (setup.wrap) t = setup.wrap(std::move(t), r);
        auto& ctl = control[static_cast<std::size_t>(r)];
        ctl.unique_id = setup.unique_id;
        Communicator comm = detail::make_communicator(std::move(t), 42, cfg, std::move(ctl), setup.nodes);
        fn(comm);
      } catch (...) {
        outcomes[static_cast<std::size_t>(r)] = std::current_exception();
      }
      log::set_thread_rank(-1);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

inline Outcomes run_ranks(int n, TransportKind kind, const std::function<void(Communicator&)>& fn,
                          const Config& cfg = test_config(), const TransportWrap& wrap = nullptr,
                          const transport::InprocFabric::DeviceCopy& device_copy = {}) {
  return run_ranks(n, kind, RankSetup{.cfg = cfg, .wrap = wrap, .device_copy = device_copy}, fn);
}

inline Config config_with(AllreduceAlgo algo) {
  Config cfg = test_config();
  cfg.allreduce_algo = algo;
  return cfg;
}

// Rethrows the first failure (for tests where every rank must succeed).
inline void expect_all_ok(const Outcomes& outcomes) {
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    if (!outcomes[r]) continue;
    try {
      std::rethrow_exception(outcomes[r]);
    } catch (const std::exception& e) {
      throw std::runtime_error("rank " + std::to_string(r) + " failed: " + e.what());
    }
  }
}

// The message of a rank's failure, or "" when it succeeded.
inline std::string failure_of(const Outcomes& outcomes, int rank) {
  if (!outcomes[static_cast<std::size_t>(rank)]) return {};
  try {
    std::rethrow_exception(outcomes[static_cast<std::size_t>(rank)]);
  } catch (const std::exception& e) {
    return e.what();
  }
}

template <class E>
bool failed_with(const Outcomes& outcomes, int rank) {
  if (!outcomes[static_cast<std::size_t>(rank)]) return false;
  try {
    std::rethrow_exception(outcomes[static_cast<std::size_t>(rank)]);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace antdt::test
