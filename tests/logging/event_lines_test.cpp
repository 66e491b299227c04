// BatchedEventLines on a real stdout: the lines emitted while the loop is busy leave in one batch,
// in order, when the loop reaches the flush; flush() after the loop writes what a stopped loop
// never flushed.
#include "zkagent/event_lines.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace zkagent::logging {
namespace {

// Stdout on one end of a SOCK_SEQPACKET pair while it lives: one message read is one write(2). The
// end is non-blocking, so a writer that fills it fails instead of hanging the test; check results
// after it is gone (gtest reports on stdout).
class CapturedStdout {
 public:
  CapturedStdout() {
    std::fflush(stdout);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds_), 0);
    ::fcntl(fds_[1], F_SETFL, O_NONBLOCK);
    saved_ = ::dup(STDOUT_FILENO);
    ::dup2(fds_[1], STDOUT_FILENO);
  }
  ~CapturedStdout() {
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    for (int fd : {saved_, fds_[0], fds_[1]}) ::close(fd);
  }
  // The messages written so far.
  std::vector<std::string> messages() {
    std::vector<std::string> out;
    std::string buffer(1 << 20, '\0');
    for (;;) {
      const ssize_t n = ::recv(fds_[0], buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n <= 0) return out;
      out.emplace_back(buffer.data(), static_cast<size_t>(n));
    }
  }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
};

std::string joined(const std::vector<std::string>& messages) {
  std::string all;
  for (const auto& m : messages) all += m;
  return all;
}

TEST(BatchedEventLines, TheLinesOfOneBusyTurnLeaveTogetherAndInOrder) {
  std::string expected;
  std::vector<std::string> messages;
  {
    CapturedStdout out;
    boost::asio::io_context io;
    BatchedEventLines lines(io.get_executor());
    for (int i = 0; i < 1000; ++i) {
      const std::string line = "LEADER acct-" + std::to_string(i) + " 7 1700000000000000000";
      expected += line + "\n";
      boost::asio::post(io, [&lines, line] { lines.emit(line); });
    }
    io.run();
    messages = out.messages();
  }
  EXPECT_EQ(joined(messages), expected);
  // One batch: stdio may cut a large one into a few writes, never into one per line.
  EXPECT_LE(messages.size(), 4u);
}

TEST(BatchedEventLines, FlushAfterTheLoopWritesWhatItNeverFlushed) {
  std::vector<std::string> beforeFlush, afterFlush;
  {
    CapturedStdout out;
    boost::asio::io_context io;
    BatchedEventLines lines(io.get_executor());
    boost::asio::post(io, [&] {
      lines.emit("LOST acct-1 stopped 1700000000000000000");
      io.stop();  // as zk-elect's stop: the queued flush never runs
    });
    io.run();
    beforeFlush = out.messages();
    lines.flush();
    afterFlush = out.messages();
  }
  EXPECT_TRUE(beforeFlush.empty());
  EXPECT_EQ(joined(afterFlush), "LOST acct-1 stopped 1700000000000000000\n");
}

}  // namespace
}  // namespace zkagent::logging
