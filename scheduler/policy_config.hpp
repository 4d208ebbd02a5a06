// Reading a policy's JSON configuration (ANTDT_POLICY_CONFIG) and the
// built-in policies' factories. Library-internal: nlohmann-json stays out of
// the public headers.
#pragma once

#include <antdt/scheduler.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace antdt::sched {

// The configuration text as a JSON object ("" or blanks: {}). ConfigError
// naming ANTDT_POLICY_CONFIG for a syntax error or a value that is not an object.
nlohmann::json parse_policy_config(std::string_view text);

// Typed access to one policy's keys; finish() rejects the keys nobody asked for.
class PolicyConfigReader {
 public:
  PolicyConfigReader(std::string_view policy, std::string_view text);

  // A finite number in [lo, hi].
  double number(std::string_view key, double fallback, double lo, double hi);
  // A non-negative integer in [lo, hi].
  std::uint64_t integer(std::string_view key, std::uint64_t fallback, std::uint64_t lo, std::uint64_t hi);
  bool boolean(std::string_view key, bool fallback);
  // ConfigError naming every unknown key and the accepted ones.
  void finish() const;
  // ConfigError naming the given key, its value and what was expected (for a
  // rule the typed readers above cannot state).
  [[noreturn]] void bad(std::string_view key, std::string_view expected) const;

 private:
  const nlohmann::json* find(std::string_view key);

  std::string policy_;
  nlohmann::json object_;
  std::vector<std::string> accepted_;
};

// The built-ins (scheduler/policy_bsp.cpp, policy_dd.cpp, policy_nd.cpp).
std::unique_ptr<Policy> make_bsp_policy(std::string_view config_json);
std::unique_ptr<Policy> make_dd_policy(std::string_view config_json);
std::unique_ptr<Policy> make_nd_policy(std::string_view config_json);

}  // namespace antdt::sched
