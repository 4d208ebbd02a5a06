// Uses the installed C++ API: version, status strings, and antdt::Error
// subclasses thrown inside the library and caught here by their type, which
// needs their typeinfo exported across the library's hidden-visibility boundary.
#include <antdt/comm.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace {

int failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "consumer_cpp: FAIL: %s\n", what.c_str());
  ++failures;
}

}  // namespace

int main() {
  int version = -1;
  if (antdtGetVersion(&version) != ANTDT_OK) fail("antdtGetVersion did not return ANTDT_OK");
  if (version != ANTDT_VERSION_CODE) {
    fail("antdtGetVersion gave " + std::to_string(version) + ", the headers say " +
         std::to_string(ANTDT_VERSION_CODE));
  }

  const char* ok_text = antdtStatusString(ANTDT_OK);
  const char* timeout_text = antdtStatusString(ANTDT_ERR_TIMEOUT);
  if (ok_text == nullptr || *ok_text == '\0') fail("antdtStatusString(ANTDT_OK) is empty");
  if (timeout_text == nullptr || *timeout_text == '\0') fail("antdtStatusString(ANTDT_ERR_TIMEOUT) is empty");
  if (ok_text != nullptr && timeout_text != nullptr && std::string(ok_text) == timeout_text) {
    fail("antdtStatusString gives the same text for ANTDT_OK and ANTDT_ERR_TIMEOUT");
  }

  const antdt::InvalidArgument constructed("made by the consumer");
  if (constructed.status() != antdt::Status::invalid_argument) fail("InvalidArgument::status() is not invalid_argument");
  if (std::string(constructed.what()) != "made by the consumer") fail("InvalidArgument::what() lost its message");

  if (antdt::dtype_size(antdt::DataType::f64) != 8) fail("dtype_size(f64) is not 8");
  try {
    const std::size_t size = antdt::dtype_size(static_cast<antdt::DataType>(99));
    fail("dtype_size(99) returned " + std::to_string(size) + " instead of throwing");
  } catch (const antdt::InvalidArgument& e) {
    if (e.status() != antdt::Status::invalid_argument) fail("the caught InvalidArgument has another status");
    std::printf("consumer_cpp: dtype_size(99) threw antdt::InvalidArgument: %s\n", e.what());
  } catch (const antdt::Error& e) {
    fail(std::string("dtype_size(99) threw an antdt::Error that is not InvalidArgument: ") + e.what());
  } catch (const std::exception& e) {
    fail(std::string("dtype_size(99)'s exception was caught only as std::exception (antdt typeinfo not "
                     "shared across the library boundary): ") + e.what());
  }

  if (failures != 0) return 1;
  std::printf("consumer_cpp: antdt %d OK\n", version);
  return 0;
}
