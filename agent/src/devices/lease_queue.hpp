// The lease writer's queue (lease_writer.hpp): the lease writes the connection table made that
// have not left for the gateway yet, coalesced per device and bounded. No I/O: the writer owns
// one and runs it on the device endpoint's thread.
//
// Coalescing. The gateway keeps one lease per device, the highest epoch, so per device at most
// one renewal is queued: the highest epoch's (a lower one adds nothing). A removal of (device,
// epoch) replaces that epoch's queued renewal, and a renewal of a connection whose removal is
// queued is ignored: a removal never travels behind its own renewal. A renewal of a newer epoch
// stays queued beside the older epoch's removal, and the two leave in that order (take()).
//
// Order. take() hands out removals first, each with its device's queued renewal when there is
// room, then renewals, oldest first: after a gateway outage the devices that left go offline
// before anything else is renewed (renewals come again with every tick anyway). The gateway
// applies a batch's renewals before its removals, so a removal and the newer epoch's renewal of
// one device in one batch end with the device online.
//
// Bound. At most `capacity` entries. A write that finds the queue full makes room by dropping the
// oldest queued renewal; only when no renewal is queued is the oldest removal dropped (its lease
// then ends at the gateway after the TTL), and a renewal that finds only removals is dropped
// itself. Every drop is counted in the returned Drops.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

#include "zkagent/presence/leases.hpp"

namespace zkagent::agent::detail {

struct QueuedRemoval {
  presence::LeaseEntry entry;
  presence::LeaveReason reason;
};

// Entries dropped by one call, by kind.
struct LeaseDrops {
  std::size_t renewals = 0, removals = 0;
  LeaseDrops& operator+=(const LeaseDrops& other) {
    renewals += other.renewals;
    removals += other.removals;
    return *this;
  }
};

struct LeaseBatch {
  std::vector<presence::LeaseEntry> renew;
  std::vector<QueuedRemoval> remove;
  std::size_t size() const { return renew.size() + remove.size(); }
};

class LeaseQueue {
 public:
  // Throws std::invalid_argument for a capacity of 0.
  explicit LeaseQueue(std::size_t capacity);

  LeaseDrops renew(const presence::LeaseEntry& entry);
  LeaseDrops remove(QueuedRemoval removal);
  // Removals of a failed batch go back ahead of everything queued, in their order.
  LeaseDrops requeue(std::vector<QueuedRemoval> removals);

  // Takes up to `max` entries (see the order above). An entry `keep` refuses leaves the queue
  // without being taken and is counted in `refused`.
  LeaseBatch take(std::size_t max, const std::function<bool(const presence::LeaseEntry&)>& keep,
                  LeaseDrops& refused);

  void clear();
  std::size_t size() const { return renewals_.size() + removals_.size(); }
  bool empty() const { return size() == 0; }
  std::size_t renewals() const { return renewals_.size(); }
  std::size_t removals() const { return removals_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  using Renewals = std::list<presence::LeaseEntry>;
  using Removals = std::list<QueuedRemoval>;

  // Makes room for one more entry; false when the newcomer is a renewal and only removals are
  // queued (the renewal is the one to drop then).
  bool makeRoom(bool forRenewal, LeaseDrops& drops);
  void dropRenewal(Renewals::iterator it);
  Removals::iterator dropRemoval(Removals::iterator it);
  bool removalQueued(const presence::LeaseEntry& entry) const;

  const std::size_t capacity_;
  Renewals renewals_;  // oldest first
  Removals removals_;  // in the order they are to leave
  std::unordered_map<presence::DeviceKey, Renewals::iterator, presence::DeviceKeyHash> renewalOf_;
  // The epochs whose removal is queued, per device (almost always one).
  std::unordered_multimap<presence::DeviceKey, presence::Epoch, presence::DeviceKeyHash> removed_;
};

}  // namespace zkagent::agent::detail
