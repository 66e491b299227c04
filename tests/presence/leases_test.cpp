// The lease store and its epochs: a renewal is accepted only if its epoch is not below the current
// one, a removal only if equal; epochs order by the leader's fencing token first.
#include <gtest/gtest.h>

#include "scenario.hpp"

namespace zkagent::presence::testing {
namespace {

struct StoreWorld {
  StoreWorld()
      : store(clock, Params{}, [this](const DeviceChange& change) {
          changes.push_back({change.key.device, change.online, change.reason});
        }) {}
  void renew(const std::string& gateway, Epoch epoch) {
    const LeaseEntry entry{key, epoch};
    store.renew(gateway, std::span(&entry, 1));
  }

  struct Change {
    std::string device;
    bool online;
    LeaveReason reason;
  };
  VirtualClock clock;
  std::vector<Change> changes;
  LeaseStore store;
  DeviceKey key{"alice", "phone"};
};

TEST(Epoch, OrdersByLeaderTokenBeforeTheConnectionCounter) {
  EXPECT_LT((Epoch{1, 1000}), (Epoch{2, 1}));
  EXPECT_LT((Epoch{2, 1}), (Epoch{2, 2}));
  // Equal only when both parts are: neither is before the other.
  EXPECT_FALSE((Epoch{3, 4}) < (Epoch{3, 4}));
  EXPECT_NE((Epoch{3, 4}), (Epoch{3, 5}));
  EXPECT_NE((Epoch{3, 4}), (Epoch{4, 4}));
}

TEST(LeaseStore, FirstRenewalCreatesTheLeaseAndReportsTheDeviceOnline) {
  StoreWorld world;
  world.renew("a", {1, 1});
  const Lease* lease = world.store.find(world.key);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->holder, "a");
  EXPECT_EQ(lease->expires, at(150));
  ASSERT_EQ(world.changes.size(), 1u);
  EXPECT_TRUE(world.changes[0].online);
  world.renew("a", {1, 1});
  EXPECT_EQ(world.changes.size(), 1u);  // an extension is no change
}

TEST(LeaseStore, RenewalWithALowerEpochIsRejectedAndChangesNothing) {
  StoreWorld world;
  world.renew("new", {2, 1});
  world.clock.runUntil(at(30));
  world.renew("old", {1, 7});
  EXPECT_EQ(world.store.counters().staleRenewalsRejected, 1u);
  EXPECT_EQ(world.store.find(world.key)->holder, "new");
  EXPECT_EQ(world.store.find(world.key)->expires, at(150));
}

TEST(LeaseStore, RemovalNeedsTheCurrentEpochExactly) {
  StoreWorld world;
  world.renew("a", {1, 2});
  world.store.remove(world.key, {1, 1}, LeaveReason::Close);
  world.store.remove(world.key, {1, 3}, LeaveReason::Close);
  EXPECT_EQ(world.store.counters().rejectedStale, 2u);
  ASSERT_NE(world.store.find(world.key), nullptr);
  world.store.remove(world.key, {1, 2}, LeaveReason::Close);
  EXPECT_EQ(world.store.find(world.key), nullptr);
  ASSERT_EQ(world.changes.size(), 2u);
  EXPECT_FALSE(world.changes[1].online);
  EXPECT_EQ(world.changes[1].reason, LeaveReason::Close);
}

TEST(LeaseStore, RenewalThatCrossedAClosedConnectionInFlightDoesNotResurrectIt) {
  StoreWorld world;
  world.renew("a", {1, 1});
  world.store.remove(world.key, {1, 1}, LeaveReason::Close);
  world.renew("a", {1, 1});  // the batch was sent before the close
  EXPECT_EQ(world.store.find(world.key), nullptr);
  EXPECT_EQ(world.store.counters().staleRenewalsRejected, 1u);
  world.renew("a", {1, 2});  // a genuinely new connection is welcome
  EXPECT_NE(world.store.find(world.key), nullptr);
}

TEST(LeaseStore, SweepExpiresALeaseAtItsTtlAndNotBefore) {
  StoreWorld world;
  world.renew("a", {1, 1});
  world.clock.runUntil(at(149.999));
  EXPECT_NE(world.store.find(world.key), nullptr);
  world.clock.runUntil(at(150));
  EXPECT_EQ(world.store.find(world.key), nullptr);
  EXPECT_EQ(world.store.counters().leaseExpirations, 1u);
  EXPECT_EQ(world.changes.back().reason, LeaveReason::LeaseExpired);
}

TEST(CrossLeader, LateOfflineFromAnOldLeaderNeverRemovesTheNewLeadersLease) {
  Scenario world(withoutHeartbeats());  // world.gateway is leadership 1 of the account
  for (int i = 0; i < 999; ++i) world.gateway.connect({"other-" + std::to_string(i), "phone"});
  const Epoch oldConnection = world.gateway.connect({"alice", "phone"});
  ASSERT_EQ(oldConnection.connection, 1000u);
  // Leadership moves to token 2; its connection counter starts again at 1.
  ConnectionTable successor(world.clock, world.params, {"gateway-b", 2}, world.service.leases());
  const Epoch newConnection = successor.connect({"alice", "phone"});
  ASSERT_EQ(newConnection.connection, 1u);

  world.runUntil(200);  // the old leader keeps renewing its (stale) entry meanwhile
  EXPECT_TRUE(world.gateway.close(oldConnection));
  const Lease* lease = world.service.leases().find({"alice", "phone"});
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->holder, "gateway-b");
  EXPECT_EQ(lease->epoch, newConnection);
  EXPECT_EQ(world.service.leases().counters().rejectedStale, 1u);
  EXPECT_GT(world.service.leases().counters().staleRenewalsRejected, 0u);
  EXPECT_EQ(world.changesOf("alice").size(), 1u);
}

