// BatchedEventLines on a real stdout: the lines emitted while the loop is busy leave in one batch,
// in order, when the loop reaches the flush; flush() after the loop writes what a stopped loop
// never flushed.
#include "zkagent/event_lines.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "write_messages.hpp"

namespace zkagent::logging {
namespace {

// Stdout on the writer's end of a WriteMessages pair while it lives. The end is non-blocking, so
// a writer that fills it fails instead of hanging the test; check results after it is gone (gtest
// reports on stdout).
class CapturedStdout {
 public:
  CapturedStdout() {
    std::fflush(stdout);
    ::fcntl(pair_.writeEnd(), F_SETFL, O_NONBLOCK);
    saved_ = ::dup(STDOUT_FILENO);
    ::dup2(pair_.writeEnd(), STDOUT_FILENO);
  }
  ~CapturedStdout() {
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  // The messages written so far.
  std::vector<std::string> messages() { return pair_.readWaiting(); }

 private:
  testing::WriteMessages pair_;
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
