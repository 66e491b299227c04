#include "zktest/deadline.hpp"

#include <algorithm>
#include <thread>

namespace zktest {

milliseconds Deadline::remaining() const {
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(at_ - Clock::now()));
}

::testing::AssertionResult eventually(const std::function<bool()>& condition, milliseconds timeout,
                                      milliseconds pollInterval) {
  const Deadline deadline(timeout);
  while (true) {
    // Read `passed` before evaluating, so the condition gets one last look after the deadline.
    const bool lastChance = deadline.passed();
    if (condition()) return ::testing::AssertionSuccess();
    if (lastChance) break;
    std::this_thread::sleep_for(std::min(pollInterval, deadline.remaining()));
  }
  return ::testing::AssertionFailure() << "condition still false after " << timeout.count()
                                       << " ms (polled every " << pollInterval.count() << " ms)";
}

}  // namespace zktest
