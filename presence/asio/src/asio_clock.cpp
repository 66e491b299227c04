#include "zkagent/presence/asio_clock.hpp"

#include <boost/asio/steady_timer.hpp>
#include <unordered_set>

namespace zkagent::presence {

// Pending timers, so that cancelAll() can reach them; each one removes itself when it fires.
struct AsioClock::Timers {
  std::unordered_set<std::shared_ptr<boost::asio::steady_timer>> pending;
};

AsioClock::AsioClock(boost::asio::any_io_executor executor)
    : executor_(std::move(executor)),
      wallStart_(std::chrono::floor<Millis>(std::chrono::system_clock::now())),
      steadyStart_(std::chrono::steady_clock::now()),
      timers_(std::make_shared<Timers>()) {}

AsioClock::~AsioClock() = default;

TimePoint AsioClock::now() const {
  return wallStart_ +
         std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - steadyStart_);
}

void AsioClock::scheduleAt(TimePoint when, std::function<void()> task) {
  auto timer = std::make_shared<boost::asio::steady_timer>(executor_);
  timer->expires_after(when - now());
  timers_->pending.insert(timer);
  timer->async_wait([timer, weak = std::weak_ptr<Timers>(timers_),
                     task = std::move(task)](const boost::system::error_code& error) {
    auto timers = weak.lock();
    if (!timers) return;
    timers->pending.erase(timer);
    if (!error) task();
  });
}

void AsioClock::cancelAll() {
  auto pending = std::move(timers_->pending);
  timers_->pending.clear();
  for (const auto& timer : pending) timer->cancel();
}

}  // namespace zkagent::presence
