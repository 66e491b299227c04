// The event lines the command-line tools print for scripts and benchmarks (zk-elect, zk-device):
// one event per line on stdout, written and flushed at once so that a reader sees each event as
// it happens, times as nanoseconds since the Unix epoch (comparable across processes on a host).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>

namespace zkagent::logging {

inline std::int64_t unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline void emitEventLine(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace zkagent::logging
