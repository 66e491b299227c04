// Parameter validation, bounds(), the virtual clock and the stable jitter source.
#include <gtest/gtest.h>

#include "scenario.hpp"

namespace zkagent::presence::testing {
namespace {

using Seconds = std::chrono::seconds;

std::string allErrors(const Params& params) {
  std::string joined;
  for (const auto& error : validationErrors(params)) joined += error + "\n";
  return joined;
}

TEST(Params, DefaultsAreValidAndGiveBoundsOf20sAnd100sAnd175s) {
  const Params defaults;
  EXPECT_TRUE(validationErrors(defaults).empty());
  const Bounds bound = bounds(defaults);
  EXPECT_EQ(bound.close, Seconds{20});
  ASSERT_TRUE(bound.halfOpen.has_value());
  EXPECT_EQ(*bound.halfOpen, Seconds{100});
  EXPECT_EQ(bound.gatewayCrash, Seconds{175});
}

TEST(Params, PingTimeoutNotAboveTwiceTheHeartbeatIsRejectedNamingBoth) {
  Params params;
  params.pingTimeout = Seconds{60};
  const std::string errors = allErrors(params);
  EXPECT_NE(errors.find("pingTimeout (60000 ms)"), std::string::npos) << errors;
  EXPECT_NE(errors.find("heartbeatInterval (30000 ms)"), std::string::npos) << errors;
}

TEST(Params, TtlNotAboveTwiceTheRenewalIsRejectedUnlessExplicitlyUnsafe) {
  Params params;
  params.leaseTtl = Seconds{50};
  EXPECT_NE(allErrors(params).find("leaseTtl (50000 ms) must be > 2 x renewInterval"),
            std::string::npos);
  try {
    validate(params);
    ADD_FAILURE() << "validate accepted leaseTtl 50 s";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("leaseTtl"), std::string::npos);
  }
  params.allowUnsafe = true;
  EXPECT_TRUE(validationErrors(params).empty());
}

TEST(Params, ZeroDisablesHeartbeatsButThenThePingTimeoutMustBeOffToo) {
  Params params;
  params.heartbeatInterval = Millis{0};
  EXPECT_NE(allErrors(params).find("pingTimeout must be 0 when heartbeatInterval is 0"),
            std::string::npos);
  params.pingTimeout = Millis{0};
  EXPECT_TRUE(validationErrors(params).empty());
  EXPECT_FALSE(bounds(params).halfOpen.has_value());  // a half-open connection is never found
}

TEST(Params, EveryOutOfRangeValueIsNamed) {
  Params params;
  params.heartbeatJitter = 1;
  params.renewJitter = -0.1;
  params.renewInterval = Millis{0};
  params.sweepInterval = Millis{0};
  params.checkInterval = Millis{0};
  params.offlineDebounce = Millis{-1};
  params.coarseRecentWindow = Millis{0};
  const std::string errors = allErrors(params);
  for (const char* name : {"heartbeatJitter", "renewJitter", "renewInterval", "sweepInterval",
                           "checkInterval", "offlineDebounce", "coarseRecentWindow"}) {
    EXPECT_NE(errors.find(name), std::string::npos) << name << " missing from:\n" << errors;
  }
}

TEST(Params, InvalidParamsAreRefusedBeforeAnythingIsScheduled) {
  Params params;
  params.leaseTtl = Seconds{10};
  VirtualClock clock;
  EXPECT_THROW((PresenceService{clock, params}), std::invalid_argument);
  PresenceService valid(clock, Params{});
  const std::size_t pending = clock.pending();
  EXPECT_THROW((ConnectionTable{clock, params, {"g", 1}, valid.leases()}), std::invalid_argument);
  EXPECT_THROW((ConnectionTable{clock, Params{}, {"", 1}, valid.leases()}), std::invalid_argument);
  EXPECT_EQ(clock.pending(), pending);
  EXPECT_EQ(valid.leases().size(), 0u);
}

TEST(VirtualClock, RunsEventsInTimeOrderAndEqualTimesInSchedulingOrder) {
  VirtualClock clock;
  std::vector<int> order;
  clock.scheduleAt(at(2), [&] { order.push_back(3); });
  clock.scheduleAt(at(1), [&] { order.push_back(1); });
  clock.scheduleAt(at(1), [&] {
    order.push_back(2);
    clock.scheduleAt(at(0), [&] { order.push_back(21); });  // the past means "now"
  });
  clock.runUntil(at(1.5));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 21}));
  EXPECT_EQ(clock.now(), at(1.5));
  clock.runFor(Seconds{1});
  EXPECT_EQ(order, (std::vector<int>{1, 2, 21, 3}));
  EXPECT_EQ(clock.eventsRun(), 4u);
}

TEST(TimerScope, CancelledOrDestroyedScopeRunsNoneOfItsCallbacks) {
  VirtualClock clock;
  int ran = 0;
  TimerScope cancelled(clock);
  cancelled.after(Seconds{1}, [&] { ++ran; });
  cancelled.cancelAll();
  cancelled.after(Seconds{2}, [&] { ran += 10; });  // scheduled after the cancel: runs
  {
    TimerScope destroyed(clock);
    destroyed.after(Seconds{1}, [&] { ran += 100; });
  }
  clock.runUntil(at(5));
  EXPECT_EQ(ran, 10);
}

TEST(StableRandom, Crc32IsTheStandardChecksum) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc32(""), 0u);
}

TEST(StableRandom, SameNameAndSeedRepeatTheSequenceAndOthersDiffer) {
  StableRandom first("gateway-1", 7);
  StableRandom again("gateway-1", 7);
  StableRandom otherName("gateway-2", 7);
  StableRandom otherSeed("gateway-1", 8);
  int differentName = 0;
  int differentSeed = 0;
  for (int i = 0; i < 100; ++i) {
    const double value = first.uniform(0, 60);
    ASSERT_EQ(value, again.uniform(0, 60));
    ASSERT_GE(value, 0);
    ASSERT_LE(value, 60);
    differentName += value != otherName.uniform(0, 60);
    differentSeed += value != otherSeed.uniform(0, 60);
  }
  EXPECT_GT(differentName, 90);
  EXPECT_GT(differentSeed, 90);
}

TEST(ConnectionTable, RenewalsFollowTheJitterScheduleReproduciblyPerGatewayName) {
  auto renewalTimes = [](const std::string& name) {
    VirtualClock clock;
    const Params params = withoutHeartbeats();
    PresenceService service(clock, params);
    RenewalLog log(clock, service.leases());
    ConnectionTable gateway(clock, params, {name, 1}, log);
    gateway.connect({"alice", "phone"});
    log.batchTimes.clear();
    clock.runUntil(at(3600));
    return log.batchTimes;
  };
  const auto times = renewalTimes("gateway-a");
  ASSERT_GE(times.size(), 50u);
  EXPECT_LE(times[0], at(60));  // the first one within one interval
  for (std::size_t i = 1; i < times.size(); ++i) {
    EXPECT_GE(times[i] - times[i - 1], Seconds{54}) << i;
    EXPECT_LE(times[i] - times[i - 1], Seconds{66}) << i;
  }
  EXPECT_EQ(renewalTimes("gateway-a"), times);
  EXPECT_NE(renewalTimes("gateway-b"), times);
}

}  // namespace
}  // namespace zkagent::presence::testing
