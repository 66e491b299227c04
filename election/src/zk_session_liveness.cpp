// ZkSession: liveness: the idle ping that keeps proof of contact fresh, and the local deadline.
#include "zk_session.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

// The server expires a session `timeout` after it last heard from us, and only tells us once we
// reconnect. Keep the same deadline locally on the monotonic clock (Mesos' group.cpp,
// CURATOR-460/ZOOKEEPER-4508): when it passes while disconnected, the session is gone for us too.
void ZkSession::armDeadline() {
  const auto timeout = negotiatedTimeout().count() > 0 ? negotiatedTimeout() : options_.timeout;
  deadlineTimer_.expires_at(Clock::time_point(Clock::duration(lastContactTicks_.load())) + timeout);
  deadlineTimer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->state_.load() != SessionState::Suspended) return;
    self->expireLocally("client-side deadline passed");
  });
}

bool ZkSession::heardRecently() const {
  const auto timeout = negotiatedTimeout().count() > 0 ? negotiatedTimeout() : options_.timeout;
  const auto heard = Clock::time_point(Clock::duration(lastContactTicks_.load()));
  return Clock::now() - heard < timeout * 2 / 3;
}

// A cheap read every third of the timeout keeps proof of contact fresh when the session is idle.
void ZkSession::armPing() {
  const auto period = std::max(negotiatedTimeout() / 3, Millis(50));
  pingTimer_.expires_after(period);
  pingTimer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->state_.load() != SessionState::Connected) return;
    self->existsOn(self->strand_, "/", nullptr, nullptr,
                   [weak2 = std::weak_ptr(self)](ZkError, std::optional<NodeStat>) {
                     auto s = weak2.lock();
                     if (s && s->state_.load() == SessionState::Connected) s->armPing();
                   });
  });
}
}  // namespace zkagent::election::detail
