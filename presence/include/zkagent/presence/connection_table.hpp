// The leader agent's side of layers 1 and 2 (the agent is the devices' gateway): one entry per
// device connection with its last heartbeat and epoch, a timeout check every checkInterval, and a
// batched, jittered renewal of every connection's lease every renewInterval.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/leases.hpp"
#include "zkagent/presence/params.hpp"
#include "zkagent/presence/stable_random.hpp"

namespace zkagent::presence {

// Who holds the table's leases: the leader agent's instance id (in the presence model's terms the
// agent is the devices' gateway; nothing here is the fencing-gateway).
struct HolderIdentity {
  std::string name;  // seeds the renewal jitter (CRC32), names the lease holder
  // Fencing token for connect(key): a table that lives under one leadership. An agent leading
  // many accounts passes each account's own token to connect(key, token) instead.
  std::uint64_t leaderToken;
};

class ConnectionTable {
 public:
  // Called after a connection timed out and its lease removal was sent; the owner closes the
  // socket.
  using TimeoutHandler = std::function<void(const DeviceKey&, Epoch)>;

  // Starts the timeout check and the renewal schedule at once. `runSeed` varies the jitter between
  // experiment runs; the holder's name alone fixes it otherwise. Throws std::invalid_argument for
  // invalid params or an empty holder name.
  ConnectionTable(Clock& clock, const Params& params, HolderIdentity identity, LeaseWriter& store,
                  TimeoutHandler onTimeout = {}, std::uint64_t runSeed = 0);

  // Registers a new connection and announces its lease at once; the returned epoch identifies it.
  // Throws std::logic_error after crash().
  Epoch connect(DeviceKey key) { return connect(std::move(key), identity_.leaderToken); }
  // The same under the leadership whose fencing token is `leaderToken` (the account's, key.user).
  Epoch connect(DeviceKey key, std::uint64_t leaderToken);
  // Records a heartbeat; false if the connection is unknown (closed, timed out, or crashed).
  bool ping(Epoch connection);
  // The device closed the connection: its lease is removed at once. False if unknown.
  bool close(Epoch connection);
  // The leadership of `user`'s account is gone: its connections are forgotten at once and nothing
  // more is written for them, not even a removal (the new leader's higher epochs take the leases
  // over; leases nobody takes over expire). Returns them so the owner can close the sockets.
  std::vector<LeaseEntry> release(const std::string& user);
  // Models the whole agent dying: every timer stops and nothing more reaches the store.
  void crash();

  std::size_t size() const { return connections_.size(); }
  const HolderIdentity& identity() const { return identity_; }
  // Entries of the timeout schedule: at most one per connection that existed within the last
  // ping timeout, however often each pings (read by tests).
  std::size_t scheduled() const;

 private:
  struct Connection {
    DeviceKey key;
    std::uint64_t leaderToken;
    TimePoint lastPing;
  };

  Connection* find(Epoch connection);
  std::int64_t slotOf(TimePoint t) const;
  // Files the connection under the check slot of `deadline`, or the next unchecked slot.
  void schedule(std::uint64_t counter, TimePoint deadline);
  void end(std::uint64_t counter, LeaveReason reason);
  void checkTimeouts();
  void scheduleRenewal(bool first);
  void renewAll();

  TimerScope timers_;
  Params params_;
  HolderIdentity identity_;
  LeaseWriter& store_;
  TimeoutHandler onTimeout_;
  StableRandom random_;
  std::uint64_t lastCounter_ = 0;
  bool crashed_ = false;
  std::unordered_map<std::uint64_t, Connection> connections_;  // by Epoch::connection
  // Epoch::connection of every connection, by user, so release() touches only that account.
  std::unordered_map<std::string, std::unordered_set<std::uint64_t>> byUser_;
  // The timeout schedule, a wheel of checkInterval-wide slots: each connection sits in the slot of
  // its deadline as of when it was filed (last ping + pingTimeout). A ping only moves lastPing; a
  // check looks at the slots that came due and files the connections that pinged since under
  // their new deadline. So a check touches only connections that may be due, and the schedule
  // holds one entry per connection, not one per ping (a ping flood used to grow it by an entry a
  // ping, kept for a whole ping timeout). A closed connection's entry goes when its slot comes.
  std::vector<std::vector<std::uint64_t>> wheel_;
  std::int64_t checkedSlot_ = 0;          // every slot up to this one has been looked at
  std::vector<std::uint64_t> examining_;  // the slot being looked at (its capacity is reused)
};

}  // namespace zkagent::presence
