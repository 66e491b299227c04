#include "zkagent/presence/connection_table.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace zkagent::presence {
ConnectionTable::ConnectionTable(Clock& clock, const Params& params, HolderIdentity identity,
                                 LeaseWriter& store, TimeoutHandler onTimeout,
                                 std::uint64_t runSeed)
    : timers_(clock),
      params_(params),
      identity_(std::move(identity)),
      store_(store),
      onTimeout_(std::move(onTimeout)),
      random_(identity_.name, runSeed) {
  validate(params_);
  if (identity_.name.empty()) throw std::invalid_argument("lease holder name must not be empty");
  if (params_.pingTimeout > Millis{0}) {
    // Deadlines are at most one ping timeout ahead of the last check: a lap of the wheel covers it.
    wheel_.resize(static_cast<std::size_t>(params_.pingTimeout / params_.checkInterval) + 2);
    checkedSlot_ = slotOf(timers_.now());
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
  const TimePoint now = timers_.now();
  connections_.emplace(epoch.connection, Connection{std::move(key), leaderToken, now});
  if (params_.pingTimeout > Millis{0}) schedule(epoch.connection, now + params_.pingTimeout);
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
  found->lastPing = timers_.now();
  return true;
}

std::int64_t ConnectionTable::slotOf(TimePoint t) const {
  return t.time_since_epoch() / params_.checkInterval;
}

void ConnectionTable::schedule(std::uint64_t counter, TimePoint deadline) {
  const std::int64_t slot = std::max(slotOf(deadline), checkedSlot_ + 1);
  wheel_[static_cast<std::size_t>(slot) % wheel_.size()].push_back(counter);
}

std::size_t ConnectionTable::scheduled() const {
  std::size_t entries = 0;
  for (const auto& slot : wheel_) entries += slot.size();
  return entries;
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
    connections_.erase(it);  // its schedule entry is skipped as unknown
  }
  byUser_.erase(owned);
  return released;
}

void ConnectionTable::crash() {
  timers_.cancelAll();
  connections_.clear();
  byUser_.clear();
  for (auto& slot : wheel_) slot.clear();
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
  const std::int64_t upTo = slotOf(now);
  const std::int64_t from = checkedSlot_ + 1;
  // A late check (a stalled loop, a clock jump) looks at each slot once: entries of a later lap
  // are looked at early and filed again.
  const std::int64_t last = std::min(upTo, from + static_cast<std::int64_t>(wheel_.size()) - 1);
  checkedSlot_ = std::max(checkedSlot_, upTo);
  std::vector<std::pair<TimePoint, std::uint64_t>> due;
  for (std::int64_t slot = from; slot <= last; ++slot) {
    examining_.clear();
    examining_.swap(wheel_[static_cast<std::size_t>(slot) % wheel_.size()]);
    for (std::uint64_t counter : examining_) {
      auto it = connections_.find(counter);
      if (it == connections_.end()) continue;
      const TimePoint deadline = it->second.lastPing + params_.pingTimeout;
      if (now > deadline) {
        due.emplace_back(it->second.lastPing, counter);
      } else {
        schedule(counter, deadline);
      }
    }
  }
  // Oldest silence first, as they fell silent.
  std::sort(due.begin(), due.end());
  // The timeout handler may close connections or even crash the table: look each one up again.
  for (const auto& [pingedAt, counter] : due) {
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
