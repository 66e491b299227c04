// Property: over random valid parameters and random leave times, no measured detection delay
// exceeds bounds(), and no offline comes before the mechanism that detects it could have fired.
#include <gtest/gtest.h>

#include "scenario.hpp"

namespace zkagent::presence::testing {
namespace {

// A random duration between `low` and `high` seconds.
Millis between(StableRandom& random, double low, double high) {
  return random.scale(std::chrono::seconds{1}, low, high);
}

Params randomParams(StableRandom& random) {
  Params p;
  p.heartbeatInterval = between(random, 2, 60);
  p.heartbeatJitter = random.uniform(0, 0.5);
  p.pingTimeout = p.heartbeatInterval * 2 + between(random, 0.001, 60);
  p.checkInterval = between(random, 0.5, 15);
  p.renewInterval = between(random, 5, 120);
  p.renewJitter = random.uniform(0, 0.5);
  p.leaseTtl = p.renewInterval * 2 + between(random, 0.001, 120);
  p.sweepInterval = between(random, 0.5, 15);
  p.offlineDebounce = between(random, 0, 60);
  return p;
}

TEST(BoundsProperty, MeasuredDelaysNeverExceedBoundsForRandomParametersAndLeaveTimes) {
  constexpr int kTrials = 150;
  for (int trial = 0; trial < kTrials; ++trial) {
    StableRandom random("bounds-property", trial);
    const Params params = randomParams(random);
    ASSERT_TRUE(validationErrors(params).empty()) << "trial " << trial;
    const Bounds bound = bounds(params);
    Scenario world(params);
    // A second leader agent that will crash, with its own renewal log.
    RenewalLog crashLog(world.clock, world.service.leases());
    ConnectionTable doomed(world.clock, params, {"gateway-doomed", 2}, crashLog, {}, trial);

    const double settle = 3 * std::chrono::duration<double>(params.leaseTtl).count();
    std::map<std::string, TimePoint> leftAt;
    auto leaveLater = [&](const std::string& user, auto leave) {
      const TimePoint when = at(settle + random.uniform(0, 600));
      world.clock.scheduleAt(when, [&leftAt, user, when, leave] {
        leftAt[user] = when;
        leave();
      });
    };
    for (int i = 0; i < 4; ++i) {
      SimulatedDevice& closing = world.device("close-" + std::to_string(i));
      SimulatedDevice& halfOpen = world.device("half-" + std::to_string(i));
      SimulatedDevice& stranded = world.device("crash-" + std::to_string(i));
      world.clock.scheduleAt(at(random.uniform(0, settle)),
                             [&world, &doomed, c = &closing, h = &halfOpen, s = &stranded] {
                               c->connect(world.gateway);
                               h->connect(world.gateway);
                               s->connect(doomed);
                             });
      leaveLater(closing.key().user, [c = &closing] { c->close(); });
      leaveLater(halfOpen.key().user, [h = &halfOpen] { h->goHalfOpen(); });
    }
    const TimePoint crashAt = at(settle + random.uniform(0, 600));
    world.clock.scheduleAt(crashAt, [&] { doomed.crash(); });
    world.clock.runUntil(crashAt + bound.gatewayCrash + std::chrono::seconds{700});

    for (const auto& device : world.devices) {
      const std::string& user = device->key().user;
      const auto changes = world.changesOf(user);
      ASSERT_EQ(changes.size(), 2u) << "trial " << trial << " " << user;
      ASSERT_TRUE(changes[0].online);
      const TimePoint offlineAt = changes[1].at;
      if (user.starts_with("close")) {
        EXPECT_LE(offlineAt - leftAt.at(user), bound.close) << "trial " << trial;
      } else if (user.starts_with("half")) {
        EXPECT_LE(offlineAt - leftAt.at(user), *bound.halfOpen) << "trial " << trial;
        // The last heartbeat was at most one interval before leaving.
        EXPECT_GE(offlineAt, leftAt.at(user) - params.heartbeatInterval + params.pingTimeout)
            << "trial " << trial;
      } else {
        EXPECT_LE(offlineAt - crashAt, bound.gatewayCrash) << "trial " << trial;
        EXPECT_GE(offlineAt, crashLog.lastRenewal.at(user) + params.leaseTtl) << "trial " << trial;
      }
    }
  }
}

}  // namespace
}  // namespace zkagent::presence::testing
