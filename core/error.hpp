// Internal helpers for raising antdt::Error subclasses with messages built
// from pieces. The error classes themselves are public (include/antdt/comm.hpp).
#pragma once

#include <antdt/comm.hpp>

#include <sstream>
#include <string>
#include <utility>

namespace antdt {

// Concatenates streamable pieces into one string: cat("rank ", 3, " failed").
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class E, class... Parts>
[[noreturn]] void raise(Parts&&... parts) {
  throw E(cat(std::forward<Parts>(parts)...));
}

// Throws the antdt::Error subclass that matches `status` (InternalError for ok
// and internal): how a status that crossed a wire or a thread is raised again.
[[noreturn]] void throw_status(Status status, const std::string& message);

// Precondition check for user input: throws InvalidArgument naming what is wrong.
#define ANTDT_CHECK_ARG(cond, ...)                             \
  do {                                                         \
    if (!(cond)) ::antdt::raise<::antdt::InvalidArgument>(__VA_ARGS__); \
  } while (0)

// Internal invariant: a failure is a bug in antdt.
#define ANTDT_ASSERT(cond)                                                                  \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::antdt::raise<::antdt::InternalError>("internal error: ", #cond, " at ", __FILE__, ":", __LINE__); \
  } while (0)

}  // namespace antdt
