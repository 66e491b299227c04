#include "lease_queue.hpp"

#include <stdexcept>

namespace zkagent::agent::detail {

LeaseQueue::LeaseQueue(std::size_t capacity) : capacity_(capacity) {
  if (capacity_ == 0) throw std::invalid_argument("lease queue capacity must be at least 1");
}

bool LeaseQueue::removalQueued(const presence::LeaseEntry& entry) const {
  auto [first, last] = removed_.equal_range(entry.key);
  for (auto it = first; it != last; ++it) {
    if (it->second == entry.epoch) return true;
  }
  return false;
}

void LeaseQueue::dropRenewal(Renewals::iterator it) {
  renewalOf_.erase(it->key);
  renewals_.erase(it);
}

LeaseQueue::Removals::iterator LeaseQueue::dropRemoval(Removals::iterator it) {
  auto [first, last] = removed_.equal_range(it->entry.key);
  for (auto at = first; at != last; ++at) {
    if (at->second == it->entry.epoch) {
      removed_.erase(at);
      break;
    }
  }
  return removals_.erase(it);
}

bool LeaseQueue::makeRoom(bool forRenewal, LeaseDrops& drops) {
  if (!renewals_.empty()) {
    dropRenewal(renewals_.begin());
    ++drops.renewals;
    return true;
  }
  if (forRenewal) return false;
  dropRemoval(removals_.begin());
  ++drops.removals;
  return true;
}

LeaseDrops LeaseQueue::renew(const presence::LeaseEntry& entry) {
  LeaseDrops drops;
  if (removalQueued(entry)) return drops;  // the connection is gone
  if (auto it = renewalOf_.find(entry.key); it != renewalOf_.end()) {
    // Coalesced: the newer epoch's renewal takes the older one's place in the line.
    if (it->second->epoch < entry.epoch) it->second->epoch = entry.epoch;
    return drops;
  }
  if (size() >= capacity_ && !makeRoom(true, drops)) {
    ++drops.renewals;
    return drops;
  }
  renewals_.push_back(entry);
  renewalOf_.emplace(entry.key, std::prev(renewals_.end()));
  return drops;
}

LeaseDrops LeaseQueue::remove(QueuedRemoval removal) {
  LeaseDrops drops;
  if (removalQueued(removal.entry)) return drops;
  if (auto it = renewalOf_.find(removal.entry.key);
      it != renewalOf_.end() && it->second->epoch == removal.entry.epoch) {
    dropRenewal(it->second);  // superseded: the removal takes its place
  }
  if (size() >= capacity_) makeRoom(false, drops);
  removed_.emplace(removal.entry.key, removal.entry.epoch);
  removals_.push_back(std::move(removal));
  return drops;
}

LeaseDrops LeaseQueue::requeue(std::vector<QueuedRemoval> removals) {
  LeaseDrops drops;
  for (auto it = removals.rbegin(); it != removals.rend(); ++it) {
    if (removalQueued(it->entry)) continue;
    if (auto renewal = renewalOf_.find(it->entry.key);
        renewal != renewalOf_.end() && renewal->second->epoch == it->entry.epoch) {
      dropRenewal(renewal->second);
    }
    if (size() >= capacity_ && !makeRoom(true, drops)) {
      // Only removals queued, and this one would be the oldest of them: it is the one to drop.
      ++drops.removals;
      continue;
    }
    removed_.emplace(it->entry.key, it->entry.epoch);
    removals_.push_front(std::move(*it));
  }
  return drops;
}

LeaseBatch LeaseQueue::take(std::size_t max,
                            const std::function<bool(const presence::LeaseEntry&)>& keep,
                            LeaseDrops& refused) {
  LeaseBatch batch;
  auto takeRenewal = [&](Renewals::iterator it) {
    presence::LeaseEntry entry = *it;
    dropRenewal(it);
    if (keep(entry)) {
      batch.renew.push_back(std::move(entry));
    } else {
      ++refused.renewals;
    }
  };
  while (batch.size() < max && !removals_.empty()) {
    QueuedRemoval removal = removals_.front();
    dropRemoval(removals_.begin());
    if (!keep(removal.entry)) {
      ++refused.removals;
      continue;
    }
    const presence::DeviceKey key = removal.entry.key;
    batch.remove.push_back(std::move(removal));
    // The same device's newer connection rides along, so the gateway never sees it offline.
    if (auto it = renewalOf_.find(key); it != renewalOf_.end() && batch.size() < max) {
      takeRenewal(it->second);
    }
  }
  while (batch.size() < max && !renewals_.empty()) takeRenewal(renewals_.begin());
  return batch;
}

void LeaseQueue::clear() {
  renewals_.clear();
  removals_.clear();
  renewalOf_.clear();
  removed_.clear();
}

}  // namespace zkagent::agent::detail
