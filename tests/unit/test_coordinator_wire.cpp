// The coordinator's wire format (scheduler/coordinator/wire): every message
// survives a round trip field for field; truncated, padded, mis-kinded,
// mis-versioned and out-of-range messages are rejected with BootstrapError; an
// error reply is thrown as the error of its status; the hello's MAC binds the
// secret, nonce, rank, world size and incarnation.
#include "scheduler/coordinator/wire.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace antdt::sched::coord {
namespace {

std::array<std::byte, 16> secret_of(std::uint8_t seed) {
  std::array<std::byte, 16> s{};
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::byte>(seed + i * 7);
  return s;
}

UniqueId id_of(std::uint8_t seed) {
  UniqueId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::byte>(seed ^ i);
  return id;
}

TEST(CoordinatorWire, HandshakeRoundTrip) {
  Challenge c;
  for (std::size_t i = 0; i < c.nonce.size(); ++i) c.nonce[i] = static_cast<std::byte>(100 + i);
  EXPECT_EQ(decode_challenge(encode(c)).nonce, c.nonce);

  Hello h{7, 9, 3, 12345, true, {}};
  h.mac = prove(secret_of(1), c, 7, 9, 3);
  const Hello back = decode_hello(encode(h));
  EXPECT_EQ(back.rank, 7u);
  EXPECT_EQ(back.world_size, 9u);
  EXPECT_EQ(back.incarnation, 3u);
  EXPECT_EQ(back.generation, 12345u);
  EXPECT_TRUE(back.reconnect);
  EXPECT_EQ(back.mac, h.mac);

  const Welcome w{true, "", 4, 17};
  const Welcome wb = decode_welcome(encode(w));
  EXPECT_TRUE(wb.accepted);
  EXPECT_EQ(wb.generation, 4u);
  EXPECT_EQ(wb.resume_step, 17u);
  const Welcome refused = decode_welcome(encode(Welcome{false, "rank 3 is already connected", 0, 0}));
  EXPECT_FALSE(refused.accepted);
  EXPECT_EQ(refused.reason, "rank 3 is already connected");
}

TEST(CoordinatorWire, MacBindsEveryField) {
  Challenge c;
  c.nonce.fill(std::byte{5});
  Hello h{2, 4, 1, 0, false, {}};
  h.mac = prove(secret_of(1), c, 2, 4, 1);
  EXPECT_TRUE(verify(secret_of(1), c, h));
  EXPECT_FALSE(verify(secret_of(2), c, h));  // another secret
  for (int field = 0; field < 3; ++field) {
    Hello changed = h;
    if (field == 0) changed.rank = 3;
    if (field == 1) changed.world_size = 5;
    if (field == 2) changed.incarnation = 2;
    EXPECT_FALSE(verify(secret_of(1), c, changed)) << "field " << field;
  }
  Challenge other = c;
  other.nonce[0] = std::byte{6};
  EXPECT_FALSE(verify(secret_of(1), other, h));
}

TEST(CoordinatorWire, RequestsRoundTrip) {
  const std::vector<Request> requests = {
      PlanRequest{42},
      PlanRequest{43, 512},
      Report{9, 0.25, 0.5, 0.125, 64, Fate::dropped},
      Fetch{128},
      Commit{77},
      GiveBack{78},
      RequestRestart{},
      OfferId{3, id_of(9)},
      JoinGeneration{3},
      Bye{true},
  };
  for (const auto& request : requests) {
    const Request back = decode_request(encode(request));
    ASSERT_EQ(back.index(), request.index());
    EXPECT_EQ(encode(back), encode(request)) << "request kind index " << request.index();
  }
  EXPECT_EQ(std::get<PlanRequest>(decode_request(encode(requests[1]))).fetch_max, 512u);
  const auto report = std::get<Report>(decode_request(encode(requests[2])));
  EXPECT_EQ(report.step, 9u);
  EXPECT_DOUBLE_EQ(report.compute_s, 0.25);
  EXPECT_DOUBLE_EQ(report.wait_s, 0.5);
  EXPECT_DOUBLE_EQ(report.transfer_s, 0.125);
  EXPECT_EQ(report.samples, 64u);
  EXPECT_EQ(report.fate, Fate::dropped);
  const auto offer = std::get<OfferId>(decode_request(encode(requests[7])));
  EXPECT_EQ(offer.id.bytes, id_of(9).bytes);
}

TEST(CoordinatorWire, RepliesRoundTrip) {
  Plan p;
  p.step = 5;
  p.plan.local_batch = 30;
  p.plan.micro_batches = 3;
  p.plan.micro_batch = 10;
  p.plan.late = LatePolicy::defer;
  p.plan.staleness = 2;
  p.plan.restart = true;
  p.plan.resplit = false;
  p.stop = true;
  p.generation = 8;
  const Plan pb = decode_plan(encode(p));
  EXPECT_EQ(pb.step, 5u);
  EXPECT_EQ(pb.plan, p.plan);
  EXPECT_TRUE(pb.stop);
  EXPECT_EQ(pb.generation, 8u);
  EXPECT_FALSE(pb.batch.has_value());
  // A plan that carries the step's batch (PlanRequest::fetch_max).
  p.batch = BatchReply{0, 12, 3, {7, 5, 3}};
  const Plan with = decode_plan(encode(p));
  ASSERT_TRUE(with.batch.has_value());
  EXPECT_EQ(with.batch->lease, 12u);
  EXPECT_EQ(with.batch->epoch, 3u);
  EXPECT_EQ(with.batch->samples, (std::vector<std::uint64_t>{7, 5, 3}));
  EXPECT_EQ(with.generation, 8u);
  // Its batch is checked as a batch reply's: samples with a "wait" status, or a
  // count that disagrees with the bytes, are garbage.
  p.batch = BatchReply{1, 0, 3, {7}};
  EXPECT_THROW(decode_plan(encode(p)), BootstrapError);
  p.batch = BatchReply{0, 12, 3, {7, 5}};
  Bytes cut = encode(p);
  cut.resize(cut.size() - 8);
  EXPECT_THROW(decode_plan(cut), BootstrapError);
  p.batch.reset();

  BatchReply b{0, 11, 2, {4, 8, 15, 16, 23, 42}};
  const BatchReply bb = decode_batch(encode(b));
  EXPECT_EQ(bb.status, 0);
  EXPECT_EQ(bb.lease, 11u);
  EXPECT_EQ(bb.epoch, 2u);
  EXPECT_EQ(bb.samples, b.samples);
  const BatchReply empty = decode_batch(encode(BatchReply{2, 0, 1, {}}));
  EXPECT_EQ(empty.status, 2);
  EXPECT_TRUE(empty.samples.empty());

  const GenerationId g = decode_generation_id(encode(GenerationId{true, 6, id_of(3), {0, 1, 3}}));
  EXPECT_TRUE(g.ready);
  EXPECT_EQ(g.generation, 6u);
  EXPECT_EQ(g.id.bytes, id_of(3).bytes);
  EXPECT_EQ(g.members, (std::vector<std::uint32_t>{0, 1, 3}));
  EXPECT_FALSE(g.abandoned);
  const GenerationId a = decode_generation_id(encode(GenerationId{false, 7, {}, {2, 3}, true}));
  EXPECT_FALSE(a.ready);
  EXPECT_TRUE(a.abandoned);
  EXPECT_EQ(a.members, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_FALSE(decode_ack(encode(Ack{false})).ok);
  EXPECT_TRUE(decode_ack(encode(Ack{true})).ok);
}

TEST(CoordinatorWire, ErrorReplyIsThrownAsItsStatus) {
  const Bytes reply = encode(ErrorReply{Status::invalid_argument, "only rank 0 offers a generation's id"});
  try {
    decode_plan(reply);
    FAIL() << "an error reply decoded as a plan";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("only rank 0 offers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_ack(encode(ErrorReply{Status::timeout, "slow"})), TimeoutError);
}

// A request with the rank's step report in front (Envelope, wire version 5):
// both come back field for field; without a report it is the request's own
// frame; a frame carries one report at most; truncations are refused.
TEST(CoordinatorWire, ARequestCarriesTheStepReportInFront) {
  const Report report{12, 0.25, 0.5, 0.125, 48, Fate::deferred};
  const Envelope sent{report, Request{Commit{77}}};
  const Bytes bytes = encode(sent);
  EXPECT_EQ(peek_kind(bytes), Kind::with_report);
  const Envelope back = decode_envelope(bytes);
  ASSERT_TRUE(back.report.has_value());
  EXPECT_EQ(back.report->step, 12u);
  EXPECT_EQ(back.report->compute_s, 0.25);
  EXPECT_EQ(back.report->wait_s, 0.5);
  EXPECT_EQ(back.report->transfer_s, 0.125);
  EXPECT_EQ(back.report->samples, 48u);
  EXPECT_EQ(back.report->fate, Fate::deferred);
  ASSERT_TRUE(std::holds_alternative<Commit>(back.request));
  EXPECT_EQ(std::get<Commit>(back.request).lease, 77u);
  // Any request may carry it; the inner one keeps its fields.
  const Envelope plan = decode_envelope(encode(Envelope{report, Request{PlanRequest{13, 256}}}));
  EXPECT_EQ(std::get<PlanRequest>(plan.request).fetch_max, 256u);
  EXPECT_TRUE(std::holds_alternative<Bye>(decode_envelope(encode(Envelope{report, Request{Bye{true}}})).request));

  // Without a report: the request's own frame, read back by both decoders.
  const Bytes plain = encode(Envelope{std::nullopt, Request{Commit{5}}});
  EXPECT_EQ(plain, encode(Request{Commit{5}}));
  EXPECT_FALSE(decode_envelope(plain).report.has_value());
  // A with_report frame is not a plain request.
  EXPECT_THROW(decode_request(bytes), BootstrapError);

  // One report per frame: not a report inside, not a second envelope inside.
  EXPECT_THROW(encode(Envelope{report, Request{report}}), InvalidArgument);
  Bytes nested_report = Bytes(bytes.begin(), bytes.begin() + 8 + 41);
  const Bytes inner_report = encode(Request{report});
  nested_report.insert(nested_report.end(), inner_report.begin(), inner_report.end());
  EXPECT_THROW(decode_envelope(nested_report), BootstrapError);
  Bytes nested_envelope = Bytes(bytes.begin(), bytes.begin() + 8 + 41);
  nested_envelope.insert(nested_envelope.end(), bytes.begin(), bytes.end());
  EXPECT_THROW(decode_envelope(nested_envelope), BootstrapError);
  // Every truncation, and one byte too many.
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode_envelope(std::span(bytes).first(n)), BootstrapError) << n << " bytes";
  Bytes padded = bytes;
  padded.push_back(std::byte{0});
  EXPECT_THROW(decode_envelope(padded), BootstrapError);
}

TEST(CoordinatorWire, GarbageIsRejected) {
  const Bytes good = encode(Request{Report{9, 0.25, 0.5, 0.125, 64, Fate::included}});
  // Every truncation, and one byte too many.
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(decode_request(std::span(good).first(n)), BootstrapError) << n << " bytes";
  Bytes padded = good;
  padded.push_back(std::byte{0});
  EXPECT_THROW(decode_request(padded), BootstrapError);

  auto with = [&](std::size_t offset, std::byte value) {
    Bytes b = good;
    b[offset] = value;
    return b;
  };
  EXPECT_THROW(decode_request(with(0, std::byte{0})), BootstrapError);   // magic
  EXPECT_THROW(decode_request(with(4, std::byte{9})), BootstrapError);   // version
  EXPECT_THROW(decode_request(with(6, std::byte{99})), BootstrapError);  // unknown kind
  EXPECT_THROW(decode_request(with(good.size() - 1, std::byte{7})), BootstrapError);  // fate 7
  // A negative time (sign bit of compute_s, the last byte of the double).
  EXPECT_THROW(decode_request(with(8 + 8 + 7, std::byte{0xbf})), BootstrapError);
  // A reply kind where a request is expected, and the other way round.
  EXPECT_THROW(decode_request(encode(Ack{true})), BootstrapError);
  EXPECT_THROW(decode_plan(encode(Request{PlanRequest{1}})), BootstrapError);
  // Step 0 does not exist; a fetch beyond the frame limit; a flag byte of 2.
  EXPECT_THROW(decode_request(encode(Request{PlanRequest{0}})), BootstrapError);
  EXPECT_THROW(decode_request(encode(Request{Fetch{kMaxBatchSamples + 1}})), BootstrapError);
  Bytes bye = encode(Request{Bye{true}});
  bye.back() = std::byte{2};
  EXPECT_THROW(decode_request(bye), BootstrapError);

  // A batch whose count disagrees with its length, or samples with a non-ok status.
  Bytes batch = encode(BatchReply{0, 1, 0, {1, 2, 3}});
  batch.erase(batch.end() - 8, batch.end());  // not resize(size - 8): gcc -O1 -fsanitize=address then warns of a huge memset
  EXPECT_THROW(decode_batch(batch), BootstrapError);
  Bytes waiting = encode(BatchReply{0, 1, 0, {1}});
  waiting[8] = std::byte{1};  // status wait with one sample
  EXPECT_THROW(decode_batch(waiting), BootstrapError);
  // A plan with 0 micro-batches, or a late policy out of range.
  Plan p;
  p.plan.micro_batches = 0;
  EXPECT_THROW(decode_plan(encode(p)), BootstrapError);
  p.plan.micro_batches = 1;
  Bytes plan = encode(p);
  plan[8 + 8 + 8 + 4 + 8] = std::byte{3};
  EXPECT_THROW(decode_plan(plan), BootstrapError);
  // Text longer than allowed in an error reply.
  Bytes error = encode(ErrorReply{Status::internal, "x"});
  const std::uint32_t huge = kMaxTextBytes + 1;
  std::memcpy(error.data() + 12, &huge, 4);
  EXPECT_THROW(decode_error(error), BootstrapError);

  // Random bytes never crash a decoder: they are rejected, or decode to something well-formed.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    Bytes junk(rng() % 64);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    if (junk.size() >= 8 && i % 2 == 0) {  // a valid prefix half the time, to reach the field checks
      std::memcpy(junk.data(), &kMagic, 4);
      std::memcpy(junk.data() + 4, &kVersion, 2);
    }
    try {
      (void)decode_request(junk);
    } catch (const BootstrapError&) {
    }
    try {
      (void)decode_envelope(junk);
    } catch (const BootstrapError&) {
    }
  }
}

}  // namespace
}  // namespace antdt::sched::coord