// A table on the default params (ping timeout 75 s, checked every 5 s) recording its timeouts.
struct TimeoutWorld {
  Params params;
  VirtualClock clock;
  PresenceService service{clock, params};
  std::vector<std::pair<Epoch, TimePoint>> timedOut;
  ConnectionTable gateway{
      clock, params, {"gateway-a", 1}, service.leases(), [this](const DeviceKey&, Epoch epoch) {
        timedOut.emplace_back(epoch, clock.now());
      }};
};

TEST(ConnectionTable, TimedOutConnectionIsRemovedAndReportedToItsOwner) {
  TimeoutWorld world;
  const Epoch silent = world.gateway.connect({"alice", "phone"});
  world.clock.runUntil(at(75));
  EXPECT_TRUE(world.timedOut.empty());  // 75 s without a ping is not yet more than the timeout
  world.clock.runUntil(at(80));
  ASSERT_EQ(world.timedOut.size(), 1u);
  EXPECT_EQ(world.timedOut[0].first, silent);
  EXPECT_FALSE(world.gateway.ping(silent));
  EXPECT_EQ(world.service.leases().find({"alice", "phone"}), nullptr);
}

// A device that pings as fast as it can costs the table nothing more than a quiet one: the timeout
// schedule keeps one entry per connection (it kept one per ping, for a whole ping timeout), and
// the flooding connection still times out once it stops while the quiet one stays.
TEST(ConnectionTable, APingFloodDoesNotGrowTheTimeoutSchedule) {
  TimeoutWorld world;
  auto& gateway = world.gateway;
  const Epoch flood = gateway.connect({"alice", "phone"});
  const Epoch quiet = gateway.connect({"bob", "phone"});
  // 70 000 pings over 70 virtual seconds from one device, one every 30 s from the other.
  for (int ms = 10; ms <= 70'000; ms += 10) {
    world.clock.runFor(Millis{10});
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(gateway.ping(flood));
    }
    if (ms % 30'000 == 0) {
      ASSERT_TRUE(gateway.ping(quiet));
    }
  }
  EXPECT_LE(gateway.scheduled(), 2u);
  // The flood stops; the quiet device goes on pinging every 30 s.
  for (int s = 1; s <= 90 && world.timedOut.empty(); ++s) {
    world.clock.runFor(Millis{1000});
    if (s % 30 == 0) gateway.ping(quiet);
  }
  ASSERT_EQ(world.timedOut.size(), 1u);
  EXPECT_EQ(world.timedOut[0].first, flood);
  EXPECT_TRUE(gateway.ping(quiet));
  EXPECT_EQ(gateway.scheduled(), 1u);
}

// The deadline is the same as without the wheel: more than pingTimeout after the last ping, at
// the first check after it, whichever slot the connection was filed in before.
TEST(ConnectionTable, AConnectionThatPingedLateTimesOutAtTheFirstCheckPastItsNewDeadline) {
  TimeoutWorld world;
  const Epoch phone = world.gateway.connect({"alice", "phone"});
  world.clock.runUntil(at(74));
  ASSERT_TRUE(world.gateway.ping(phone));  // deadline now 74 + 75 = 149 s
  world.clock.runUntil(at(149));
  EXPECT_TRUE(world.timedOut.empty());
  world.clock.runUntil(at(160));
  ASSERT_EQ(world.timedOut.size(), 1u);
  EXPECT_EQ(world.timedOut[0].second, at(150));  // the check at 150 s: 76 s of silence
}

