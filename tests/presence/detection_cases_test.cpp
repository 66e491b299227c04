// The detection cases on the virtual clock with the default parameters: close, one lost heartbeat,
// several devices, reconnect within the debounce, late offline from an old epoch, half-open, agent
// crash (lower and upper bound), jitter after a mass restart, and TTL < renewal (negative control).
#include <gtest/gtest.h>

#include "experiments.hpp"
#include "scenario.hpp"

namespace zkagent::presence::testing {
namespace {

using Seconds = std::chrono::seconds;

// Delays removals of `store` by a fixed time, as a slow network would.
class LateRemovals final : public LeaseWriter {
 public:
  LateRemovals(Clock& clock, LeaseWriter& store, Millis delay)
      : timers_(clock), store_(store), delay_(delay) {}
  void renew(std::string_view holder, std::span<const LeaseEntry> entries) override {
    store_.renew(holder, entries);
  }
  void remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) override {
    timers_.after(delay_, [this, key, epoch, reason] { store_.remove(key, epoch, reason); });
  }

 private:
  TimerScope timers_;
  LeaseWriter& store_;
  Millis delay_;
};

TEST(DetectionCases, ActiveCloseAt300sIsPublishedAt320sExactlyTheDebounce) {
  Scenario world;
  SimulatedDevice& phone = world.device("alice");
  phone.connect(world.gateway);
  world.clock.scheduleAt(at(300), [&] { phone.close(); });

  world.runUntil(319.999);
  ASSERT_EQ(world.changesOf("alice").size(), 1u);  // only the first online
  world.runUntil(400);
  const auto changes = world.changesOf("alice");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[1].online);
  EXPECT_EQ(changes[1].at, at(320));
  EXPECT_EQ(world.service.leases().counters().removals, 1u);
}

TEST(DetectionCases, OneLostHeartbeatIsToleratedAndNeverPublishedOffline) {
  Scenario world;
  SimulatedDevice& phone = world.device("alice");
  phone.connect(world.gateway);
  world.clock.scheduleAt(at(100), [&] { phone.loseNextHeartbeat(); });
  world.clock.scheduleAt(at(400), [&] { phone.loseNextHeartbeat(); });

  world.runUntil(900);
  ASSERT_EQ(world.changesOf("alice").size(), 1u);
  EXPECT_TRUE(world.changesOf("alice")[0].online);
  EXPECT_EQ(world.gateway.size(), 1u);
  EXPECT_NE(world.service.leases().find({"alice", "phone"}), nullptr);
}

TEST(DetectionCases, TwoDevicesArePublishedOfflineOnlyTwentySecondsAfterTheLastLeaves) {
  Scenario world;
  SimulatedDevice& phone = world.device("alice", "phone");
  SimulatedDevice& laptop = world.device("alice", "laptop");
  phone.connect(world.gateway);
  laptop.connect(world.gateway);
  world.clock.scheduleAt(at(100), [&] { phone.close(); });
  world.clock.scheduleAt(at(200), [&] { laptop.close(); });

  world.runUntil(500);
  const auto changes = world.changesOf("alice");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_TRUE(changes[0].online);
  EXPECT_FALSE(changes[1].online);
  EXPECT_EQ(changes[1].at, at(220));
  EXPECT_EQ(world.service.view().counters().deviceFlaps, 4u);  // two ups, two downs
}

TEST(DetectionCases, ReconnectWithinTenSecondsOfCloseShowsTheSubscriberNothing) {
  Scenario world;
  world.service.privacy().addContact("alice", "bob");
  SimulatedDevice& phone = world.device("alice");
  phone.connect(world.gateway);
  world.runUntil(1);
  std::vector<ChangeEvent> seenByBob;
  world.service.subscriptions().subscribe(
      "bob", {"alice"}, [&](const ChangeEvent& event) { seenByBob.push_back(event); });
  world.clock.scheduleAt(at(300), [&] { phone.close(); });
  world.clock.scheduleAt(at(310), [&] { phone.connect(world.gateway); });

  world.runUntil(600);
  EXPECT_TRUE(seenByBob.empty());
  EXPECT_EQ(world.changesOf("alice").size(), 1u);
  EXPECT_EQ(world.service.view().counters().deviceFlaps, 3u);  // up, down, up again
}

TEST(DetectionCases, ComingBackVoidsThePendingOfflineSoLeavingAgainRestartsTheDebounce) {
  Scenario world;
  SimulatedDevice& phone = world.device("alice");
  phone.connect(world.gateway);
  world.clock.scheduleAt(at(300), [&] { phone.close(); });
  world.clock.scheduleAt(at(305), [&] { phone.connect(world.gateway); });
  world.clock.scheduleAt(at(310), [&] { phone.close(); });

  world.runUntil(600);
  const auto changes = world.changesOf("alice");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[1].online);
  EXPECT_EQ(changes[1].at, at(330));  // the timer of the first close (320) was voided
}

