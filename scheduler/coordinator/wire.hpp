// The coordinator's wire format (docs/scheduler.md, "Agent and coordinator").
//
// Messages travel as control::Link frames over TCP. Each payload starts with
// an 8-byte prefix (magic "ADTC", version, kind); integers are little-endian
// (the hosts this runs on), doubles are IEEE-754 binary64. Every decoder checks
// lengths, kinds, enum values and counts, and throws BootstrapError naming the
// problem on garbage (tests/unit/test_coordinator_wire.cpp feeds it garbage).
//
// A connection starts with a challenge from the coordinator and a hello that
// proves the job secret: HMAC-SHA256(secret, "antdt-coordinator-v1" || nonce ||
// rank || world size || incarnation). The domain string keeps a proof made for
// the coordinator from being valid anywhere else (the bootstrap's MAC has none).
// After a welcome, the rank sends requests and reads one reply to each.
#pragma once

#include <antdt/comm.hpp>
#include <antdt/scheduler.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace antdt::sched::coord {

using Bytes = std::vector<std::byte>;

inline constexpr std::uint32_t kMagic = 0x43544441;  // "ADTC"
// 2: communicator failures, generation members; 3: abandoned generations;
// 4: a plan request may lease the step's samples too (PlanRequest::fetch_max, Plan::batch);
// 5: a request may carry the rank's step report (Kind::with_report, Envelope)
inline constexpr std::uint16_t kVersion = 5;
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kMaxTextBytes = 1024;
// Sample ids in one batch: the frame limit (16 MiB) over 8 bytes, with room for the head.
inline constexpr std::uint64_t kMaxBatchSamples = (std::uint64_t{16} << 20) / 8 - 64;

enum class Kind : std::uint16_t {
  challenge = 1,
  hello = 2,
  welcome = 3,
  plan_request = 10,
  plan = 11,
  report = 12,
  fetch = 13,
  batch = 14,
  commit = 15,
  give_back = 16,
  request_restart = 17,
  offer_id = 18,
  join_generation = 19,
  generation_id = 20,
  bye = 21,
  ack = 22,
  error = 23,
  comm_failed = 24,
  with_report = 25,
};

// --- handshake ---
struct Challenge {
  std::array<std::byte, kNonceBytes> nonce{};
};
struct Hello {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  std::uint32_t incarnation = 0;
  std::uint64_t generation = 0;  // the rank's communicator generation (a restarted coordinator adopts the highest)
  bool reconnect = false;        // this process said hello before: not a restarted rank
  std::array<std::byte, kMacBytes> mac{};
};
struct Welcome {
  bool accepted = false;
  std::string reason;            // why refused
  std::uint64_t generation = 0;  // the communicator generation the job is in (or moving to)
  std::uint64_t resume_step = 0; // a restarted rank's first step (0: start at step 1)
};

// --- requests (rank -> coordinator) ---
struct PlanRequest {
  std::uint64_t step = 0;
  // > 0: also lease up to min(the plan's local batch, fetch_max) samples, as a
  // Fetch right after the plan would (one round trip instead of two). No lease
  // for a plan that orders this rank to restart or stops the job.
  std::uint64_t fetch_max = 0;
};
struct Report {
  std::uint64_t step = 0;
  double compute_s = 0, wait_s = 0, transfer_s = 0;
  std::uint64_t samples = 0;
  Fate fate = Fate::none;
};
struct Fetch {
  std::uint64_t max_samples = 0;
};
struct Commit {
  std::uint64_t lease = 0;
};
struct GiveBack {
  std::uint64_t lease = 0;
};
struct RequestRestart {};
struct OfferId {
  std::uint64_t generation = 0;
  UniqueId id;
};
struct JoinGeneration {
  std::uint64_t generation = 0;
};
struct Bye {
  bool restarting = false;  // the rank exits to be restarted (its samples were given back)
};
// The rank's communicator of `generation` failed at `step` (a collective threw):
// `lost` are the ranks its transport knows are gone (PeerLostError). The job
// moves to a new generation at the next step nobody has planned yet.
struct CommFailed {
  std::uint64_t generation = 0;
  std::uint64_t step = 0;
  std::vector<std::uint32_t> lost;
};
using Request = std::variant<PlanRequest, Report, Fetch, Commit, GiveBack, RequestRestart, OfferId, JoinGeneration, Bye,
                             CommFailed>;
