// BatchedFdSink on a real descriptor: every line arrives, in order, from several threads; a burst
// costs far fewer writes than lines and never splits a line; flush() (which setUp runs after every
// error line) and destruction leave nothing behind.
#include "batched_fd_sink.hpp"

#include <gtest/gtest.h>
#include <spdlog/logger.h>

#include <climits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "write_messages.hpp"

namespace zkagent::logging::detail {
namespace {

using Messages = testing::WriteMessages;

std::shared_ptr<spdlog::logger> loggerOn(int fd) {
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<BatchedFdSink>(fd));
  logger->set_pattern("%v");
  logger->flush_on(spdlog::level::err);
  return logger;
}

// The lines of the messages; each message must be whole lines (a write never splits a line).
std::vector<std::string> linesOf(const std::vector<std::string>& messages) {
  std::vector<std::string> lines;
  for (const auto& m : messages) {
    EXPECT_EQ(m.back(), '\n') << "a line split between writes";
    std::istringstream in(m);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  return lines;
}

TEST(BatchedFdSink, EveryLineOfSeveralThreadsArrivesOnceAndInEachThreadsOrder) {
  Messages socket;
  socket.startReading();
  constexpr int kThreads = 4, kLines = 5000;
  {
    auto logger = loggerOn(socket.writeEnd());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&logger, t] {
        for (int i = 0; i < kLines; ++i) logger->info("{} {}", t, i);
      });
    }
    for (auto& th : threads) th.join();
  }  // the logger and its sink go: what is left is written
  const auto lines = linesOf(socket.finish());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::map<int, int> next;
  for (const auto& line : lines) {
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "%d %d", &t, &i), 2) << line;
    ASSERT_EQ(i, next[t]) << "thread " << t << " out of order";
    ++next[t];
  }
}

TEST(BatchedFdSink, ABurstCostsFarFewerWritesThanLines) {
  Messages socket;
  constexpr int kLines = 20000;
  {
    auto logger = loggerOn(socket.writeEnd());
    // Nobody reads yet: once the socket's buffer is full the writer waits in write(2), and every
    // line logged meanwhile joins the next batch.
    for (int i = 0; i < kLines; ++i) logger->info("account-{} led", i);
    socket.startReading();
  }
  const auto messages = socket.finish();
  EXPECT_EQ(linesOf(messages).size(), static_cast<size_t>(kLines));
  EXPECT_LT(messages.size(), static_cast<size_t>(kLines / 10)) << "a write per line";
  for (const auto& m : messages) EXPECT_LE(m.size(), static_cast<size_t>(PIPE_BUF));
}

TEST(BatchedFdSink, FlushWritesWhatIsWaitingBeforeItReturns) {
  Messages socket;
  auto logger = loggerOn(socket.writeEnd());
  for (int i = 0; i < 100; ++i) logger->warn("line {}", i);
  logger->flush();
  EXPECT_EQ(linesOf(socket.readWaiting()).size(), 100u);
}

TEST(BatchedFdSink, ALineLongerThanAnAtomicPipeWriteGoesWhole) {
  Messages socket;
  auto logger = loggerOn(socket.writeEnd());
  const std::string longLine(3 * PIPE_BUF, 'x');
  logger->info("before");
  logger->info(longLine);
  logger->info("after");
  logger->flush();
  const auto lines = linesOf(socket.readWaiting());
  EXPECT_EQ(lines, (std::vector<std::string>{"before", longLine, "after"}));
}

}  // namespace
}  // namespace zkagent::logging::detail
