// The one log set-up of the agent and the gateway: spdlog's default logger on stderr, as text
// lines or as one JSON object per line with the same fields in every process:
//   {"ts":"2026-12-01T13:55:00.123+00:00","level":"info","component":"zk-agent","msg":"..."}
// The message is always a valid JSON string (bytes that are not UTF-8 become U+FFFD).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace spdlog::sinks {
class sink;
}

namespace zkagent::logging {

enum class Format { Text, Json };

// The level names a config or a flag may give (spdlog's), most verbose first.
inline constexpr std::string_view kLevelNames[] = {"trace", "debug",    "info", "warn",
                                                   "error", "critical", "off"};

struct Settings {
  std::string component;  // names the process: "zk-agent", "fencing-gateway"
  Format format = Format::Text;
  std::string level = "info";  // one of kLevelNames
};

// Makes the default logger. Lines go to stderr, written by a thread of the logger's own when stderr
// is not a terminal: a burst of lines costs a write(2) per batch, not per line, and an error line
// (and flush()) is written before the call returns. `sink` replaces stderr (for tests). Throws
// std::invalid_argument for a level not in kLevelNames.
void setUp(const Settings& settings, std::shared_ptr<spdlog::sinks::sink> sink = nullptr);
// Writes out what the default logger holds (before exit).
void flush();

}  // namespace zkagent::logging
