#include "batched_fd_sink.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace zkagent::logging::detail {
namespace {

// Whole lines of at most PIPE_BUF bytes per write(2): a pipe writes that much atomically, so the
// lines of other writers on the same stderr (the ZooKeeper client's own log) never land inside
// one of ours, as they could not when each line was a write of its own. A longer line goes alone.
constexpr size_t kMaxWriteBytes = PIPE_BUF;
// Lines waiting beyond this (a descriptor nobody reads) are written by the thread that logs, which
// then waits as it would on a plain write: memory stays bounded.
constexpr size_t kMaxPendingBytes = 4 * 1024 * 1024;

}  // namespace

BatchedFdSink::BatchedFdSink(int fd) : fd_(fd) {
  writer_ = std::thread([this] { writerLoop(); });
  pthread_setname_np(writer_.native_handle(), "log-writer");
}

BatchedFdSink::~BatchedFdSink() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  writer_.join();
  writeAll(pending_);  // what came after the writer's last batch
}

void BatchedFdSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  const bool wasEmpty = pending_.empty();
  pending_.append(formatted.data(), formatted.size());
  if (pending_.size() > kMaxPendingBytes) return writePendingNow();
  // The writer sleeps only on an empty buffer; while it writes, lines just gather.
  if (wasEmpty) wake_.notify_one();
}

void BatchedFdSink::flush_() { writePendingNow(); }

void BatchedFdSink::writePendingNow() {
  std::lock_guard writing(writeMu_);  // after the batch the writer may still be writing
  writeAll(pending_);
  pending_.clear();
}

void BatchedFdSink::writerLoop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nothing left
    std::string batch;
    batch.swap(pending_);
    std::unique_lock writing(writeMu_);
    lock.unlock();
    writeAll(batch);
    writing.unlock();
    lock.lock();
  }
}

void BatchedFdSink::writeAll(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t chunk = bytes.size();
    if (chunk > kMaxWriteBytes) {
      const size_t lastEnd = bytes.rfind('\n', kMaxWriteBytes - 1);
      const size_t firstEnd = bytes.find('\n');
      chunk = lastEnd != std::string_view::npos    ? lastEnd + 1
              : firstEnd != std::string_view::npos ? firstEnd + 1
                                                   : bytes.size();
    }
    if (!writeFully(bytes.substr(0, chunk))) return;
    bytes.remove_prefix(chunk);
  }
}

bool BatchedFdSink::writeFully(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // nowhere to log to (closed): drop, as a failed fwrite would
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace zkagent::logging::detail