TEST(ConnectionTable, TimeoutHandlerMayCrashTheTableWithoutBreakingTheCheck) {
  Params params;
  VirtualClock clock;
  PresenceService service(clock, params);
  std::unique_ptr<ConnectionTable> gateway;
  int timeouts = 0;
  gateway = std::make_unique<ConnectionTable>(clock, params, HolderIdentity{"gateway-a", 1},
                                              service.leases(), [&](const DeviceKey&, Epoch) {
                                                ++timeouts;
                                                gateway->crash();
                                              });
  gateway->connect({"alice", "phone"});
  gateway->connect({"bob", "phone"});
  clock.runUntil(at(1000));
  EXPECT_EQ(timeouts, 1);  // the crash dropped bob before his turn
  EXPECT_EQ(gateway->size(), 0u);
  EXPECT_EQ(clock.pending(), 1u);  // only the store's sweep is still scheduled
}

TEST(ConnectionTable, CrashedGatewaySendsNothingMoreAndRefusesConnections) {
  Scenario world;
  const Epoch phone = world.gateway.connect({"alice", "phone"});
  world.gateway.crash();
  const std::size_t batches = world.renewals.batchTimes.size();
  world.runUntil(1000);
  EXPECT_EQ(world.renewals.batchTimes.size(), batches);
  EXPECT_FALSE(world.gateway.ping(phone));
  EXPECT_THROW(world.gateway.connect({"bob", "phone"}), std::logic_error);
}

TEST(ConnectionTable, DisabledPingTimeoutKeepsSilentConnectionsAlive) {
  Scenario world(withoutHeartbeats());
  world.device("alice").connect(world.gateway);  // sends no heartbeats at all
  world.runUntil(3600);
  EXPECT_EQ(world.gateway.size(), 1u);
  EXPECT_EQ(world.changesOf("alice").size(), 1u);
}

TEST(ConnectionTable, OneTableServesManyLeadershipsEachWithItsOwnTokenInOneRenewalBatch) {
  Scenario world(withoutHeartbeats());
  const Epoch alice = world.gateway.connect({"alice", "phone"}, 7);
  const Epoch bob = world.gateway.connect({"bob", "phone"}, 3);
  EXPECT_EQ(alice.leaderToken, 7u);
  EXPECT_EQ(bob.leaderToken, 3u);
  EXPECT_LT(alice.connection, bob.connection);
  EXPECT_FALSE(world.gateway.ping(Epoch{3, alice.connection}));  // the token is part of the id
  const std::size_t before = world.renewals.batchTimes.size();
  world.runUntil(61);  // the first renewal falls within one interval
  EXPECT_EQ(world.renewals.batchTimes.size(), before + 1);  // both accounts in one batch
  world.runUntil(400);  // past the TTL: only renewals under each account's own token kept them
  ASSERT_NE(world.service.leases().find({"alice", "phone"}), nullptr);
  ASSERT_NE(world.service.leases().find({"bob", "phone"}), nullptr);
  EXPECT_EQ(world.service.leases().find({"alice", "phone"})->epoch, alice);
  EXPECT_EQ(world.service.leases().find({"bob", "phone"})->epoch, bob);
  EXPECT_EQ(world.service.leases().counters().staleRenewalsRejected, 0u);
}

TEST(ConnectionTable, ReleasedLeadershipWritesNothingMoreForItsConnections) {
  Scenario world(withoutHeartbeats());
  const Epoch alicePhone = world.gateway.connect({"alice", "phone"}, 7);
  const Epoch aliceLaptop = world.gateway.connect({"alice", "laptop"}, 7);
  world.gateway.connect({"bob", "phone"}, 3);
  const auto released = world.gateway.release("alice");
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(world.gateway.size(), 1u);
  EXPECT_FALSE(world.gateway.close(alicePhone));  // gone from the table, and no removal sent
  EXPECT_FALSE(world.gateway.ping(aliceLaptop));
  EXPECT_EQ(world.service.leases().counters().removals, 0u);
  EXPECT_TRUE(world.gateway.release("alice").empty());
  world.runUntil(200);  // renewals go on for bob only: alice's leases expire after their TTL
  EXPECT_EQ(world.service.leases().find({"alice", "phone"}), nullptr);
  EXPECT_NE(world.service.leases().find({"bob", "phone"}), nullptr);
}

}  // namespace
}  // namespace zkagent::presence::testing
