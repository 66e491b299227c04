// The store side of layer 2: leases per device with epochs, renewed in batches by the leader agent
// that holds the device's connection, and swept when they expire,
// so a crashed agent's devices go offline without its help. A renewal is accepted only if its epoch
// is not below the current one, a removal only if it is equal.
#pragma once

#include <compare>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/params.hpp"

namespace zkagent::presence {

// Orders connections across leaders: first the fencing token of the leader that accepted the
// connection, then that leader's own connection counter. A new leader's token is higher, so its
// connections outrank every connection of an old leader however late the old one's messages come.
struct Epoch {
  std::uint64_t leaderToken = 0;
  std::uint64_t connection = 0;
  auto operator<=>(const Epoch&) const = default;
};

struct DeviceKey {
  std::string user;
  std::string device;
  bool operator==(const DeviceKey&) const = default;
};

struct DeviceKeyHash {
  std::size_t operator()(const DeviceKey& key) const;
};

struct LeaseEntry {
  DeviceKey key;
  Epoch epoch;
};

enum class LeaveReason { Close, PingTimeout, LeaseExpired };
std::string_view toString(LeaveReason reason);

// What a leader agent sends to the store. In process it is the LeaseStore itself; across the
// network it is a client of the fencing-gateway.
class LeaseWriter {
 public:
  virtual ~LeaseWriter() = default;
  // Creates or extends the leases of `entries`, all held by `holder`, the instance id of the
  // leader agent that renews them (one request per batch).
  virtual void renew(std::string_view holder, std::span<const LeaseEntry> entries) = 0;
  // Ends the lease of `key` if `epoch` is still its current epoch.
  virtual void remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) = 0;
};

// A device appearing in or disappearing from the store.
struct DeviceChange {
  const DeviceKey& key;
  bool online;
  LeaveReason reason;  // meaningful only when !online
  TimePoint at;
};

struct Lease {
  Epoch epoch;
  std::string holder;  // the instance id of the agent whose renewals hold it
  TimePoint expires;
};

struct LeaseCounters {
  std::uint64_t renewalsAccepted = 0;
  std::uint64_t staleRenewalsRejected = 0;  // epoch below the current lease or a removed epoch
  std::uint64_t rejectedStale = 0;          // removals whose epoch is not the current one
  std::uint64_t removals = 0;
  std::uint64_t leaseExpirations = 0;
};

class LeaseStore final : public LeaseWriter {
 public:
  using ChangeHandler = std::function<void(const DeviceChange&)>;

  // Starts sweeping at once. Throws std::invalid_argument for invalid params.
  LeaseStore(Clock& clock, const Params& params, ChangeHandler onChange);

  // Accepts an entry only if its epoch is >= the current lease's and above the last removed epoch
  // of that device (so a batch that crossed a close in flight cannot resurrect the lease).
  void renew(std::string_view holder, std::span<const LeaseEntry> entries) override;
  // Only an equal epoch removes: a late close from an older connection counts in rejectedStale.
  void remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) override;

  const Lease* find(const DeviceKey& key) const;
  // Calls `fn` for each current lease of `user`, in no particular order (for a per-account read
  // such as the gateway's GET /v1/presence/{account}).
  void forEachLeaseOf(std::string_view user,
                      const std::function<void(const DeviceKey&, const Lease&)>& fn) const;
  std::size_t size() const { return leases_.size(); }
  const LeaseCounters& counters() const { return counters_; }

 private:
  struct Tombstone {
    Epoch epoch;
    TimePoint forgetAt;
  };
  // (deadline, key) in deadline order: every deadline is now + a constant, so appending keeps the
  // order and a sweep touches only what is due instead of every lease. An entry whose lease was
  // renewed or removed since is skipped when it comes up.
  using DeadlineQueue = std::deque<std::pair<TimePoint, DeviceKey>>;

  void sweep();
  void forget(const DeviceKey& key);  // a lease ended: drop it from devicesByUser_

  TimerScope timers_;
  Params params_;
  ChangeHandler onChange_;
  std::unordered_map<DeviceKey, Lease, DeviceKeyHash> leases_;
  // Devices with a lease, by user: touched only when a lease starts or ends, not on renewal.
  std::unordered_map<std::string, std::unordered_set<std::string>> devicesByUser_;
  std::unordered_map<DeviceKey, Tombstone, DeviceKeyHash> removed_;
  DeadlineQueue expiries_;
  DeadlineQueue forgets_;
  LeaseCounters counters_;
};

}  // namespace zkagent::presence
