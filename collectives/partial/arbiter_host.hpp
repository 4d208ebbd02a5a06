// The partial collectives' arbiters of a job, hosted outside the ranks (by
// antdt-coordinator's service; docs/partial.md#where-the-arbiter-runs).
//
// Links that proved the job secret (collectives/partial/arbiter_link.hpp) are
// grouped by communicator. Once every rank of one is in, its ArbiterService
// starts on the links, as rank 0 would start it on its bootstrap connections;
// from then on a rank's death, rank 0's too, is one closed link among the
// others. A group that does not form within the timeout is given up: its
// links close, so the ranks that came fail their partial call instead of
// waiting forever.
//
// Not thread-safe: one thread (the coordinator's) calls it; each arbiter runs
// on its own thread.
#pragma once

#include "collectives/partial/arbiter.hpp"
#include "collectives/partial/arbiter_link.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace antdt::coll::partial {

class ArbiterHost {
 public:
  // `form_timeout`: how long a communicator's ranks may take to all connect;
  // `send_timeout`: the arbiters' bound on a send to a rank (ANTDT_TIMEOUT_MS).
  ArbiterHost(std::chrono::milliseconds form_timeout, std::chrono::milliseconds send_timeout);
  ~ArbiterHost();
  ArbiterHost(const ArbiterHost&) = delete;
  ArbiterHost& operator=(const ArbiterHost&) = delete;

  // Takes a link whose hello was verified, answers it (accepted, or refused
  // with the reason: a rank already connected, a size or settings that differ
  // from the first rank's) and starts the arbiter when the group is whole.
  void adopt(const ArbiterHello& hello, net::Fd fd);
  // Ends the arbiters whose ranks all left (with the Monitor's summary in the
  // log) and gives up groups past their timeout. Call it now and then.
  void tidy(std::chrono::steady_clock::time_point now);

  std::size_t forming() const noexcept { return forming_.size(); }
  std::size_t running() const noexcept { return running_.size(); }

 private:
  struct Forming {
    ArbiterHello first;                 // settings every later hello must repeat
    std::vector<net::Fd> links;         // index = rank
    std::vector<std::string> who;       // index = rank
    int joined = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  void start(Forming& group);

  std::chrono::milliseconds form_timeout_;
  std::chrono::milliseconds send_timeout_;
  std::map<GroupKey, Forming> forming_;
  std::vector<std::unique_ptr<ArbiterService>> running_;
};

}  // namespace antdt::coll::partial
