// printable(): a configuration value as it appears in an error message, for
// every parser of ANTDT_* variables (core/config.cpp, core/inject.cpp).
#pragma once

#include <string>
#include <string_view>

namespace antdt {

// `s` with control characters (below 0x20, and 0x7f) written as \xNN, so a
// stray byte cannot garble the terminal or the log; other bytes as they are.
std::string printable(std::string_view s);

}  // namespace antdt
