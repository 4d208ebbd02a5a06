#include "scheduler/coordinator/client.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <thread>
#include <utility>

namespace antdt::sched::coord {

using Clock = std::chrono::steady_clock;

CoordinatorClient::CoordinatorClient(const net::Endpoint& address, std::span<const std::byte> secret, int rank,
                                     int world_size, std::uint32_t incarnation, std::uint64_t generation,
                                     std::chrono::milliseconds timeout)
    : address_(address), secret_(secret.begin(), secret.end()), rank_(rank), world_size_(world_size),
      incarnation_(incarnation), generation_(generation), timeout_(timeout) {
  ANTDT_CHECK_ARG(rank >= 0 && rank < world_size, "coordinator client: rank ", rank, " out of range [0, ", world_size,
                  ")");
  // A coordinator killed during this first handshake (and started again on the
  // same address) closes the link half-way: that is a broken connection, not a
  // refusal, so try again until the deadline as call() does after a loss.
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    try {
      connect(deadline, false);
      return;
    } catch (const Error& e) {
      if (e.status() != Status::transport || Clock::now() >= deadline) throw;
      ANTDT_WARN("rank ", rank_, ": the coordinator connection broke during the handshake (", e.what(),
                 "); connecting again");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

CoordinatorClient::~CoordinatorClient() = default;

void CoordinatorClient::connect(Clock::time_point deadline, bool reconnect) {
  link_ = control::Link(net::connect_to(address_, deadline));
  auto frame = link_.receive(deadline);
  if (!frame)
    raise<TimeoutError>("coordinator at ", address_.to_string(), " sent no challenge within ANTDT_TIMEOUT_MS");
  const Challenge challenge = decode_challenge(*frame);
  Hello hello{static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(world_size_), incarnation_, generation_,
              reconnect, {}};
  hello.mac = prove(secret_, challenge, hello.rank, hello.world_size, hello.incarnation);
  // The coordinator may close the connection before the hello (restarted, or
  // it dropped the oldest of a flood of unauthenticated connections): a broken
  // link (TransportError), which the caller retries; not a refusal.
  link_.send(encode(hello), deadline);
  frame = link_.receive(deadline);
  if (!frame) raise<TimeoutError>("coordinator at ", address_.to_string(), " did not answer the hello of rank ", rank_);
  welcome_ = decode_welcome(*frame);
  if (!welcome_.accepted) {
    link_ = control::Link();
    raise<BootstrapError>("the coordinator at ", address_.to_string(), " refused rank ", rank_, ": ", welcome_.reason);
  }
}

Bytes CoordinatorClient::encode_with_kept_report(const Request& request) {
  return encode(Envelope{std::exchange(pending_report_, std::nullopt), request});
}

Bytes CoordinatorClient::call(const Request& request) {
  ANTDT_CHECK_ARG(static_cast<bool>(link_), "coordinator client: the session of rank ", rank_, " is closed (bye)");
  // A kept report goes with this request, and is sent again with it after a reconnection.
  const Bytes payload = encode_with_kept_report(request);
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    try {
      link_.send(payload, deadline);
      auto reply = link_.receive(deadline);
      if (!reply)
        raise<TimeoutError>("coordinator at ", address_.to_string(), " did not answer rank ", rank_,
                            " within ANTDT_TIMEOUT_MS=", timeout_.count(), " ms");
      return std::move(*reply);
    } catch (const TimeoutError&) {
      throw;
    } catch (const Error& e) {
      if (e.status() != Status::transport && e.status() != Status::bootstrap) throw;
      if (Clock::now() >= deadline) throw;
      // The connection broke: the coordinator may have been restarted. Try again until the deadline.
      ANTDT_WARN("rank ", rank_, ": lost the coordinator connection (", e.what(), "); reconnecting");
      for (;;) {
        try {
          connect(deadline, true);
          ++reconnections_;
          break;
        } catch (const Error& again) {
          // Refused too: a coordinator that has not noticed the old connection's
          // end yet says "already connected"; one still starting refuses the connection.
          if (again.status() == Status::timeout || Clock::now() >= deadline) throw;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    }
  }
}

Plan CoordinatorClient::plan(std::uint64_t step, std::uint64_t fetch_max) {
  return decode_plan(call(PlanRequest{step, fetch_max}));
}

void CoordinatorClient::report(const Report& report) {
  // A kept report goes first, alone: a frame carries one report at most.
  if (pending_report_) decode_ack(call(Request{*std::exchange(pending_report_, std::nullopt)}));
  if (report_with_next_)
    pending_report_ = report;
  else
    decode_ack(call(report));
}

BatchReply CoordinatorClient::fetch(std::uint64_t max_samples) { return decode_batch(call(Fetch{max_samples})); }

bool CoordinatorClient::commit(std::uint64_t lease) { return decode_ack(call(Commit{lease})).ok; }

bool CoordinatorClient::give_back(std::uint64_t lease) { return decode_ack(call(GiveBack{lease})).ok; }

void CoordinatorClient::request_restart() { decode_ack(call(RequestRestart{})); }

void CoordinatorClient::offer_id(std::uint64_t generation, const UniqueId& id) {
  decode_ack(call(OfferId{generation, id}));
}

GenerationId CoordinatorClient::join(std::uint64_t generation) {
  return decode_generation_id(call(JoinGeneration{generation}));
}

void CoordinatorClient::comm_failed(std::uint64_t generation, std::uint64_t step, std::vector<std::uint32_t> lost) {
  decode_ack(call(CommFailed{generation, step, std::move(lost)}));
}

void CoordinatorClient::bye(bool restarting) {
  if (!link_) return;
  try {
    const auto deadline = Clock::now() + timeout_;
    link_.send(encode_with_kept_report(Request{Bye{restarting}}), deadline);
    if (auto reply = link_.receive(deadline)) decode_ack(*reply);
  } catch (const Error& e) {
    ANTDT_WARN("rank ", rank_, ": bye to the coordinator failed: ", e.what());
  }
  link_ = control::Link();
}

}  // namespace antdt::sched::coord
