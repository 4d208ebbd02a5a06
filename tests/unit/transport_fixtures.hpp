// Transport tests: N ranks as threads of this process, each owning its own
// transport (inproc over one shared fabric, or UCX with worker addresses
// exchanged through an InprocRendezvous).
#pragma once

#include "core/bootstrap.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "transport/inproc/inproc_transport.hpp"
#include "transport/transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace antdt::transport_test {

using transport::Clock;
using transport::Completion;
using transport::Deadline;
using transport::Transport;
using transport::WaitResult;

// ucx_split: UCX with every non-empty payload sent as a split message (header
// half, then the payload as a contiguous message of its own;
// ANTDT_UCX_SPLIT_BYTES=1), so each transport test also covers that form at
// every size. Plain ucx splits from 64 KiB, the default.
enum class Kind { inproc, ucx, ucx_split };

inline std::string kind_name(Kind kind) {
  return kind == Kind::inproc ? "inproc" : kind == Kind::ucx ? "ucx" : "ucx_split";
}
// What Transport::name() says.
inline std::string transport_name(Kind kind) { return kind == Kind::inproc ? "inproc" : "ucx"; }

// UCX: shared memory and TCP only (no probing of devices this machine lacks);
// an explicit UCX_TLS in the environment wins.
inline void prepare_ucx_environment() {
  ::setenv("UCX_TLS", "self,sm,tcp", 0);
  ::setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
}

inline Config transport_config(ProgressMode mode = ProgressMode::automatic) {
  Config cfg;
  cfg.timeout = std::chrono::seconds(30);
  cfg.progress = mode;
  return cfg;
}

// The bound on every wait in these tests: generous, so only a hang trips it.
inline constexpr auto kTestWait = std::chrono::seconds(30);

// A reusable barrier for the rank threads that gives up (throws) instead of
// hanging when a rank never arrives.
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int parties) : parties_(parties) {}
  void arrive_and_wait(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::unique_lock lock(mu_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, timeout, [&] { return generation_ != generation; })) {
      throw std::runtime_error("test barrier: a rank did not arrive within the timeout");
    }
  }

 private:
  int parties_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

// Per-rank outcome: null when the rank's body returned normally.
using Outcomes = std::vector<std::exception_ptr>;

// When ranks close their transports.
enum class Close {
  together,    // after every rank's body has returned (a closed peer fails operations still waiting for it)
  when_done,   // each as soon as its own body returns
};

// Runs body(transport) on `n` threads, rank r on thread r. Each thread makes
// and destroys its own transport, as ranks as threads do in the library.
// `device_copy`: when set, the transports accept device payloads (inproc
// copies them with it; UCX takes them as host memory). `ucx_options`: the
// UCX transports' test options (holding split payloads, dropping aborts).
inline Outcomes run_group(Kind kind, int n, const std::function<void(Transport&)>& body,
                          const Config& config = transport_config(), Close close = Close::together,
                          const transport::InprocFabric::DeviceCopy& device_copy = {},
                          const transport::UcxOptions& ucx_options = {}) {
  if (kind != Kind::inproc) prepare_ucx_environment();
  Config cfg = config;
  if (kind == Kind::ucx_split) cfg.ucx_split_bytes = 1;
  auto fabric = std::make_shared<transport::InprocFabric>(n, device_copy);
  auto rendezvous = std::make_shared<InprocRendezvous>(n, std::chrono::milliseconds(kTestWait));
  ThreadBarrier all_done(n);
  Outcomes outcomes(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      log::set_thread_rank(r);
      try {
        std::unique_ptr<Transport> t;
        if (kind == Kind::inproc) {
          t = transport::make_inproc_transport(fabric, r, cfg);
        } else {
          InprocBootstrap boot(rendezvous, r);
          transport::UcxOptions options = ucx_options;
          options.device_payloads_in_host_memory = static_cast<bool>(device_copy);
          t = transport::make_ucx_transport(boot, cfg, options);
        }
        try {
          body(*t);
        } catch (...) {
          outcomes[static_cast<std::size_t>(r)] = std::current_exception();
        }
        if (close == Close::together) all_done.arrive_and_wait();
      } catch (...) {
        if (!outcomes[static_cast<std::size_t>(r)]) outcomes[static_cast<std::size_t>(r)] = std::current_exception();
      }
      log::set_thread_rank(-1);
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

// "" when every rank succeeded, else "rank R: what" for each failed rank.
inline std::string failures(const Outcomes& outcomes) {
  std::string text;
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    if (!outcomes[r]) continue;
    try {
      std::rethrow_exception(outcomes[r]);
    } catch (const std::exception& e) {
      text += "rank " + std::to_string(r) + ": " + e.what() + "\n";
    } catch (...) {
      text += "rank " + std::to_string(r) + ": unknown exception\n";
    }
  }
  return text;
}

// Waits for the listed operations with the test bound.
inline WaitResult wait_for(Transport& t, std::initializer_list<Completion*> ops,
                           Clock::duration bound = kTestWait) {
  return t.wait(std::span<Completion* const>(ops.begin(), ops.size()), Clock::now() + bound);
}

// Deterministic bytes that differ per (seed, position), so misplaced or
// misrouted data shows.
inline std::vector<std::byte> pattern(std::size_t bytes, std::uint64_t seed) {
  std::vector<std::byte> out(bytes);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x & 0xff);
  }
  return out;
}

inline transport::MessageHeader header_for(std::uint64_t seq, std::size_t payload_bytes) {
  transport::MessageHeader h;
  h.comm_id = 7;
  h.seq = seq;
  h.signature = 0xABCDEF0123456789ull ^ seq;
  h.payload_bytes = payload_bytes;
  return h;
}

}  // namespace antdt::transport_test
