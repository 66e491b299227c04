// The device endpoint's accounts: the connection table's per-account device counts, leadership
// released (the account's connections leave the table and close with 4001 naming the new
// leader), the gateway fencing a token, a device timed out by the table, and shutdown.
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_endpoint_core.hpp"

namespace zkagent::agent::detail {

void DeviceEndpoint::Core::countDevices(const std::string& account, int64_t delta) {
  if (auto it = counts->deviceCounts.find(account); it != counts->deviceCounts.end())
    it->second += delta;
}

void DeviceEndpoint::Core::leadershipLost(const std::string& account) {
  if (!table) return;
  std::vector<std::weak_ptr<Session>> moving;
  for (const auto& entry : table->release(account)) {
    auto it = inTable.find(entry.epoch.connection);
    if (it == inTable.end()) continue;
    Session* session = it->second;
    session->released();
    moving.push_back(session->weak_from_this());
  }
  if (!moving.empty()) closeMoved(account, std::move(moving), 0);
}

// Closes the released connections with 4001 and the new leader's endpoint as the reason; the
// successor usually shows up within milliseconds of a handover, so wait briefly for it.
void DeviceEndpoint::Core::closeMoved(std::string account,
                                      std::vector<std::weak_ptr<Session>> moving, int attempt) {
  const auto leader = gate ? leaderElsewhere(gate(account)) : std::nullopt;
  if (!leader && attempt < kLeaderLookups && !stopping && !handedOver) {
    auto timer = std::make_shared<asio::steady_timer>(executor, kLeaderLookup);
    timer->async_wait([self = shared_from_this(), timer, account = std::move(account),
                       moving = std::move(moving), attempt](beast::error_code) mutable {
      self->closeMoved(std::move(account), std::move(moving), attempt + 1);
    });
    return;
  }
  for (const auto& weak : moving) {
    auto session = weak.lock();
    if (!session || session->state() != Session::State::Moving) continue;
    m.leaderMovedCloses.inc();
    session->closeWith(kLeaderMoved, leader.value_or(""));
  }
}

// A stopping agent's hand-over is done and its electors no longer watch who leads: the devices
// closeMoved would hold for the successor's endpoint leave now (their round then finds the leader).
void DeviceEndpoint::Core::closeMovingNow() {
  handedOver = true;  // closeMoved waits no more
  std::unordered_map<std::string, std::vector<std::weak_ptr<Session>>> moving;
  for (Session* session : sessions) {
    if (session->state() == Session::State::Moving) {
      moving[session->key().user].push_back(session->weak_from_this());
    }
  }
  for (auto& [account, sessionsOfAccount] : moving) {
    closeMoved(account, std::move(sessionsOfAccount), 0);
  }
}

void DeviceEndpoint::Core::onTimeout(presence::Epoch epoch) {
  auto it = inTable.find(epoch.connection);
  if (it != inTable.end()) it->second->timedOut();
}

// The gateway refused writes under `token`: a newer leader exists even if our gate has not seen
// it yet (a paused agent after SIGCONT). Stop serving the account under that token.
void DeviceEndpoint::Core::onFenced(const std::string& account, uint64_t token) {
  fenced[account] = token;
  spdlog::warn("presence writes fenced account={} token={} instance={}: closing its devices",
               account, token, instanceId);
  bool under = false;
  for (const auto& [counter, session] : inTable) {
    if (session->key().user == account && session->token() <= token) under = true;
  }
  if (under) leadershipLost(account);
}

void DeviceEndpoint::Core::stop(std::function<void()> done) {
  stopDone = std::move(done);
  stopping = true;
  listener->stop();
  reaper.cancel();
  if (writer) writer->stop();
  if (table) table->crash();  // no more timers, renewals or removals
  clock.cancelAll();
  inTable.clear();
  std::vector<std::shared_ptr<Session>> all;
  for (Session* session : sessions) all.push_back(session->shared_from_this());
  for (auto& session : all) {
    const bool moving = session->state() == Session::State::Moving;
    session->released();
    session->closeWith(moving ? kLeaderMoved : kGoingAway, moving ? "" : "agent shutting down");
  }
  all.clear();
  awaitingGate.clear();  // closed above; the gate's answers find nothing
  tlsWaiting.clear();
  tlsTimer.cancel();
  if (sessions.empty()) return stopped();
  stopTimer.expires_after(kStopGrace);
  stopTimer.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;
    std::vector<std::shared_ptr<Session>> left;
    for (Session* session : self->sessions) left.push_back(session->shared_from_this());
    for (auto& session : left) session->abort();
    self->stopped();
  });
}

void DeviceEndpoint::Core::stopped() {
  stopTimer.cancel();
  if (auto done = std::move(stopDone)) {
    stopDone = nullptr;
    asio::post(io, std::move(done));
  }
}

}  // namespace zkagent::agent::detail
