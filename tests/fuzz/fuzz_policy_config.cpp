// ANTDT_POLICY_CONFIG (core/config reads and bounds it, scheduler/policy_*
// interpret it): JSON from the environment. The text goes through the whole
// configuration path (Config::from_env) and, when accepted, to every built-in
// policy's factory, which reads its keys and refuses the unknown ones.
#include "core/config.hpp"
#include "scheduler/policy_config.hpp"
#include "tests/fuzz/fuzz_target.hpp"

#include <optional>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  const std::string value(fuzz::as_text(data, size));
  if (!value.empty() && value.front() == '@') return 0;  // a path: not the bytes under test
  fuzz::refuse_cleanly([&] {
    const Config cfg = Config::from_env([&](std::string_view name) -> std::optional<std::string> {
      if (name == "ANTDT_POLICY_CONFIG") return value;
      return std::nullopt;
    });
    fuzz::refuse_cleanly([&] { (void)sched::make_bsp_policy(cfg.policy_config); });
    fuzz::refuse_cleanly([&] { (void)sched::make_dd_policy(cfg.policy_config); });
    fuzz::refuse_cleanly([&] { (void)sched::make_nd_policy(cfg.policy_config); });
  });
  return 0;
}
