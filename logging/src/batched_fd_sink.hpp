// BatchedFdSink: log lines for a file descriptor, written by a thread of its own. A line is
// appended to a buffer and the writer writes everything waiting in one write(2), so a burst of
// lines (a takeover of 10 000 accounts logs a line per account) costs a few system calls instead
// of one per line, and the thread that logs never waits for the descriptor. flush() writes
// everything waiting before it returns (setUp flushes after every error line, so the line before
// a failure is out before anything else happens); destruction writes the rest.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace zkagent::logging::detail {

class BatchedFdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit BatchedFdSink(int fd);
  ~BatchedFdSink() override;
  BatchedFdSink(const BatchedFdSink&) = delete;
  BatchedFdSink& operator=(const BatchedFdSink&) = delete;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;  // under mutex_
  void flush_() override;                                       // under mutex_

 private:
  void writerLoop();
  // Writes `pending_` out; under mutex_. writeMu_ keeps batches in order with one the writer
  // thread is still writing.
  void writePendingNow();
  void writeAll(std::string_view bytes);
  bool writeFully(std::string_view bytes);

  const int fd_;
  std::string pending_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::mutex writeMu_;  // taken after mutex_, never before it
  std::thread writer_;
};

}  // namespace zkagent::logging::detail
