// The DDS checkpoint format (docs/dds.md#checkpoint): a Dds's dataset,
// options and state as canonical JSON ("format": "antdt-dds", "version": 1)
// with an FNV-1a checksum; reading it back with every field and range
// validated; and the atomic write of the file. The bytes are persisted: a
// change here must keep reading what earlier builds wrote.
#pragma once

#include "scheduler/dds.hpp"

#include <string>
#include <string_view>

namespace antdt::sched {

// What a checkpoint holds.
struct DdsCheckpoint {
  Dataset dataset;
  DdsOptions options;
  DdsState state;
};

// The checkpoint's text (equal states give equal text).
std::string checkpoint_text(const Dataset& dataset, const DdsOptions& options, const DdsState& state);

// Reads and validates the checkpoint at `path`. A malformed file (syntax,
// missing or mistyped field, checksum, version, inconsistent ranges) raises
// InvalidArgument naming the path and the problem.
DdsCheckpoint read_checkpoint(const std::string& path);
// The same checks on checkpoint text; `path` names its origin in the messages
// (a file, or the store the state was read back from).
DdsCheckpoint parse_checkpoint(std::string_view text, const std::string& path);

// Writes `text` to path.tmp, fsyncs it, renames it over `path`, fsyncs the
// directory: a crash leaves either the old or the new file, never a mix.
// InvalidArgument naming the path and the errno text when a step fails.
void write_checkpoint(const std::string& path, std::string_view text);

}  // namespace antdt::sched