TEST(DetectionCases, LateOfflineFromOldGatewayIsRejectedAndTheLeaseStaysWithTheNewGateway) {
  Scenario world;
  // The device first sits on gateway "old" (leadership 1), whose removals arrive 30 s late.
  LateRemovals slowLink(world.clock, world.service.leases(), Seconds{30});
  ConnectionTable oldGateway(world.clock, world.params, {"old", 1}, slowLink);
  ConnectionTable newGateway(world.clock, world.params, {"new", 2}, world.service.leases());
  SimulatedDevice& phone = world.device("alice");
  phone.connect(oldGateway);
  world.clock.scheduleAt(at(100), [&] { phone.close(); });
  world.clock.scheduleAt(at(105), [&] { phone.connect(newGateway); });

  world.runUntil(129);
  EXPECT_EQ(world.service.leases().counters().rejectedStale, 0u);
  world.runUntil(400);
  EXPECT_EQ(world.service.leases().counters().rejectedStale, 1u);
  const Lease* lease = world.service.leases().find({"alice", "phone"});
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->holder, "new");
  EXPECT_EQ(world.changesOf("alice").size(), 1u);
}

TEST(DetectionCases, LateCloseFromOldEpochOnTheSameGatewayIsIgnored) {
  Scenario world;
  const Epoch first = world.gateway.connect({"alice", "phone"});
  const Epoch second = world.gateway.connect({"alice", "phone"});  // reconnected, old one lingers
  ASSERT_LT(first, second);

  EXPECT_TRUE(world.gateway.close(first));
  EXPECT_EQ(world.service.leases().counters().rejectedStale, 1u);
  const Lease* lease = world.service.leases().find({"alice", "phone"});
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->epoch, second);
}

TEST(DetectionCases, HalfOpenConnectionIsDetectedWithinTheBoundAndNotBeforeThePingTimeout) {
  Scenario world;
  SimulatedDevice& phone = world.device("alice");
  phone.connect(world.gateway);
  world.clock.scheduleAt(at(300), [&] { phone.goHalfOpen(); });

  world.runUntil(1000);
  const auto changes = world.changesOf("alice");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[1].online);
  EXPECT_LE(changes[1].at, at(300) + *bounds(world.params).halfOpen);
  // The last heartbeat was at most one interval before leaving.
  EXPECT_GE(changes[1].at, at(300) - world.params.heartbeatInterval + world.params.pingTimeout +
                               world.params.offlineDebounce);
}

TEST(DetectionCases, GatewayCrashIsDetectedByTheLeaseNeitherBeforeRenewalPlusTtlNorAfterTheBound) {
  Scenario world;
  for (int i = 0; i < 10; ++i) world.device("user-" + std::to_string(i)).connect(world.gateway);
  world.clock.scheduleAt(at(400), [&] { world.gateway.crash(); });

  world.runUntil(1000);
  for (int i = 0; i < 10; ++i) {
    const std::string user = "user-" + std::to_string(i);
    const auto changes = world.changesOf(user);
    ASSERT_EQ(changes.size(), 2u) << user;
    EXPECT_FALSE(changes[1].online);
    EXPECT_LE(changes[1].at, at(400) + bounds(world.params).gatewayCrash) << user;
    EXPECT_GE(changes[1].at, world.renewals.lastRenewal.at(user) + world.params.leaseTtl) << user;
  }
  EXPECT_EQ(world.service.leases().counters().leaseExpirations, 10u);
}

TEST(DetectionCases, JitterSpreadsTheRenewalsOfGatewaysThatRestartedTogether) {
  const experiments::RenewalPeak together = experiments::measureRenewalPeak(0, 0);
  const experiments::RenewalPeak spread = experiments::measureRenewalPeak(0.1, 0);
  EXPECT_EQ(together.peakPerSecond, 5000u);  // every agent renews in the same second
  EXPECT_LE(spread.peakPerSecond, 1250u);    // a few agents of 250 connections per second
  EXPECT_EQ(together.finalLeases, 5000u);
  EXPECT_EQ(spread.finalLeases, 5000u);
}

TEST(DetectionCases, TtlShorterThanRenewalFlapsDevicesWhileDebounceHidesItFromSubscribers) {
  const experiments::NegativeControl control = experiments::measureNegativeControl(0);
  EXPECT_EQ(control.leaseExpirations, 16u);
  EXPECT_EQ(control.publishedDebounce20, 1u);  // debounce hides every flap from subscribers...
  EXPECT_EQ(control.publishedDebounce0, 33u);
  EXPECT_EQ(control.deviceFlaps, 33u);  // ...but not from the device-level count
}

}  // namespace
}  // namespace zkagent::presence::testing
