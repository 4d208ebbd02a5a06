// The DDS checkpoint (scheduler/dds_checkpoint): the file a restarted
// coordinator reads back. read_checkpoint takes a path, so each input is
// written to a private temporary file first. A checkpoint that reads is
// written back as text (checkpoint_text walks every field it accepted).
#include "scheduler/dds_checkpoint.hpp"
#include "tests/fuzz/fuzz_target.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace {

const std::string& scratch_path() {
  static const std::string path = "/tmp/antdt_fuzz_dds_checkpoint." + std::to_string(::getpid()) + ".json";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace antdt;
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  fuzz::refuse_cleanly([&] {
    const sched::DdsCheckpoint ck = sched::read_checkpoint(scratch_path());
    (void)sched::checkpoint_text(ck.dataset, ck.options, ck.state);
  });
  ::unlink(scratch_path().c_str());
  return 0;
}
