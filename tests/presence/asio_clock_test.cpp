// presence::AsioClock: the model's clock over Asio timers, as the agent and the gateway run it.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <vector>

#include "zkagent/presence/asio_clock.hpp"

namespace zkagent::presence {
namespace {

TEST(AsioClock, RunsTasksInTimeOrderOnItsExecutorAndNeverInsideScheduleAt) {
  boost::asio::io_context io;
  AsioClock clock(boost::asio::make_strand(io));
  std::vector<int> order;
  const TimePoint start = clock.now();
  clock.scheduleAt(start + Millis{40}, [&] { order.push_back(2); });
  clock.scheduleAt(start - Millis{1000}, [&] { order.push_back(1); });  // past: at once
  EXPECT_TRUE(order.empty());
  io.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_GE(clock.now() - start, Millis{40});
}

TEST(AsioClock, CancelAllDropsPendingTasksSoTheLoopCanEnd) {
  boost::asio::io_context io;
  AsioClock clock(io.get_executor());
  bool ran = false;
  clock.scheduleAt(clock.now() + Millis{3'600'000}, [&] { ran = true; });
  boost::asio::post(io, [&] { clock.cancelAll(); });
  io.run();  // returns only because the hour-long timer was cancelled
  EXPECT_FALSE(ran);
}

TEST(AsioClock, NowIsMonotonicAndCloseToWallTime) {
  boost::asio::io_context io;
  AsioClock clock(io.get_executor());
  const TimePoint a = clock.now();
  const TimePoint b = clock.now();
  EXPECT_LE(a, b);
  const auto wall = std::chrono::floor<Millis>(std::chrono::system_clock::now());
  EXPECT_LT(std::chrono::abs(wall - a), Millis{1000});
}

}  // namespace
}  // namespace zkagent::presence
