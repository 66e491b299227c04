// WriteMessages: a SOCK_SEQPACKET pair for tests of what a writer does with a descriptor. The pair
// keeps the boundaries of each write(2), so one message read is one write.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace zkagent::logging::testing {

class WriteMessages {
 public:
  WriteMessages() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds_), 0); }
  ~WriteMessages() {
    if (reader_.joinable()) reader_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  WriteMessages(const WriteMessages&) = delete;
  WriteMessages& operator=(const WriteMessages&) = delete;

  int writeEnd() const { return fds_[1]; }
  // Reads every message, on a thread of its own, until the writer's end is closed.
  void startReading() {
    reader_ = std::thread([this] { read(0, all_); });
  }
  // Closes the writer's end (its writer is gone) and returns what the reader got.
  std::vector<std::string> finish() {
    ::close(fds_[1]);
    fds_[1] = -1;
    reader_.join();
    return all_;
  }
  // The messages already there, without waiting.
  std::vector<std::string> readWaiting() {
    std::vector<std::string> out;
    read(MSG_DONTWAIT, out);
    return out;
  }

 private:
  void read(int flags, std::vector<std::string>& out) {
    std::string buffer(256 * 1024, '\0');
    for (;;) {
      const ssize_t n = ::recv(fds_[0], buffer.data(), buffer.size(), flags);
      if (n <= 0) return;
      out.emplace_back(buffer.data(), static_cast<size_t>(n));
    }
  }

  int fds_[2] = {-1, -1};
  std::thread reader_;
  std::vector<std::string> all_;
};

}  // namespace zkagent::logging::testing
