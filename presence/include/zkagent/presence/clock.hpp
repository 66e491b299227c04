// Injected time for the presence model: the model never reads a clock or starts a timer itself.
//
// Tests and experiments drive it with VirtualClock (events run in time order, deterministically);
// the agent and the gateway provide an implementation over Asio timers on their strand. Both only
// need now() and scheduleAt(): periodic work reschedules itself, cancellation goes through
// TimerScope, so the interface stays this small.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace zkagent::presence {

using Millis = std::chrono::milliseconds;
// Wall-clock based so that "last seen" minutes mean something to a subscriber; only differences and
// whole minutes are ever used.
using TimePoint = std::chrono::sys_time<Millis>;

// Minutes since the Unix epoch: the only time resolution that leaves the model;
// leave times to the second never reach subscribers.
std::int64_t minuteOf(TimePoint t);

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  // Runs `task` at `when` (at once-ish if `when` is already past). Never runs it re-entrantly from
  // inside scheduleAt, so a callback may schedule its successor.
  virtual void scheduleAt(TimePoint when, std::function<void()> task) = 0;
};

// Schedules callbacks that are dropped once the scope is cancelled or destroyed, so an object can
// die, or a gateway "crash", with timers still pending on the clock.
class TimerScope {
 public:
  explicit TimerScope(Clock& clock) : clock_(clock) {}
  TimerScope(const TimerScope&) = delete;
  TimerScope& operator=(const TimerScope&) = delete;

  TimePoint now() const { return clock_.now(); }
  void at(TimePoint when, std::function<void()> task);
  void after(Millis delay, std::function<void()> task) { at(now() + delay, std::move(task)); }
  // Every callback scheduled so far will not run.
  void cancelAll() { alive_ = std::make_shared<char>(); }

 private:
  Clock& clock_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

// Deterministic discrete-event clock: events run in time order, equal times in scheduling order.
class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(TimePoint start = TimePoint{}) : now_(start) {}

  TimePoint now() const override { return now_; }
  void scheduleAt(TimePoint when, std::function<void()> task) override;

  // Runs every event due at or before `until`, then leaves now() at `until`.
  void runUntil(TimePoint until);
  void runFor(Millis span) { runUntil(now_ + span); }
  std::uint64_t eventsRun() const { return eventsRun_; }
  std::size_t pending() const { return heap_.size(); }

 private:
  struct Event {
    TimePoint when;
    std::uint64_t order;
    std::function<void()> task;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.when != b.when ? a.when > b.when : a.order > b.order;
    }
  };

  TimePoint now_;
  std::uint64_t nextOrder_ = 0;
  std::uint64_t eventsRun_ = 0;
  std::vector<Event> heap_;  // a heap ordered by Later, so a task can be moved out when it runs
};

}  // namespace zkagent::presence
