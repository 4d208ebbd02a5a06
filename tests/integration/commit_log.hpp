// What agent_trainer's logs (DIR/rank<r>.inc<i>.log) say was committed, read
// the same way by every driver that checks exactly-once with a bitmap of
// sample ids (agent_restart, agent_kill, coordinator_kill, the fault campaign).
//
// The trainer writes "lease <step> <ids...>" before it asks the coordinator to
// commit a batch and "commit <step> <ids...>" or "void <step> <n>" after the
// answer. A process killed in between leaves a lease with no outcome: in doubt.
// The coordinator decides such a commit, not the log: had it not been made
// durable, the lease would have gone back and another rank would have
// committed the samples. So a sample is committed once when it has one commit
// line, or none and an in-doubt lease while the coordinator reports the data
// complete (it exits 0 only then): the checks count a lease in doubt as the
// commit it may have been, never as a second one.
#pragma once

#include "agent_driver_common.hpp"  // read_lines

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace commit_log {

struct CommitLog {
  std::vector<int> commits;   // per sample id: commit lines
  std::vector<int> in_doubt;  // per sample id: leases of a process that ended before the answer
  std::uint64_t batches = 0;  // commit lines
  std::uint64_t voided = 0;   // samples of batches the coordinator had taken back (it restarted)
  std::uint64_t broken = 0;   // samples of steps whose allreduce raised PeerLostError ("lost <step> <n>")
  // Per file: the local batch of its last "plan" line when no lease or outcome
  // follows it (the process ended inside that step, perhaps after its
  // allreduce: those samples trained, never committed, served again).
  std::map<std::string, std::uint64_t> unleased_plan;
  std::vector<std::string> out_of_range;             // "file: id" of ids >= the dataset size
  std::map<std::string, std::vector<std::string>> files;  // every log, by file name

  // Per sample, over `epochs` epochs: committed exactly `epochs` times, an
  // in-doubt lease counting for the commit it may have been.
  bool exact(std::size_t id, int epochs = 1) const {
    return commits[id] <= epochs && commits[id] + in_doubt[id] >= epochs;
  }
  std::uint64_t duplicated(int epochs = 1) const {
    std::uint64_t n = 0;
    for (const int k : commits) n += k > epochs ? 1 : 0;
    return n;
  }
  std::uint64_t lost(int epochs = 1) const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < commits.size(); ++i) n += commits[i] + in_doubt[i] < epochs ? 1 : 0;
    return n;
  }
  // Samples of every in-doubt lease: trained once more when the lease had not
  // been committed after all (its step was applied, then served again).
  std::uint64_t in_doubt_samples() const {
    std::uint64_t n = 0;
    for (const int k : in_doubt) n += static_cast<std::uint64_t>(k);
    return n;
  }
  // Samples whose last commit only an in-doubt lease accounts for.
  std::uint64_t unlogged(int epochs = 1) const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < commits.size(); ++i) n += commits[i] < epochs && exact(i, epochs) ? 1 : 0;
    return n;
  }
  // The first sample not committed exactly `epochs` times, described; "" when none.
  std::string first_problem(int epochs = 1) const {
    for (std::size_t i = 0; i < commits.size(); ++i)
      if (!exact(i, epochs))
        return "sample " + std::to_string(i) + " committed " + std::to_string(commits[i]) + " times (" +
               std::to_string(in_doubt[i]) + " in doubt)";
    return "";
  }
  std::uint64_t wrong(int epochs = 1) const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < commits.size(); ++i) n += exact(i, epochs) ? 0 : 1;
    return n;
  }
};

inline CommitLog read(const std::string& dir, std::uint64_t dataset) {
  CommitLog s;
  s.commits.assign(dataset, 0);
  s.in_doubt.assign(dataset, 0);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".log") continue;
    const std::string name = entry.path().filename().string();
    auto& lines = s.files[name] = agent_test::read_lines(entry.path().string());
    std::vector<std::uint64_t> open_lease;  // the last lease without an outcome yet
    std::uint64_t plan_batch = 0;           // the last plan's local batch, until a lease or outcome
    for (const auto& line : lines) {
      std::istringstream in(line);
      std::string word;
      std::uint64_t step = 0, n = 0;
      in >> word >> step;
      if (word == "plan") {
        plan_batch = (in >> n) ? n : 0;
        continue;
      }
      if (word == "lease" || word == "commit" || word == "void" || word == "lost" || word == "drop" ||
          word == "skip" || word == "exit")
        plan_batch = 0;
      if (word == "lease" || word == "commit") {
        std::vector<std::uint64_t> ids;
        for (std::uint64_t id; in >> id;) {
          if (id < dataset) ids.push_back(id);
          else s.out_of_range.push_back(name + ": " + std::to_string(id));
        }
        if (word == "lease") {
          open_lease = std::move(ids);
          continue;
        }
        ++s.batches;
        for (const auto id : ids) ++s.commits[id];
        open_lease.clear();
      } else if (word == "void" && (in >> n)) {
        s.voided += n;
        open_lease.clear();
      } else if (word == "lost" && (in >> n)) {
        s.broken += n;
      }
    }
    for (const auto id : open_lease) ++s.in_doubt[id];
    s.unleased_plan[name] = plan_batch;
  }
  return s;
}

}  // namespace commit_log
