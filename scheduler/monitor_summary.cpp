// antdt::monitor_summary: the Monitor over step times measured elsewhere, step
// by step as a communicator would have fed it (docs/monitor.md).
#include "collectives/telemetry/monitor.hpp"
#include "collectives/telemetry/step_timer.hpp"
#include "core/config.hpp"
#include "core/error.hpp"

#include <antdt/scheduler.hpp>

#include <algorithm>

namespace antdt {

std::string monitor_summary(std::span<const std::vector<StepTimes>> steps) {
  ANTDT_CHECK_ARG(!steps.empty(), "monitor_summary: no ranks");
  const int ranks = static_cast<int>(steps.size());
  telemetry::Monitor monitor(ranks, telemetry::MonitorConfig::from(Config::from_process_env()));
  std::size_t longest = 0;
  for (const auto& r : steps) longest = std::max(longest, r.size());
  std::vector<telemetry::StepRecord> records;
  records.reserve(steps.size());
  for (std::size_t s = 0; s < longest; ++s) {
    records.clear();
    for (int r = 0; r < ranks; ++r) {
      const auto& mine = steps[static_cast<std::size_t>(r)];
      if (s >= mine.size()) continue;
      telemetry::StepRecord rec;
      rec.rank = r;
      rec.step = s + 1;
      rec.compute_s = std::max(0.0, mine[s].compute_s);
      rec.transfer_s = std::max(0.0, mine[s].collective_s);
      rec.step_s = rec.compute_s + rec.transfer_s;
      rec.samples = mine[s].samples;
      records.push_back(rec);
    }
    monitor.record_step(records);
  }
  return monitor.summary_table();
}

}  // namespace antdt
