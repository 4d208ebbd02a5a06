/* Uses the installed C API from C: version, status strings, and the error
 * contract (a null argument gives ANTDT_ERR_INVALID_ARGUMENT and a message). */
#include <antdt/comm.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void fail(const char* what) {
  fprintf(stderr, "consumer_c: FAIL: %s\n", what);
  ++failures;
}

int main(void) {
  int version = -1;
  int status;
  const char* message;

  if (antdtGetVersion(&version) != ANTDT_OK) fail("antdtGetVersion did not return ANTDT_OK");
  if (version != ANTDT_VERSION_CODE) {
    fprintf(stderr, "consumer_c: antdtGetVersion gave %d, the header says %d\n", version, ANTDT_VERSION_CODE);
    fail("version mismatch between library and header");
  }

  for (status = ANTDT_OK; status <= ANTDT_ERR_INTERNAL; ++status) {
    const char* text = antdtStatusString((antdtStatus_t)status);
    if (text == NULL || text[0] == '\0') {
      fprintf(stderr, "consumer_c: antdtStatusString(%d) is empty\n", status);
      fail("empty status string");
    }
  }

  if (antdtGetVersion(NULL) != ANTDT_ERR_INVALID_ARGUMENT) fail("antdtGetVersion(NULL) is not ANTDT_ERR_INVALID_ARGUMENT");
  message = antdtLastError();
  if (message == NULL || message[0] == '\0') fail("antdtLastError() is empty after a failed call");

  if (failures != 0) return 1;
  printf("consumer_c: antdt %d OK (%s)\n", version, antdtStatusString(ANTDT_OK));
  return 0;
}
