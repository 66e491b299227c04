// The event lines the command-line tools print for scripts and benchmarks (zk-elect, zk-device):
// one event per line on stdout, times as nanoseconds since the Unix epoch (comparable across
// processes on a host). emitEventLine writes and flushes each line at once; BatchedEventLines
// flushes once the event loop that printed a burst of them is free.
#pragma once

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

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

// Event lines printed from an event loop: the lines emitted while the loop is busy are written
// together, in one write(2), when the loop reaches the flush the first of them posted. A takeover
// of 10 000 accounts prints 10 000 LEADER lines; a write for each, and one for its log line, took
// a fifth of zk-elect's CPU time in it. A line carries its event's own time, so batching moves only
// the moment a reader sees it (the end of the loop's current turn), not what it says. Thread-safe.
// Call flush() once the loop has stopped: a flush it had queued never ran.
template <typename Executor>
class BatchedEventLines {
 public:
  explicit BatchedEventLines(Executor executor) : executor_(std::move(executor)) {}
  BatchedEventLines(const BatchedEventLines&) = delete;
  BatchedEventLines& operator=(const BatchedEventLines&) = delete;

  void emit(std::string_view line) {
    std::lock_guard lock(mu_);
    pending_.append(line);
    pending_.push_back('\n');
    if (std::exchange(flushQueued_, true)) return;
    boost::asio::post(executor_, [this] { flush(); });
  }

  void flush() {
    std::lock_guard lock(mu_);  // held while writing: batches leave in order
    flushQueued_ = false;
    if (pending_.empty()) return;
    std::fwrite(pending_.data(), 1, pending_.size(), stdout);
    std::fflush(stdout);
    pending_.clear();
  }

 private:
  Executor executor_;
  std::mutex mu_;
  std::string pending_;
  bool flushQueued_ = false;
};

}  // namespace zkagent::logging
