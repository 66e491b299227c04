// Privacy trimming (exact / coarse / hidden; non-contacts and blocked viewers get no information)
// and the subscription contract (snapshot, then versioned change events, minute-granularity times).
#include <gtest/gtest.h>

#include "scenario.hpp"

namespace zkagent::presence::testing {
namespace {

// alice has a phone on the gateway; bob is her contact, mallory is blocked, eve is a stranger.
struct PrivacyWorld : Scenario {
  PrivacyWorld() {
    service.privacy().addContact("alice", "bob");
    service.privacy().addContact("alice", "mallory");
    service.privacy().block("alice", "mallory");
    phone.connect(gateway);
  }
  std::optional<VisibleStatus> seenBy(const std::string& viewer) {
    return service.privacy().trim(viewer, "alice", service.view().published("alice"), clock.now(),
                                  params.coarseRecentWindow);
  }
  SimulatedDevice& phone = device("alice");
};

TEST(Privacy, NonContactAndBlockedViewerGetNoInformationWhileAContactSeesOffline) {
  PrivacyWorld world;
  world.clock.scheduleAt(at(100), [&] { world.phone.close(); });
  world.runUntil(200);

  ASSERT_TRUE(world.seenBy("bob").has_value());
  EXPECT_EQ(world.seenBy("bob")->status, ShownStatus::Offline);
  EXPECT_FALSE(world.seenBy("eve").has_value());
  EXPECT_FALSE(world.seenBy("mallory").has_value());
  world.service.privacy().unblock("alice", "mallory");
  EXPECT_TRUE(world.seenBy("mallory").has_value());
  world.service.privacy().removeContact("alice", "bob");
  EXPECT_FALSE(world.seenBy("bob").has_value());
}

TEST(Privacy, StatusesAndLeaveReasonsHaveStableWireNames) {
  EXPECT_EQ(toString(ShownStatus::Online), "online");
  EXPECT_EQ(toString(ShownStatus::Offline), "offline");
  EXPECT_EQ(toString(ShownStatus::Recently), "recently");
  EXPECT_EQ(toString(ShownStatus::LongAgo), "long_ago");
  EXPECT_EQ(toString(ShownStatus::Unknown), "unknown");
  EXPECT_EQ(toString(LeaveReason::Close), "close");
  EXPECT_EQ(toString(LeaveReason::PingTimeout), "ping_timeout");
  EXPECT_EQ(toString(LeaveReason::LeaseExpired), "lease_expired");
}

TEST(Privacy, ExactShowsTheMinuteLastSeenNotTheSecond) {
  PrivacyWorld world;
  world.clock.scheduleAt(at(3725), [&] { world.phone.close(); });  // 62 min 5 s
  world.runUntil(3700);
  EXPECT_EQ(world.seenBy("bob"), (VisibleStatus{ShownStatus::Online, std::nullopt}));
  world.runUntil(4000);
  EXPECT_EQ(world.seenBy("bob"), (VisibleStatus{ShownStatus::Offline, 62}));
}

TEST(Privacy, CoarseSaysRecentlyForADayThenLongAgoAndHiddenAlwaysSaysUnknown) {
  PrivacyWorld world;
  world.service.privacy().setLevel("alice", PrivacyLevel::Coarse);
  world.runUntil(10);
  EXPECT_EQ(world.seenBy("bob")->status, ShownStatus::Online);
  world.clock.scheduleAt(at(100), [&] { world.phone.close(); });
  world.runUntil(200);
  EXPECT_EQ(world.seenBy("bob"), (VisibleStatus{ShownStatus::Recently, std::nullopt}));
  world.runUntil(100 + 86399);
  EXPECT_EQ(world.seenBy("bob")->status, ShownStatus::Recently);
  world.runUntil(100 + 86401);
  EXPECT_EQ(world.seenBy("bob")->status, ShownStatus::LongAgo);

  world.service.privacy().setLevel("alice", PrivacyLevel::Hidden);
  EXPECT_EQ(world.seenBy("bob"), (VisibleStatus{ShownStatus::Unknown, std::nullopt}));
  world.phone.connect(world.gateway);
  EXPECT_EQ(world.seenBy("bob"), (VisibleStatus{ShownStatus::Unknown, std::nullopt}));
  EXPECT_FALSE(world.seenBy("eve").has_value());
}

TEST(Subscriptions, SnapshotListsOnlyVisibleTargetsWithTheirVersion) {
  PrivacyWorld world;
  world.service.privacy().addContact("carol", "bob");  // carol never connected
  world.runUntil(10);

  const Subscribed bob = world.service.subscriptions().subscribe("bob", {"alice", "carol", "dave"},
                                                                 [](const ChangeEvent&) {});
  ASSERT_EQ(bob.snapshot.size(), 2u);  // dave is not visible to bob: absent, not offline
  EXPECT_EQ(bob.snapshot[0].target, "alice");
  EXPECT_EQ(bob.snapshot[0].status.status, ShownStatus::Online);
  EXPECT_EQ(bob.snapshot[0].version, 1u);
  EXPECT_EQ(bob.snapshot[1].target, "carol");
  EXPECT_EQ(bob.snapshot[1].status, (VisibleStatus{ShownStatus::Offline, std::nullopt}));
  EXPECT_EQ(bob.snapshot[1].version, 0u);

  const Subscribed eve =
      world.service.subscriptions().subscribe("eve", {"alice"}, [](const ChangeEvent&) {});
  EXPECT_TRUE(eve.snapshot.empty());
}

TEST(Subscriptions, ChangeEventsCarryIncreasingVersionsAndMinutesOnlyToViewersWhoMaySee) {
  PrivacyWorld world;
  world.runUntil(10);
  std::vector<ChangeEvent> bobEvents;
  std::vector<ChangeEvent> strangerEvents;
  world.service.subscriptions().subscribe(
      "bob", {"alice"}, [&](const ChangeEvent& event) { bobEvents.push_back(event); });
  world.service.subscriptions().subscribe(
      "eve", {"alice"}, [&](const ChangeEvent& event) { strangerEvents.push_back(event); });
  world.service.subscriptions().subscribe(
      "mallory", {"alice"}, [&](const ChangeEvent& event) { strangerEvents.push_back(event); });
  world.clock.scheduleAt(at(200), [&] { world.phone.close(); });
  world.clock.scheduleAt(at(500), [&] { world.phone.connect(world.gateway); });
  world.clock.scheduleAt(at(800), [&] { world.phone.close(); });
  world.runUntil(1000);

  ASSERT_EQ(bobEvents.size(), 3u);
  EXPECT_EQ(bobEvents[0].status, (VisibleStatus{ShownStatus::Offline, 3}));
  EXPECT_EQ(bobEvents[0].observedAtMinute, 3);  // published at 220 s
  EXPECT_EQ(bobEvents[1].status.status, ShownStatus::Online);
  EXPECT_EQ(bobEvents[2].observedAtMinute, 13);  // published at 820 s
  EXPECT_LT(bobEvents[0].version, bobEvents[1].version);
  EXPECT_LT(bobEvents[1].version, bobEvents[2].version);
  EXPECT_TRUE(strangerEvents.empty());
}

TEST(Subscriptions, HiddenTargetProducesNoEventsSoItsChangesCannotBeTimed) {
  PrivacyWorld world;
  world.service.privacy().setLevel("alice", PrivacyLevel::Hidden);
  std::vector<ChangeEvent> events;
  world.service.subscriptions().subscribe(
      "bob", {"alice"}, [&](const ChangeEvent& event) { events.push_back(event); });
  world.clock.scheduleAt(at(200), [&] { world.phone.close(); });
  world.runUntil(1000);
  EXPECT_EQ(world.changesOf("alice").size(), 2u);
  EXPECT_TRUE(events.empty());
}

TEST(Subscriptions, UnsubscribeStopsEventsAndIsIdempotent) {
  PrivacyWorld world;
  int delivered = 0;
  const Subscribed bob = world.service.subscriptions().subscribe(
      "bob", {"alice"}, [&](const ChangeEvent&) { ++delivered; });
  ASSERT_EQ(world.service.subscriptions().size(), 1u);
  world.service.subscriptions().unsubscribe(bob.id);
  world.service.subscriptions().unsubscribe(bob.id);
  world.service.subscriptions().unsubscribe(12345);
  EXPECT_EQ(world.service.subscriptions().size(), 0u);
  world.clock.scheduleAt(at(200), [&] { world.phone.close(); });
  world.runUntil(1000);
  EXPECT_EQ(delivered, 0);
}

TEST(Subscriptions, ASinkMayUnsubscribeItselfWhileEventsAreDelivered) {
  PrivacyWorld world;
  std::vector<SubscriptionId> ids;
  int delivered = 0;
  for (int i = 0; i < 2; ++i) {
    ids.push_back(world.service.subscriptions()
                      .subscribe("bob", {"alice"},
                                 [&](const ChangeEvent&) {
                                   ++delivered;
                                   for (SubscriptionId id : ids) {
                                     world.service.subscriptions().unsubscribe(id);
                                   }
                                 })
                      .id);
  }
  world.clock.scheduleAt(at(200), [&] { world.phone.close(); });
  world.runUntil(1000);
  EXPECT_EQ(delivered, 1);
  EXPECT_EQ(world.service.subscriptions().size(), 0u);
}

TEST(Privacy, ReplaceSetsEveryRuleAtOnceAndRulesOfReadsThemBackSorted) {
  PrivacyRules rules;
  EXPECT_FALSE(rules.rulesOf("alice").has_value());
  rules.replace("alice", TargetPrivacy{PrivacyLevel::Coarse, {"zed", "bob"}, {"mallory"}});
  EXPECT_EQ(rules.rulesOf("alice"),
            (TargetPrivacy{PrivacyLevel::Coarse, {"bob", "zed"}, {"mallory"}}));
  EXPECT_TRUE(rules.maySee("bob", "alice"));
  rules.replace("alice", TargetPrivacy{PrivacyLevel::Exact, {"zed"}, {}});
  EXPECT_FALSE(rules.maySee("bob", "alice")) << "contacts are replaced, not merged";
  EXPECT_EQ(rules.level("alice"), PrivacyLevel::Exact);
}

TEST(Subscriptions, ABlockedViewerGetsARemovalThenNothingMore) {
  PrivacyWorld world;
  std::vector<ChangeEvent> events;
  world.service.subscriptions().subscribe("bob", {"alice"},
                                          [&](const ChangeEvent& e) { events.push_back(e); });
  world.runUntil(10);
  world.service.privacy().block("alice", "bob");
  world.service.subscriptions().onPrivacyChange("alice");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].removed);
  world.service.subscriptions().onPrivacyChange("alice");  // nothing new to say
  world.clock.scheduleAt(at(100), [&] { world.phone.close(); });
  world.runUntil(1000);
  EXPECT_EQ(events.size(), 1u) << "silence after the removal, not an offline";

