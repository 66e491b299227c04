#include "zkagent/presence/clock.hpp"

#include <algorithm>

namespace zkagent::presence {

std::int64_t minuteOf(TimePoint t) {
  return std::chrono::floor<std::chrono::minutes>(t).time_since_epoch().count();
}

void TimerScope::at(TimePoint when, std::function<void()> task) {
  clock_.scheduleAt(when, [alive = std::weak_ptr<char>(alive_), task = std::move(task)] {
    if (!alive.expired()) task();
  });
}

void VirtualClock::scheduleAt(TimePoint when, std::function<void()> task) {
  heap_.push_back(Event{std::max(when, now_), nextOrder_++, std::move(task)});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
}

void VirtualClock::runUntil(TimePoint until) {
  while (!heap_.empty() && heap_.front().when <= until) {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Event event = std::move(heap_.back());
    heap_.pop_back();
    now_ = event.when;
    ++eventsRun_;
    event.task();
  }
  now_ = std::max(now_, until);
}

}  // namespace zkagent::presence
