// Freshness on the reader's clock, schedulability, and the placement table (docs/agent.md).
#include "zkagent/agent/health.hpp"

#include <gtest/gtest.h>

namespace {

using namespace zkagent::agent;
using std::chrono::milliseconds;

HealthReport aliveReport(uint64_t seq) {
  HealthReport r;
  r.instanceId = "host-b";
  r.status = HealthStatus::Alive;
  r.runtimeReady = true;
  r.lifecycle = Lifecycle::Active;
  r.reportSeq = seq;
  return r;
}

TEST(HealthReport, RoundTripsThroughJson) {
  auto r = aliveReport(7);
  r.errorCode = "gateway_unreachable";
  r.leading = 3;
  auto back = parseHealthReport(toJson(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->reportSeq, 7u);
  EXPECT_EQ(back->status, HealthStatus::Alive);
  EXPECT_EQ(back->lifecycle, Lifecycle::Active);
  EXPECT_EQ(back->leading, 3);
  EXPECT_EQ(back->errorCode, "gateway_unreachable");
  EXPECT_FALSE(parseHealthReport(R"({"status":"alive"})"));
  EXPECT_FALSE(parseHealthReport(
      R"({"instance_id":"x","status":"great","runtime_ready":true,"lifecycle":"active","report_seq":1})"));
}

TEST(HealthTracker, FreshnessFollowsTheReadersClockSinceTheReportChanged) {
  HealthTracker tracker;
  const SteadyTime t0{};
  const milliseconds ttl(1000);
  EXPECT_EQ(tracker.judge("host-b", t0, ttl).freshness, Freshness::Missing);
  tracker.observe("host-b", aliveReport(1), t0);
  EXPECT_EQ(tracker.judge("host-b", t0 + milliseconds(1000), ttl).freshness, Freshness::Fresh);
  // Reading the same report again is no proof of life.
  tracker.observe("host-b", aliveReport(1), t0 + milliseconds(900));
  const auto seen = tracker.judge("host-b", t0 + milliseconds(1001), ttl);
  EXPECT_EQ(seen.freshness, Freshness::Stale);
  EXPECT_EQ(seen.age, milliseconds(1001));
  // A new report_seq restarts the clock.
  tracker.observe("host-b", aliveReport(2), t0 + milliseconds(1500));
  EXPECT_EQ(tracker.judge("host-b", t0 + milliseconds(2000), ttl).freshness, Freshness::Fresh);
  // The node vanished: missing, but the last proof of life is kept.
  tracker.observe("host-b", std::nullopt, t0 + milliseconds(2100));
  EXPECT_EQ(tracker.judge("host-b", t0 + milliseconds(2100), ttl).freshness, Freshness::Missing);
  EXPECT_EQ(tracker.lastChange("host-b"), t0 + milliseconds(1500));
  EXPECT_TRUE(tracker.known().empty());
}

TEST(Schedulability, OnlyFreshAliveReadyActiveAgentsAreSchedulable) {
  struct Case {
    const char* name;
    Freshness freshness;
    HealthStatus status;
    bool ready;
    Lifecycle lifecycle;
    std::vector<std::string> blocks;
  };
  const std::vector<Case> table = {
      {"healthy", Freshness::Fresh, HealthStatus::Alive, true, Lifecycle::Active, {}},
      {"stale", Freshness::Stale, HealthStatus::Alive, true, Lifecycle::Active, {"health_stale"}},
      {"suspect",
       Freshness::Fresh,
       HealthStatus::Suspect,
       false,
       Lifecycle::Active,
       {"status_suspect", "runtime_not_ready"}},
      {"not ready",
       Freshness::Fresh,
       HealthStatus::Alive,
       false,
       Lifecycle::Active,
       {"runtime_not_ready"}},
      {"joining",
       Freshness::Fresh,
       HealthStatus::Alive,
       true,
       Lifecycle::Joining,
       {"lifecycle_joining"}},
      {"leaving",
       Freshness::Fresh,
       HealthStatus::Alive,
       true,
       Lifecycle::Leaving,
       {"lifecycle_leaving"}},
      {"down and stale",
       Freshness::Stale,
       HealthStatus::Down,
       false,
       Lifecycle::Drained,
       {"health_stale", "lifecycle_drained", "status_down", "runtime_not_ready"}},
  };
  for (const auto& c : table) {
    SeenHealth seen;
    seen.freshness = c.freshness;
    seen.report = aliveReport(1);
    seen.report->status = c.status;
    seen.report->runtimeReady = c.ready;
    seen.report->lifecycle = c.lifecycle;
    EXPECT_EQ(schedulingBlocks(seen), c.blocks) << c.name;
  }
  EXPECT_EQ(schedulingBlocks(SeenHealth{}), std::vector<std::string>{"health_missing"});
}

TEST(Placement, TableOfActionsAndBlockedReasons) {
  const Successor ready{"host-b", {}, milliseconds(100)};
  const Successor stale{"host-b", {"health_stale"}, milliseconds(5000)};
  const Successor leaving{"host-b", {"lifecycle_leaving"}, milliseconds(10)};
  struct Case {
    const char* name;
    PlacementInput in;
    PlacementAction action;
    std::vector<std::string> reasons;
    bool byHealth;
  };
  const std::vector<Case> table = {
      {"schedulable, not standing: join",
       {Lifecycle::Active, {}, false, false, false, {}},
       PlacementAction::Join,
       {},
       false},
      {"schedulable, standing: nothing",
       {Lifecycle::Active, {}, false, true, false, {}},
       PlacementAction::None,
       {},
       false},
      {"joining: never stands",
       {Lifecycle::Joining, {}, false, false, false, {}},
       PlacementAction::None,
       {},
       false},
      {"unready candidate withdraws",
       {Lifecycle::Active, {"runtime_not_ready"}, false, true, false, {}},
       PlacementAction::Withdraw,
       {"runtime_not_ready"},
       true},
      {"draining candidate withdraws",
       {Lifecycle::Leaving, {}, false, true, false, {}},
       PlacementAction::Withdraw,
       {},
       false},
      {"schedulable leader stays",
       {Lifecycle::Active, {}, true, true, false, {}},
       PlacementAction::None,
       {},
       false},
      {"unready leader looks up its successor",
       {Lifecycle::Active, {"runtime_not_ready"}, true, true, false, {}},
       PlacementAction::LookUpSuccessor,
       {},
       false},
      {"unready leader hands over to a ready successor",
       {Lifecycle::Active, {"runtime_not_ready"}, true, true, true, ready},
       PlacementAction::Withdraw,
       {},
       false},
      {"unready leader without successor stays",
       {Lifecycle::Active, {"runtime_not_ready"}, true, true, true, std::nullopt},
       PlacementAction::None,
       {"no_successor"},
       false},
      {"draining leader, stale successor: blocked by health",
       {Lifecycle::Leaving, {}, true, true, true, stale},
       PlacementAction::None,
       {"successor_unschedulable", "successor_health_stale"},
       true},
      {"draining leader, leaving successor: blocked, not by health",
       {Lifecycle::Leaving, {}, true, true, true, leaving},
       PlacementAction::None,
       {"successor_unschedulable", "successor_lifecycle_leaving"},
       false},
      {"draining leader hands over",
       {Lifecycle::Leaving, {}, true, true, true, ready},
       PlacementAction::Withdraw,
       {},
       false},
  };
  for (const auto& c : table) {
    const auto d = decide(c.in);
    EXPECT_EQ(d.action, c.action) << c.name << ": got " << toString(d.action);
    EXPECT_EQ(d.blockedReasons, c.reasons) << c.name;
    EXPECT_EQ(d.blockedByHealth, c.byHealth) << c.name;
  }
}

}  // namespace