// What a rank sends: a request and, when it carries one, the step report the
// coordinator takes first (the Agent sends a step's report with its next
// request, usually the commit: one round trip per step fewer). One reply, the
// request's. Without a report it is the request's own frame; with one, a
// with_report frame: the report's fields, then the request's whole frame,
// which may not be a report or carry one itself.
struct Envelope {
  std::optional<Report> report;
  Request request;
};

// --- replies (coordinator -> rank) ---
struct BatchReply {
  std::uint8_t status = 1;       // sched::FetchStatus: 0 ok, 1 wait, 2 finished
  std::uint64_t lease = 0;
  std::uint32_t epoch = 0;
  std::vector<std::uint64_t> samples;
};
struct Plan {
  std::uint64_t step = 0;
  RankPlan plan;                 // restart: this rank exits before the step
  bool stop = false;             // the data is consumed: every rank leaves its loop at this step
  std::uint64_t generation = 0;  // communicator generation of this step
  std::optional<BatchReply> batch;  // what a PlanRequest with fetch_max leased (none: nothing was fetched)
};
struct GenerationId {
  bool ready = false;            // false: the generation's first member has not offered its id yet
  std::uint64_t generation = 0;
  UniqueId id;
  // The job ranks of the generation in communicator-rank order (the first one
  // offers the id); empty while the generation is not planned yet. Ranks lost
  // for good are not members: the communicator is smaller than the job.
  std::vector<std::uint32_t> members;
  // A member was lost before the generation formed (before it offered the
  // id, or while the others joined its bootstrap): it never forms; the
  // joiners report it and move on to the next one.
  bool abandoned = false;
};
struct Ack {
  bool ok = true;                // commit / give_back: the lease was open
};
struct ErrorReply {
  Status status = Status::internal;
  std::string message;
};

Bytes encode(const Challenge& m);
Bytes encode(const Hello& m);
Bytes encode(const Welcome& m);
Bytes encode(const Request& m);
Bytes encode(const Envelope& m);
Bytes encode(const Plan& m);
Bytes encode(const BatchReply& m);
Bytes encode(const GenerationId& m);
Bytes encode(const Ack& m);
Bytes encode(const ErrorReply& m);

// The kind of a message (after checking the prefix).
Kind peek_kind(std::span<const std::byte> bytes);
Challenge decode_challenge(std::span<const std::byte> bytes);
Hello decode_hello(std::span<const std::byte> bytes);
Welcome decode_welcome(std::span<const std::byte> bytes);
Request decode_request(std::span<const std::byte> bytes);
// A request frame or a with_report frame.
Envelope decode_envelope(std::span<const std::byte> bytes);
// Replies: an ErrorReply in their place is thrown as the antdt::Error of its status.
Plan decode_plan(std::span<const std::byte> bytes);
BatchReply decode_batch(std::span<const std::byte> bytes);
GenerationId decode_generation_id(std::span<const std::byte> bytes);
Ack decode_ack(std::span<const std::byte> bytes);
ErrorReply decode_error(std::span<const std::byte> bytes);

std::array<std::byte, kMacBytes> prove(std::span<const std::byte> secret, const Challenge& challenge,
                                       std::uint32_t rank, std::uint32_t world_size, std::uint32_t incarnation);
bool verify(std::span<const std::byte> secret, const Challenge& challenge, const Hello& hello);

}  // namespace antdt::sched::coord
