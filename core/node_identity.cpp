#include "core/node_identity.hpp"

#include "core/hash.hpp"

#include <climits>
#include <fstream>
#include <string>

#include <unistd.h>

namespace antdt {

std::uint64_t node_identity() {
  static const std::uint64_t id = [] {
    char host[HOST_NAME_MAX + 1] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    std::string boot_id;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
    return hash::mix_text(hash::mix_text(hash::kSeed, host), boot_id);
  }();
  return id;
}

std::uint64_t topology_node(std::string_view node_id) {
  return node_id.empty() ? node_identity() : hash::mix_text(hash::kSeed, node_id);
}

}  // namespace antdt
