// The reconnect delay policy and option validation: no sockets.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "zkagent/device.hpp"

namespace zkagent::device {
namespace {

using namespace std::chrono_literals;

TEST(ReconnectBackoff, WindowDoublesFromInitialAndStopsAtMax) {
  const ReconnectBackoff backoff(200ms, 30000ms, 1);
  EXPECT_EQ(backoff.window(0), 200ms);
  EXPECT_EQ(backoff.window(1), 400ms);
  EXPECT_EQ(backoff.window(7), 25600ms);
  EXPECT_EQ(backoff.window(8), 30000ms);
  EXPECT_EQ(backoff.window(1000), 30000ms);
}

TEST(ReconnectBackoff, DelaysAreFullJitterWithinTheWindowAndCapped) {
  ReconnectBackoff backoff(200ms, 1000ms, 42);
  Millis longest{0};
  for (unsigned i = 0; i < 2000; ++i) {
    const unsigned attempt = backoff.attempt();
    const Millis delay = backoff.next();
    EXPECT_GE(delay.count(), 0);
    EXPECT_LE(delay, backoff.window(attempt));
    longest = std::max(longest, delay);
  }
  EXPECT_LE(longest, 1000ms);
  EXPECT_GT(longest, 900ms) << "the cap is reached";
}

// The devices of a dead agent must not come back in the same millisecond: the very first retry is
// drawn from [0, initial] too, and devices draw differently.
TEST(ReconnectBackoff, FirstRetriesOfManyDevicesSpreadOverTheWindow) {
  std::vector<Millis> first;
  for (int i = 0; i < 10000; ++i) {
    ReconnectBackoff backoff(200ms, 30000ms, jitterSeed("acme", "device-" + std::to_string(i), 0));
    first.push_back(backoff.next());
  }
  std::set<Millis> distinct(first.begin(), first.end());
  EXPECT_GE(distinct.size(), 190u) << "nearly every millisecond of [0, 200] is used";
  std::sort(first.begin(), first.end());
  EXPECT_LE(first.front(), 2ms);
  EXPECT_GE(first.back(), 198ms);
  EXPECT_LE(first.back(), 200ms);
  // No millisecond holds more than a few times its share (50 of 10000).
  std::map<Millis, int> perMillisecond;
  for (auto delay : first) ++perMillisecond[delay];
  for (const auto& [delay, count] : perMillisecond) EXPECT_LT(count, 150) << delay.count() << " ms";
}

TEST(ReconnectBackoff, ResetReturnsToTheInitialWindow) {
  ReconnectBackoff backoff(100ms, 10000ms, 7);
  for (int i = 0; i < 10; ++i) backoff.next();
  EXPECT_EQ(backoff.attempt(), 10u);
  backoff.reset();
  EXPECT_EQ(backoff.attempt(), 0u);
  for (int i = 0; i < 50; ++i) {
    backoff.reset();
    EXPECT_LE(backoff.next(), 100ms);
  }
}

TEST(ReconnectBackoff, SameDeviceAndSeedGiveTheSameDelays) {
  const auto seed = jitterSeed("acme", "phone-1", 5);
  ReconnectBackoff a(200ms, 30000ms, seed);
  ReconnectBackoff b(200ms, 30000ms, seed);
  ReconnectBackoff other(200ms, 30000ms, jitterSeed("acme", "phone-2", 5));
  bool differs = false;
  for (int i = 0; i < 10; ++i) {
    const auto delay = a.next();
    EXPECT_EQ(delay, b.next());
    differs = differs || delay != other.next();
  }
  EXPECT_TRUE(differs);
  EXPECT_NE(jitterSeed("acme", "phone-1", 5), jitterSeed("acme", "phone-1", 6));
}

DeviceOptions valid() {
  DeviceOptions options;
  options.endpoints = {"ws://127.0.0.1:8471", "ws://agent-b.example:8471/", "ws://[::1]:8471"};
  options.account = "acme";
  options.device = "phone_1.a-b";
  return options;
}

TEST(DeviceOptions, DefaultsWithEndpointsAndIdsAreValid) { EXPECT_EQ(validate(valid()), ""); }

TEST(DeviceOptions, EachProblemNamesItsField) {
  const auto problem = [](auto change) {
    auto options = valid();
    change(options);
    return validate(options);
  };
  const auto startsWith = [](const std::string& text, const std::string& prefix) {
    return text.rfind(prefix, 0) == 0;
  };
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.endpoints.clear(); }), "endpoints: "));
  for (const char* bad : {"http://h:1", "ws://h", "ws://h:0", "ws://h:70000", "ws://:80",
                          "ws://h:80/v1", "ws://::1:80", "ws://h:8x"}) {
    EXPECT_TRUE(startsWith(problem([&](auto& o) { o.endpoints.push_back(bad); }), "endpoints[3]: "))
        << bad;
  }
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.account = ""; }), "account: missing"));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.account = ".."; }), "account: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.account = "a/b"; }), "account: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.device = std::string(129, 'd'); }), "device: "));
  EXPECT_EQ(problem([](auto& o) { o.device = std::string(128, 'd'); }), "");
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.device = "."; }), "device: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.timeout = o.heartbeat * 2; }), "timeout: "));
  EXPECT_EQ(problem([](auto& o) { o.timeout = 0ms; }), "");
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.heartbeat = 0ms; }), "timeout: "));
  EXPECT_EQ(problem([](auto& o) {
              o.heartbeat = 0ms;
              o.timeout = 0ms;
            }),
            "");
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.heartbeatJitter = 1.0; }), "heartbeatJitter: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.backoffInitial = 0ms; }), "backoffInitial: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.backoffMax = 100ms; }), "backoffMax: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.connectTimeout = 0ms; }), "connectTimeout: "));
  EXPECT_TRUE(startsWith(problem([](auto& o) { o.localAddress = "nowhere"; }), "localAddress: "));
}

}  // namespace
}  // namespace zkagent::device
