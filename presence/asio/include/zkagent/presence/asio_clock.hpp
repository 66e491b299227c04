// presence::Clock over Asio timers, for the processes that run the presence model for real (the
// agent's connection table, the gateway's lease store). The model is single-threaded: every task
// runs on the executor given here (a strand), and callers touch the model only from it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <memory>

#include "zkagent/presence/clock.hpp"

namespace zkagent::presence {

class AsioClock final : public Clock {
 public:
  explicit AsioClock(boost::asio::any_io_executor executor);
  ~AsioClock() override;

  // Monotonic: the wall time when the clock was made plus the steady time since, so a wall-clock
  // step never expires a lease early or keeps one alive; minutes shown to users stay meaningful.
  TimePoint now() const override;
  // Runs `task` on the executor at `when`; never inside this call.
  void scheduleAt(TimePoint when, std::function<void()> task) override;
  // Drops every pending task (pending timers would keep io_context::run() from returning).
  // Call from the executor.
  void cancelAll();

 private:
  struct Timers;
  boost::asio::any_io_executor executor_;
  TimePoint wallStart_;
  std::chrono::steady_clock::time_point steadyStart_;
  std::shared_ptr<Timers> timers_;
};

}  // namespace zkagent::presence
