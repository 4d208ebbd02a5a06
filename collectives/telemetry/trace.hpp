// Per-rank traces in ANTDT_TRACE_DIR (docs/monitor.md, "Traces"):
//   <dir>/<prefix>-rank<R>.jsonl       one JSON object per step
//   <dir>/<prefix>-rank<R>.trace.json  Chrome trace_event timeline (chrome://tracing, Perfetto)
// Lines are buffered and written every `flush_steps` steps and at close();
// the Chrome file is complete (valid JSON) once close() has run.
//
// Tracing must never disturb training: no member throws. The first I/O error
// is logged once as a warning and tracing stops for this writer.
#pragma once

#include "collectives/telemetry/step_timer.hpp"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace antdt {
struct Config;
}

namespace antdt::telemetry {

class TraceWriter {
 public:
  // Creates `dir` if needed and truncates both files.
  TraceWriter(std::string dir, int rank, std::uint32_t flush_steps, std::string prefix = "antdt") noexcept;
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // A writer per ANTDT_TRACE_DIR / ANTDT_TRACE_FLUSH_STEPS, or null when
  // ANTDT_TRACE_DIR is unset.
  static std::unique_ptr<TraceWriter> from_config(const Config& cfg, int rank, std::string prefix = "antdt");

  // `cls` is the rank's class as known where the trace is written
  // (to_string(StragglerClass), or "unknown").
  void write(const StepRecord& r, std::string_view cls) noexcept;
  void flush() noexcept;
  void close() noexcept;

  bool ok() const noexcept { return !failed_; }
  std::uint64_t steps_written() const noexcept { return steps_; }
  const std::string& jsonl_path() const noexcept { return jsonl_path_; }
  const std::string& chrome_path() const noexcept { return chrome_path_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  using File = std::unique_ptr<std::FILE, FileCloser>;

  struct Templates;  // JSON objects reused for every step (trace.cpp)

  void fail(std::string_view what, const std::string& path, int error) noexcept;
  bool write_out(File& file, std::string& buffer, const std::string& path) noexcept;

  int rank_;
  std::uint32_t flush_steps_;
  std::string jsonl_path_, chrome_path_;
  File jsonl_, chrome_;
  std::unique_ptr<Templates> templates_;
  std::string jsonl_buffer_, chrome_buffer_;
  std::uint64_t steps_ = 0;
  std::uint32_t since_flush_ = 0;
  bool chrome_has_events_ = false;
  bool failed_ = false;
  bool closed_ = false;
};

}  // namespace antdt::telemetry
