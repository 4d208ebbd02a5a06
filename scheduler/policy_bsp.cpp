// "bsp": measure only. Equal local batches, every step waits for every rank,
// and the plans never change (docs/scheduler.md).
#include "scheduler/policy_config.hpp"

namespace antdt::sched {
namespace {

class BspPolicy final : public Policy {
 public:
  std::string_view name() const noexcept override { return "bsp"; }
  std::optional<std::vector<RankPlan>> decide(const PolicyContext&, const MonitorView&) override {
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<Policy> make_bsp_policy(std::string_view config_json) {
  PolicyConfigReader reader("bsp", config_json);
  reader.finish();
  return std::make_unique<BspPolicy>();
}

}  // namespace antdt::sched
