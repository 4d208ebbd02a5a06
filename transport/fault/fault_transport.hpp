// The fault-injecting transport: a decorator over any Transport that delays
// this rank's sends and caps its send bandwidth, on a plan taken from
// ANTDT_INJECT (Injector) or given by test code. This is how tests, the
// perf tools and the demo make slow links on demand (kernel netem is not
// available on these machines).
//
// How a send is delayed: post_send does not reach the inner transport at once.
// The send waits in a first-in first-out queue with a release time
//   release = max(post time + delay, previous release)             (no cap)
//   release = link free time after the payload's serialisation + delay (cap)
// and is posted to the inner transport by the first wait() or progress() on
// this transport at or after that time. A blocking wait sleeps in the inner
// transport in slices that end at the next release time, so it wakes to post
// the send and never spins. Release times never decrease, so the queue keeps
// the order of posting: messages still arrive intact and in order, as the
// Transport contract says. The caller's thread is not blocked by a delay; only
// a thread that drives no progress at all (never waits) holds its sends back
// until it next does.
//
// Not injected, on purpose: message drops (the ordered, reliable delivery that
// collectives rely on would break; a lost message is a peer failure, and aborts
// and closed peers already test that) and peer death (a rank that dies is a
// process that exits, which the integration tests do for real).
//
// Everything else (receives, aborts, cancel of sends already handed on) goes
// straight to the inner transport.
#pragma once

#include "core/inject.hpp"
#include "transport/transport.hpp"

#include <chrono>
#include <memory>

namespace antdt::transport {

// What the decorator does to the messages this rank sends.
struct FaultPlan {
  std::chrono::microseconds send_delay{0};  // added to every send, from the first message on
  double send_bytes_per_second = 0;         // cap on this rank's send bandwidth (payloads); 0: no cap

  bool injects_anything() const noexcept { return send_delay.count() > 0 || send_bytes_per_second > 0; }
};

// The transport effects ANTDT_INJECT gives the injector's rank (delay_us, bw_mbps).
FaultPlan fault_plan_from(const Injector& injector);

// Whether ANTDT_INJECT asks for transport effects on the injector's rank, that
// is, whether communicator creation should wrap its transport.
bool has_transport_faults(const Injector& injector) noexcept;

// Wraps `inner` (any transport; null is an InvalidArgument). With a plan that
// injects nothing every call is forwarded unchanged.
std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, const FaultPlan& plan);
// The same with the plan ANTDT_INJECT gives this rank (fault_plan_from).
std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, const Injector& injector);

}  // namespace antdt::transport
