// TraceWriter (collectives/telemetry/trace.hpp): JSON-lines and Chrome trace_event files.
#include "collectives/telemetry/trace.hpp"

#include "core/config.hpp"
#include "core/log.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace antdt::telemetry {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written: rank, step, ... read naturally

}  // namespace

// Built once with every key; each step only assigns the values, so writing a
// step costs no allocation beyond the output text (a third of building anew).
struct TraceWriter::Templates {
  explicit Templates(int rank)
      : line{{"rank", rank},      {"step", 0},      {"t_begin", 0.0}, {"step_s", 0.0}, {"compute_s", 0.0},
             {"wait_s", 0.0},     {"transfer_s", 0.0}, {"samples", 0}, {"class", ""}},
        // A complete ("X") event; Chrome traces count in microseconds.
        event{{"name", ""}, {"cat", "step"}, {"ph", "X"}, {"ts", 0.0}, {"dur", 0.0}, {"pid", rank}, {"tid", 0},
              {"args", Json{{"step", 0}}}} {}
  Json line;
  Json event;
};

TraceWriter::TraceWriter(std::string dir, int rank, std::uint32_t flush_steps, std::string prefix) noexcept
    : rank_(rank), flush_steps_(flush_steps == 0 ? 1 : flush_steps) {
  try {
    const std::filesystem::path base(dir);
    jsonl_path_ = (base / cat(prefix, "-rank", rank, ".jsonl")).string();
    chrome_path_ = (base / cat(prefix, "-rank", rank, ".trace.json")).string();
    std::error_code ec;
    std::filesystem::create_directories(base, ec);
    if (ec) {
      fail("create the trace directory", dir, ec.value());
      return;
    }
    jsonl_.reset(std::fopen(jsonl_path_.c_str(), "w"));
    if (!jsonl_) {
      fail("open", jsonl_path_, errno);
      return;
    }
    chrome_.reset(std::fopen(chrome_path_.c_str(), "w"));
    if (!chrome_) {
      fail("open", chrome_path_, errno);
      return;
    }
    templates_ = std::make_unique<Templates>(rank);
    // Object form of the trace_event format; the metadata event names the
    // process row after the rank.
    const Json process_name{{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                            {"args", Json{{"name", cat("rank ", rank)}}}};
    chrome_buffer_ = R"({"displayTimeUnit":"ms","traceEvents":[)" "\n" + process_name.dump();
    chrome_has_events_ = true;
  } catch (const std::exception& e) {
    fail(cat("start (", e.what(), ") in"), dir, 0);
  }
}

TraceWriter::~TraceWriter() { close(); }

std::unique_ptr<TraceWriter> TraceWriter::from_config(const Config& cfg, int rank, std::string prefix) {
  if (cfg.trace_dir.empty()) return nullptr;
  return std::make_unique<TraceWriter>(cfg.trace_dir, rank, static_cast<std::uint32_t>(cfg.trace_flush_steps),
                                       std::move(prefix));
}

void TraceWriter::fail(std::string_view what, const std::string& path, int error) noexcept {
  if (failed_) return;
  failed_ = true;
  try {
    ANTDT_WARN("trace of rank ", rank_, ": cannot ", what, " ", path, error != 0 ? ": " : "",
               error != 0 ? std::strerror(error) : "", "; tracing stops for this rank");
  } catch (...) {
    // Out of memory while reporting: nothing more to do, tracing is off anyway.
  }
  jsonl_buffer_ = std::string();
  chrome_buffer_ = std::string();
}

void TraceWriter::write(const StepRecord& r, std::string_view cls) noexcept {
  if (failed_ || closed_) return;
  try {
    Json& line = templates_->line;
    line["rank"] = r.rank;
    line["step"] = r.step;
    line["t_begin"] = r.t_begin;
    line["step_s"] = r.step_s;
    line["compute_s"] = r.compute_s;
    line["wait_s"] = r.wait_s;
    line["transfer_s"] = r.transfer_s;
    line["samples"] = r.samples;
    line["class"] = cls;
    jsonl_buffer_ += line.dump();
    jsonl_buffer_ += '\n';
    // The record has per-step totals, not the order of phases within the
    // step: the timeline lays them out compute, wait, transfer.
    Json& event = templates_->event;
    event["pid"] = r.rank;
    event["args"]["step"] = r.step;
    double at = r.t_begin;
    const std::pair<std::string_view, double> phases[] = {
        {"compute", r.compute_s}, {"wait", r.wait_s}, {"transfer", r.transfer_s}};
    for (const auto& [name, seconds] : phases) {
      if (seconds <= 0) continue;
      if (chrome_has_events_) chrome_buffer_ += ",\n";
      event["name"] = name;
      event["ts"] = at * 1e6;
      event["dur"] = seconds * 1e6;
      chrome_buffer_ += event.dump();
      chrome_has_events_ = true;
      at += seconds;
    }
  } catch (const std::exception& e) {
    fail(cat("format step ", r.step, " (", e.what(), ") for"), jsonl_path_, 0);
    return;
  }
  ++steps_;
  if (++since_flush_ >= flush_steps_) flush();
}

bool TraceWriter::write_out(File& file, std::string& buffer, const std::string& path) noexcept {
  if (buffer.empty()) return true;
  errno = 0;
  if (std::fwrite(buffer.data(), 1, buffer.size(), file.get()) != buffer.size() || std::fflush(file.get()) != 0) {
    fail("write", path, errno);
    return false;
  }
  buffer.clear();  // keeps its capacity: steady state allocates nothing here
  return true;
}

void TraceWriter::flush() noexcept {
  since_flush_ = 0;
  if (failed_ || !jsonl_ || !chrome_) return;
  if (write_out(jsonl_, jsonl_buffer_, jsonl_path_)) write_out(chrome_, chrome_buffer_, chrome_path_);
}

void TraceWriter::close() noexcept {
  if (closed_) return;
  if (!failed_ && chrome_) {
    try {
      chrome_buffer_ += "\n]}\n";
    } catch (...) {
      fail("finish", chrome_path_, ENOMEM);
    }
  }
  flush();
  closed_ = true;
  const auto close_file = [this](File& file, const std::string& path) {
    if (!file) return;
    errno = 0;
    if (std::fclose(file.release()) != 0) fail("close", path, errno);
  };
  close_file(jsonl_, jsonl_path_);
  close_file(chrome_, chrome_path_);
}

}  // namespace antdt::telemetry
