// The on-disk side of the TokenValidator: CRC-framed records, the append-only log, the
// snapshot, recovery and log rotation. Format and crash reasoning: docs/fencing.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rules.hpp"

namespace zkagent::fencing::detail {

// One record as it goes to disk: u32 body length, u32 CRC-32 of the body, body (LE integers).
std::string encodeEvent(const Event& event);

class Journal {
 public:
  // Opens (creates) dataDir and locks it against other processes, loads the snapshot, replays
  // the logs through the callbacks in order, and cuts a torn or corrupt tail off the last log.
  // Throws StorageError if the directory is in use or corrupt anywhere but at the tail.
  Journal(const std::filesystem::path& dataDir,
          const std::function<void(AccountSnapshot&&)>& restore,
          const std::function<void(Event&&)>& replay, RecoveryReport& report);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends encoded records and makes them durable (fdatasync). Throws StorageError.
  void appendDurably(std::string_view records);
  std::uint64_t logBytes() const { return logBytes_; }
  // After a failed append: cuts the log back to its last durable length (what fdatasync last
  // confirmed) and makes that durable, so that no undurable record is replayed when it is opened
  // again. Throws StorageError.
  void truncateToDurable();

  // Compaction: starts a new empty log, then atomically replaces the snapshot with `state`
  // (which must reflect exactly the records logged so far), then deletes the old log.
  void rotate(const std::vector<AccountSnapshot>& state);

 private:
  std::filesystem::path dir_;
  int lockFd_ = -1;
  int logFd_ = -1;
  std::uint64_t generation_ = 0;
  std::uint64_t logBytes_ = 0;
};

}  // namespace zkagent::fencing::detail
