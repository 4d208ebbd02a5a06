// The DDS store in an SQLite database in WAL mode (docs/dds.md, "Durable
// state"): one table per kind of row (shards, leases and their pieces, ranks,
// the queue, the answers to the latest settles), one transaction per write().
#pragma once

#include "scheduler/dds_store.hpp"

#include <memory>
#include <string>

namespace antdt::sched {

// PRAGMA synchronous in WAL mode: full fsyncs the log at every commit (a
// transaction survives a power loss), normal only at checkpoints of the log
// (it survives a kill of the process, not of the machine).
enum class SqliteSync : std::uint8_t { normal, full };

// Opens (creating it when missing) the database at `path`. ConfigError naming
// the path and SQLite's reason when it cannot be opened, is not a database, or
// cannot be written.
std::unique_ptr<DdsStore> open_sqlite_store(const std::string& path, SqliteSync sync = SqliteSync::full);

}  // namespace antdt::sched
