#include "zkagent/presence/leases.hpp"

#include <functional>

namespace zkagent::presence {

std::size_t DeviceKeyHash::operator()(const DeviceKey& key) const {
  const std::size_t user = std::hash<std::string>{}(key.user);
  return user ^
         (std::hash<std::string>{}(key.device) + 0x9e3779b97f4a7c15ULL + (user << 6) + (user >> 2));
}

std::string_view toString(LeaveReason reason) {
  switch (reason) {
    case LeaveReason::Close:
      return "close";
    case LeaveReason::PingTimeout:
      return "ping_timeout";
    case LeaveReason::LeaseExpired:
      return "lease_expired";
  }
  return "unknown";
}

LeaseStore::LeaseStore(Clock& clock, const Params& params, ChangeHandler onChange)
    : timers_(clock), params_(params), onChange_(std::move(onChange)) {
  validate(params_);
  timers_.after(params_.sweepInterval, [this] { sweep(); });
}

void LeaseStore::renew(std::string_view holder, std::span<const LeaseEntry> entries) {
  const TimePoint now = timers_.now();
  for (const LeaseEntry& entry : entries) {
    if (auto removed = removed_.find(entry.key);
        removed != removed_.end() && entry.epoch <= removed->second.epoch) {
      ++counters_.staleRenewalsRejected;
      continue;
    }
    auto [it, created] = leases_.try_emplace(entry.key);
    Lease& lease = it->second;
    if (!created && entry.epoch < lease.epoch) {
      ++counters_.staleRenewalsRejected;
      continue;
    }
    lease.epoch = entry.epoch;
    if (lease.holder != holder) lease.holder = holder;
    lease.expires = now + params_.leaseTtl;
    expiries_.emplace_back(lease.expires, entry.key);
    ++counters_.renewalsAccepted;
    if (created) {
      devicesByUser_[entry.key.user].insert(entry.key.device);
      if (onChange_) onChange_(DeviceChange{it->first, true, LeaveReason::Close, now});
    }
  }
}

void LeaseStore::remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) {
  auto it = leases_.find(key);
  if (it == leases_.end() || it->second.epoch != epoch) {
    ++counters_.rejectedStale;
    return;
  }
  const TimePoint now = timers_.now();
  // Renewals sent before this removal may still be in flight; the tombstone outlives them.
  removed_[key] = Tombstone{epoch, now + params_.leaseTtl};
  forgets_.emplace_back(now + params_.leaseTtl, key);
  const DeviceKey removedKey = it->first;
  leases_.erase(it);
  forget(removedKey);
  ++counters_.removals;
  if (onChange_) onChange_(DeviceChange{removedKey, false, reason, now});
}

const Lease* LeaseStore::find(const DeviceKey& key) const {
  auto it = leases_.find(key);
  return it == leases_.end() ? nullptr : &it->second;
}

void LeaseStore::forEachLeaseOf(
    std::string_view user, const std::function<void(const DeviceKey&, const Lease&)>& fn) const {
  auto devices = devicesByUser_.find(std::string(user));
  if (devices == devicesByUser_.end()) return;
  DeviceKey key{devices->first, {}};
  for (const std::string& device : devices->second) {
    key.device = device;
    if (auto it = leases_.find(key); it != leases_.end()) fn(it->first, it->second);
  }
}

void LeaseStore::forget(const DeviceKey& key) {
  auto devices = devicesByUser_.find(key.user);
  if (devices == devicesByUser_.end()) return;
  devices->second.erase(key.device);
  if (devices->second.empty()) devicesByUser_.erase(devices);
}

void LeaseStore::sweep() {
  const TimePoint now = timers_.now();
  for (; !expiries_.empty() && expiries_.front().first <= now; expiries_.pop_front()) {
    const DeviceKey& key = expiries_.front().second;
    auto it = leases_.find(key);
    if (it == leases_.end() || it->second.expires > now) continue;  // renewed or removed since
    leases_.erase(it);
    forget(key);
    ++counters_.leaseExpirations;
    if (onChange_) onChange_(DeviceChange{key, false, LeaveReason::LeaseExpired, now});
  }
  for (; !forgets_.empty() && forgets_.front().first <= now; forgets_.pop_front()) {
    auto it = removed_.find(forgets_.front().second);
    if (it != removed_.end() && it->second.forgetAt <= now) removed_.erase(it);
  }
  timers_.after(params_.sweepInterval, [this] { sweep(); });
}

}  // namespace zkagent::presence
