#include "zkagent/presence/connection_table.hpp"

#include <stdexcept>
#include <vector>

namespace zkagent::presence {
ConnectionTable::ConnectionTable(Clock& clock, const Params& params, GatewayIdentity identity,
                                 LeaseWriter& store, TimeoutHandler onTimeout,
                                 std::uint64_t runSeed)
    : timers_(clock),
      params_(params),
      identity_(std::move(identity)),
      store_(store),
      onTimeout_(std::move(onTimeout)),
      random_(identity_.name, runSeed) {
  validate(params_);
  if (identity_.name.empty()) throw std::invalid_argument("gateway name must not be empty");
  if (params_.pingTimeout > Millis{0}) {
    timers_.after(params_.checkInterval, [this] { checkTimeouts(); });
  }
  scheduleRenewal(true);
}

Epoch ConnectionTable::connect(DeviceKey key, std::uint64_t leaderToken) {
  if (crashed_)
    throw std::logic_error("gateway " + identity_.name + " crashed: connect to another");
  // One counter for every leadership of this table: still monotonic within each of them.
  const Epoch epoch{leaderToken, ++lastCounter_};
  const LeaseEntry entry{key, epoch};
  byUser_[key.user].insert(epoch.connection);
  auto it =
      connections_.emplace(epoch.connection, Connection{std::move(key), leaderToken, {}}).first;
  recordPing(epoch.connection, it->second);
  store_.renew(identity_.name, std::span(&entry, 1));
  return epoch;
}

ConnectionTable::Connection* ConnectionTable::find(Epoch connection) {
  auto it = connections_.find(connection.connection);
  if (it == connections_.end() || it->second.leaderToken != connection.leaderToken) return nullptr;
  return &it->second;
}

bool ConnectionTable::ping(Epoch connection) {
  Connection* found = find(connection);
  if (found == nullptr) return false;
  recordPing(connection.connection, *found);
  return true;
}

void ConnectionTable::recordPing(std::uint64_t counter, Connection& connection) {
  connection.lastPing = timers_.now();
  if (params_.pingTimeout > Millis{0}) pings_.emplace_back(connection.lastPing, counter);
}

bool ConnectionTable::close(Epoch connection) {
  if (find(connection) == nullptr) return false;
  end(connection.connection, LeaveReason::Close);
  return true;
}

std::vector<LeaseEntry> ConnectionTable::release(const std::string& user) {
  std::vector<LeaseEntry> released;
  auto owned = byUser_.find(user);
  if (owned == byUser_.end()) return released;
  for (std::uint64_t counter : owned->second) {
    auto it = connections_.find(counter);
    released.push_back(
        LeaseEntry{std::move(it->second.key), Epoch{it->second.leaderToken, counter}});
    connections_.erase(it);  // its entries in pings_ are skipped as unknown
  }
  byUser_.erase(owned);
  return released;
}

void ConnectionTable::crash() {
  timers_.cancelAll();
  connections_.clear();
  byUser_.clear();
  pings_.clear();
  crashed_ = true;
}

void ConnectionTable::end(std::uint64_t counter, LeaveReason reason) {
  auto it = connections_.find(counter);
  const DeviceKey key = std::move(it->second.key);
  const Epoch epoch{it->second.leaderToken, counter};
  connections_.erase(it);
  if (auto owned = byUser_.find(key.user); owned != byUser_.end()) {
    owned->second.erase(counter);
    if (owned->second.empty()) byUser_.erase(owned);
  }
  store_.remove(key, epoch, reason);
  if (reason == LeaveReason::PingTimeout && onTimeout_) onTimeout_(key, epoch);
}

void ConnectionTable::checkTimeouts() {
  const TimePoint now = timers_.now();
  std::vector<std::uint64_t> due;
  for (; !pings_.empty() && now - pings_.front().first > params_.pingTimeout; pings_.pop_front()) {
    const auto [pingedAt, counter] = pings_.front();
    auto it = connections_.find(counter);
    if (it != connections_.end() && it->second.lastPing == pingedAt) due.push_back(counter);
  }
  // The timeout handler may close connections or even crash the table: look each one up again.
  for (std::uint64_t counter : due) {
    if (connections_.contains(counter)) end(counter, LeaveReason::PingTimeout);
  }
  if (!crashed_) timers_.after(params_.checkInterval, [this] { checkTimeouts(); });
}

void ConnectionTable::scheduleRenewal(bool first) {
  const double jitter = params_.renewJitter;
  Millis delay = params_.renewInterval;
  if (jitter > 0) {
    // The first renewal after a (re)start is spread over a whole interval, or every agent that
    // restarted together would renew in the same second forever (20 agents with 5000 connections:
    // all 5000 renewals in one second, every 60 s).
    delay = first ? random_.scale(params_.renewInterval, 0, 1)
                  : random_.scale(params_.renewInterval, 1 - jitter, 1 + jitter);
  }
  timers_.after(delay, [this] { renewAll(); });
}

void ConnectionTable::renewAll() {
  std::vector<LeaseEntry> batch;
  batch.reserve(connections_.size());
  for (const auto& [counter, connection] : connections_) {
    batch.push_back(LeaseEntry{connection.key, Epoch{connection.leaderToken, counter}});
  }
  if (!batch.empty()) store_.renew(identity_.name, batch);
  scheduleRenewal(false);
}

}  // namespace zkagent::presence
