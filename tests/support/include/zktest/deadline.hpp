#pragma once
// Deadlines for tests: every wait in a test is bounded, and nothing sleeps for a fixed time
// hoping that something happened meanwhile.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>

namespace zktest {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A point in time by which something must have happened.
class Deadline {
 public:
  explicit Deadline(milliseconds budget) : budget_(budget), at_(Clock::now() + budget) {}

  bool passed() const { return Clock::now() >= at_; }
  // Time left, never negative.
  milliseconds remaining() const;
  // The budget this deadline was created with, for error messages.
  milliseconds budget() const { return budget_; }

 private:
  milliseconds budget_;
  Clock::time_point at_;
};

// Polls `condition` every `pollInterval` until it holds or `timeout` passes; the condition is
// always evaluated once more at the deadline. Use it instead of sleeps:
//   ASSERT_TRUE(zktest::eventually([&] { return leader.isLeader(); }, 5s)) << "no leader";
::testing::AssertionResult eventually(const std::function<bool()>& condition, milliseconds timeout,
                                      milliseconds pollInterval = milliseconds(10));

}  // namespace zktest