  world.service.privacy().unblock("alice", "bob");
  world.service.subscriptions().onPrivacyChange("alice");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[1].removed);
  EXPECT_EQ(events[1].status.status, ShownStatus::Offline);
  EXPECT_EQ(events[1].version, world.service.view().published("alice")->version);
}

TEST(Subscriptions, ALevelChangeResendsTheTrimmedStatusOnlyToThoseWhoSeeIt) {
  PrivacyWorld world;
  std::vector<ChangeEvent> bob, eve;
  world.service.subscriptions().subscribe("bob", {"alice"},
                                          [&](const ChangeEvent& e) { bob.push_back(e); });
  world.service.subscriptions().subscribe("eve", {"alice"},
                                          [&](const ChangeEvent& e) { eve.push_back(e); });
  world.clock.scheduleAt(at(100), [&] { world.phone.close(); });
  world.runUntil(1000);
  ASSERT_EQ(bob.size(), 1u);
  world.service.privacy().setLevel("alice", PrivacyLevel::Coarse);
  world.service.subscriptions().onPrivacyChange("alice");
  ASSERT_EQ(bob.size(), 2u);
  EXPECT_EQ(bob[1].status, (VisibleStatus{ShownStatus::Recently, std::nullopt}));
  EXPECT_TRUE(eve.empty());
}

