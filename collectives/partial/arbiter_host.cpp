#include "collectives/partial/arbiter_host.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace antdt::coll::partial {
namespace {

// The settings every rank of one communicator must give its arbiter alike.
bool same_settings(const ArbiterHello& a, const ArbiterHello& b) {
  return a.size == b.size && a.result_cache == b.result_cache && a.quorum == b.quorum && a.grace_s == b.grace_s &&
         a.warmup_steps == b.warmup_steps && a.monitor_window == b.monitor_window &&
         a.monitor_alpha == b.monitor_alpha && a.monitor_theta == b.monitor_theta &&
         a.monitor_short_steps == b.monitor_short_steps && a.monitor_grace_margin == b.monitor_grace_margin;
}

// The answer is a few dozen bytes into a fresh connection's empty socket
// buffer: it never waits. A rank that is gone already shows up as a closed link.
void answer(net::Fd& fd, const ArbiterAnswer& a, std::chrono::milliseconds timeout) {
  control::Link link(std::move(fd));
  try {
    link.send(encode(a), net::Clock::now() + timeout);
  } catch (const Error& e) {
    ANTDT_WARN("arbiter host: cannot answer a rank: ", e.what());
  }
  fd = link.release();
}

}  // namespace

ArbiterHost::ArbiterHost(std::chrono::milliseconds form_timeout, std::chrono::milliseconds send_timeout)
    : form_timeout_(form_timeout), send_timeout_(send_timeout) {}

ArbiterHost::~ArbiterHost() = default;

void ArbiterHost::adopt(const ArbiterHello& hello, net::Fd fd) {
  auto [it, fresh] = forming_.try_emplace(hello.key);
  Forming& group = it->second;
  if (fresh) {
    group.first = hello;
    group.links.resize(hello.size);
    group.who.resize(hello.size);
    group.deadline = std::chrono::steady_clock::now() + form_timeout_;
  }
  std::string refusal;
  if (!same_settings(group.first, hello))
    refusal = cat("rank ", hello.rank, " (", hello.who, ") gives its communicator ", hello.size,
                  " ranks or arbiter settings (ANTDT_PARTIAL_*, ANTDT_RESULT_CACHE, ANTDT_MONITOR_*) that differ from "
                  "rank ", group.first.rank, "'s");
  else if (group.links[hello.rank])
    refusal = cat("rank ", hello.rank, " of this communicator is connected already (", group.who[hello.rank], ")");
  if (!refusal.empty()) {
    ANTDT_WARN("arbiter host: refused a link: ", refusal);
    answer(fd, {false, refusal}, send_timeout_);
    return;
  }
  answer(fd, {true, {}}, send_timeout_);
  group.links[hello.rank] = std::move(fd);
  group.who[hello.rank] = hello.who;
  if (++group.joined < static_cast<int>(hello.size)) return;
  try {
    start(group);
  } catch (const Error& e) {
    // Its links close with the group: every rank's call fails naming the arbiter.
    ANTDT_WARN("arbiter host: the arbiter of a communicator of ", hello.size, " ranks could not start: ", e.what());
  }
  forming_.erase(it);
}

void ArbiterHost::start(Forming& group) {
  ArbiterConfig cfg = group.first.config();
  cfg.thread_rank = -1;
  cfg.describe_rank = [who = group.who](int r) { return cat("rank ", r, " (", who[static_cast<std::size_t>(r)], ")"); };
  ANTDT_INFO("arbiter host: all ", cfg.ranks, " ranks of a communicator connected; its arbiter starts");
  running_.push_back(std::make_unique<ArbiterService>(std::move(group.links), cfg, send_timeout_));
}

void ArbiterHost::tidy(std::chrono::steady_clock::time_point now) {
  std::erase_if(running_, [](const std::unique_ptr<ArbiterService>& s) {
    if (!s->ended()) return false;
    // The Monitor's table, where the arbiter ran, as ~PartialState writes it in rank 0.
    if (s->any_straggler())
      ANTDT_WARN(s->summary());
    else
      ANTDT_INFO(s->summary());
    return true;
  });
  std::erase_if(forming_, [&](const auto& entry) {
    const Forming& group = entry.second;
    if (now < group.deadline) return false;
    ANTDT_WARN("arbiter host: only ", group.joined, " of the ", group.first.size, " ranks of a communicator connected "
               "to its arbiter within ", form_timeout_.count(), " ms (ANTDT_TIMEOUT_MS); their links close");
    return true;
  });
}

}  // namespace antdt::coll::partial