TEST(Subscriptions, TargetsAddedLaterGetASnapshotAndRemovedOnesFallSilentIdempotently) {
  PrivacyWorld world;
  world.service.privacy().addContact("carol", "bob");
  SimulatedDevice& carolPhone = world.device("carol");
  carolPhone.connect(world.gateway);
  std::vector<ChangeEvent> events;
  const Subscribed sub = world.service.subscriptions().subscribe(
      "bob", {"alice"}, [&](const ChangeEvent& e) { events.push_back(e); });
  world.runUntil(10);
  auto& subscriptions = world.service.subscriptions();
  EXPECT_EQ(subscriptions.targetsWatched(), 1u);
  const auto added = subscriptions.addTargets(sub.id, {"carol", "alice", "eve"});
  ASSERT_EQ(added.size(), 1u) << "alice is already watched, eve has no rules for bob";
  EXPECT_EQ(added[0].target, "carol");
  EXPECT_EQ(added[0].status.status, ShownStatus::Online);
  EXPECT_EQ(subscriptions.targetsWatched(), 3u);
  subscriptions.removeTargets(sub.id, {"alice", "nobody"});
  subscriptions.removeTargets(sub.id, {"alice"});
  EXPECT_EQ(subscriptions.targetsWatched(), 2u);
  world.clock.scheduleAt(at(100), [&] {
    world.phone.close();
    carolPhone.close();
  });
  world.runUntil(1000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].target, "carol");
  subscriptions.unsubscribe(sub.id);
  EXPECT_EQ(subscriptions.targetsWatched(), 0u);
}

}  // namespace
}  // namespace zkagent::presence::testing
