// DeviceClient against a fake agent endpoint that speaks the device protocol.
#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>

#include "device_harness.hpp"
#include "fake_agent.hpp"

namespace zkagent::device::testing {
namespace {

using namespace std::chrono_literals;

DeviceOptions optionsFor(std::vector<std::string> endpoints, std::string device = "phone-1") {
  DeviceOptions options;
  options.endpoints = std::move(endpoints);
  options.account = "acme";
  options.device = std::move(device);
  options.heartbeat = 50ms;
  // Far above the heartbeat: a pong held up by a stalled machine (sanitizers, 2 loaded cores) must
  // not read as a silent agent in tests about something else. Tests of the timeout set their own.
  options.timeout = 2000ms;
  options.backoffInitial = 20ms;
  options.backoffMax = 200ms;
  options.connectTimeout = 2000ms;
  return options;
}

// A local port nobody listens on: bound once, then released.
std::string deadEndpoint() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return "ws://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
}

TEST(DeviceClient, ConnectsAndReportsTheWelcomesEpoch) {
  FakeAgent agent("agent-a", 7);
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  EXPECT_EQ(device.eventsStartingWith("CONNECTED").front(),
            "CONNECTED agent-a 7.1 " + agent.endpoint());
  ASSERT_EQ(agent.targets().size(), 1u);
  EXPECT_EQ(agent.targets().front(), "/v1/devices?account=acme&device=phone-1");
}

TEST(DeviceClient, FollowsARedirectToTheLeader) {
  FakeAgent follower("agent-a", 7);
  FakeAgent leader("agent-b", 9);
  const std::string location = leader.endpoint() + "/v1/devices?account=acme&device=phone-1";
  follower.redirect(location);
  DeviceHarness device(optionsFor({follower.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  EXPECT_EQ(device.events().front(), "REDIRECTED " + location);
  EXPECT_EQ(device.eventsStartingWith("CONNECTED").front(),
            "CONNECTED agent-b 9.1 " + leader.endpoint());
  EXPECT_EQ(follower.accepted(), 0);
  EXPECT_EQ(leader.targets().front(), "/v1/devices?account=acme&device=phone-1");
  EXPECT_EQ(device.stats().redirects, 1u);
}

// redirectInBand: the device asks for redirect=close; a non-leader's 4001 right after the upgrade
// is followed at once to the URL it names (no backoff, no failed attempt), like a 307.
TEST(DeviceClient, AnInBandRedirectIsAskedForAndFollowedAtOnce) {
  FakeAgent leader("agent-b", 8);
  FakeAgent follower("agent-a", 7);
  const std::string target = "/v1/devices?account=acme&device=phone-1&redirect=close";
  follower.redirectInBand(leader.endpoint() + target);
  auto options = optionsFor({follower.endpoint()});
  options.redirectInBand = true;
  options.backoffInitial = 5000ms;  // a round that failed would wait up to this
  options.backoffMax = 5000ms;
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("CONNECTED agent-b", 1, 3000ms));
  EXPECT_EQ(follower.targets(), std::vector<std::string>{target});
  EXPECT_EQ(leader.targets(), std::vector<std::string>{target});
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED"), std::vector<std::string>{});
  EXPECT_EQ(device.stats().redirects, 1u);
}

// Without redirectInBand the same close is a failed attempt, not a redirect.
TEST(DeviceClient, WithoutInBandRedirectsALeaderMovedCloseBeforeTheWelcomeFailsTheAttempt) {
  FakeAgent leader("agent-b", 8);
  FakeAgent follower("agent-a", 7);
  follower.redirectInBand(leader.endpoint());
  DeviceHarness device(optionsFor({follower.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED agent-b"));  // the next round starts at the named endpoint
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED").front(), "DISCONNECTED leader_moved");
  EXPECT_EQ(follower.targets(),
            std::vector<std::string>{"/v1/devices?account=acme&device=phone-1"});
  EXPECT_EQ(device.stats().redirects, 0u);
}

TEST(DeviceClient, RedirectsAreCappedPerEndpoint) {
  FakeAgent agent;
  // A redirect loop: the agent sends the device back to itself.
  agent.redirect(agent.endpoint() + "/v1/devices?account=acme&device=phone-1");
  auto options = optionsFor({agent.endpoint()});
  options.maxRedirects = 2;
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("DISCONNECTED too_many_redirects"));
  const auto events = device.events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].rfind("REDIRECTED", 0), 0u);
  EXPECT_EQ(events[1].rfind("REDIRECTED", 0), 0u);
  EXPECT_EQ(events[2], "DISCONNECTED too_many_redirects");
}

TEST(DeviceClient, RetriesAfterServiceUnavailableUntilALeaderIsKnown) {
  FakeAgent agent;
  agent.refuse(503);
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("DISCONNECTED upgrade_refused:503", 3));
  EXPECT_TRUE(device.eventsStartingWith("CONNECTED").empty());
  agent.accept();
  ASSERT_TRUE(device.waitFor("CONNECTED"));
}

// The provider is asked before every connect; a 401 says why and makes the next call a refresh,
// whose fresh token connects.
TEST(DeviceClient, TokenProviderIsSentAsBearerAndRefreshedAfterA401) {
  FakeAgent agent;
  agent.requireToken("fresh");
  auto options = optionsFor({agent.endpoint()});
  auto calls = std::make_shared<std::vector<bool>>();  // the client's thread only
  options.tokenProvider = [calls](bool refresh) {
    calls->push_back(refresh);
    return refresh ? std::string("fresh") : std::string("stale");
  };
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED"),
            std::vector<std::string>{"DISCONNECTED unauthorized: token: expired 5 s ago"});
  EXPECT_EQ(agent.authorizations(), (std::vector<std::string>{"Bearer stale", "Bearer fresh"}));
  EXPECT_EQ(device.onClient([calls](DeviceClient&) { return *calls; }),
            (std::vector<bool>{false, true}));
  // A 4003 (token expired) is reported as such and asks for a fresh token too.
  agent.closeAll(4003, "token expired");
  ASSERT_TRUE(device.waitFor("CONNECTED", 2));
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED").back(), "DISCONNECTED token_expired");
  EXPECT_EQ(device.onClient([calls](DeviceClient&) { return calls->back(); }), true);
}

TEST(DeviceClient, AForbiddenTokenIsReportedWithTheAgentsReason) {
  FakeAgent agent;
  agent.requireToken("mine", 403);
  auto options = optionsFor({agent.endpoint()});
  options.tokenProvider = [](bool) { return std::string("someone-elses"); };
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("DISCONNECTED forbidden: token: its sub is not device"));
  EXPECT_TRUE(device.eventsStartingWith("CONNECTED").empty());
}

TEST(DeviceClient, WithoutAProviderNoAuthorizationIsSent) {
  FakeAgent agent;
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  EXPECT_EQ(agent.authorizations(), std::vector<std::string>{""});
}

TEST(DeviceClient, MovesOnToTheNextEndpointWhenOneIsDown) {
  FakeAgent agent("agent-a", 7);
  DeviceHarness device(optionsFor({deadEndpoint(), agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  const auto events = device.events();
  EXPECT_EQ(events.front().rfind("DISCONNECTED connect_failed: ", 0), 0u) << events.front();
  EXPECT_EQ(events[1], "CONNECTED agent-a 7.1 " + agent.endpoint());
}

TEST(DeviceClient, LeaderMovedCloseReconnectsToTheReasonsEndpointFirst) {
  FakeAgent oldLeader("agent-a", 7);
  FakeAgent newLeader("agent-b", 8);
  DeviceHarness device(optionsFor({oldLeader.endpoint(), newLeader.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED agent-a"));
  oldLeader.closeAll(4001, newLeader.endpoint());
  ASSERT_TRUE(device.waitFor("CONNECTED agent-b"));
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED"),
            std::vector<std::string>{"DISCONNECTED leader_moved"});
  // The old leader, first in the list, was not asked again.
  EXPECT_EQ(oldLeader.upgradeRequests(), 1);
}

// A 4001 without an endpoint (the old leader no longer knows who leads, e.g. at its shutdown): the
// next round starts after the endpoint the device was on, so the agent that just closed it is
// asked last, and the list wraps around.
TEST(DeviceClient, LeaderMovedCloseWithoutAnEndpointTriesTheNextEndpointFirst) {
  FakeAgent first("agent-a", 7);
  FakeAgent second("agent-b", 8);
  DeviceHarness device(optionsFor({first.endpoint(), second.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED agent-a"));
  first.closeAll(4001, "");
  ASSERT_TRUE(device.waitFor("CONNECTED agent-b"));
  EXPECT_EQ(first.upgradeRequests(), 1);
  second.closeAll(4001, "");
  ASSERT_TRUE(device.waitFor("CONNECTED agent-a", 2));
  EXPECT_EQ(second.upgradeRequests(), 1);
  EXPECT_EQ(device.eventsStartingWith("DISCONNECTED"),
            (std::vector<std::string>{"DISCONNECTED leader_moved", "DISCONNECTED leader_moved"}));
}

// A 4001 reason may be a whole URL (an in-band redirect, docs/device-protocol.md): it is used as
// it is, path and query included.
TEST(DeviceClient, LeaderMovedCloseNamingAWholeUrlIsFollowedToThatUrl) {
  FakeAgent oldLeader("agent-a", 7);
  FakeAgent newLeader("agent-b", 8);
  DeviceHarness device(optionsFor({oldLeader.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED agent-a"));
  const std::string target = "/v1/devices?account=acme&device=phone-1&app=7";
  oldLeader.closeAll(4001, newLeader.endpoint() + target);
  ASSERT_TRUE(device.waitFor("CONNECTED agent-b"));
  EXPECT_EQ(newLeader.targets(), std::vector<std::string>{target});
}

TEST(DeviceClient, AgentClosesAreReportedByTheirMeaningAndReconnected) {
  FakeAgent agent;
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  agent.closeAll(4002, "ping timeout");
  ASSERT_TRUE(device.waitFor("CONNECTED", 2));
  agent.closeAll(1001, "shutting down");
  ASSERT_TRUE(device.waitFor("CONNECTED", 3));
  EXPECT_EQ(
      device.eventsStartingWith("DISCONNECTED"),
      (std::vector<std::string>{"DISCONNECTED ping_timeout", "DISCONNECTED closed_by_agent:1001"}));
  EXPECT_EQ(device.stats().connects, 3u);
}

TEST(DeviceClient, GarbageInsteadOfAWelcomeIsAFailedAttempt) {
  FakeAgent agent;
  agent.replaceWelcome("not json");
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("DISCONNECTED bad_frame: ", 2));
  EXPECT_TRUE(device.eventsStartingWith("CONNECTED").empty());
  EXPECT_TRUE(zktest::eventually([&] { return !agent.closeCodesFromDevices().empty(); }, 5000ms));
  EXPECT_EQ(agent.closeCodesFromDevices().front(), 1002);
  agent.replaceWelcome(R"({"type":5})");
  ASSERT_TRUE(device.waitFor("DISCONNECTED bad_frame: expected welcome, got no type"));
  agent.replaceWelcome(R"({"type":"welcome","agent":"late","token":1,"counter":99})");
  ASSERT_TRUE(device.waitFor("CONNECTED late 1.99"));
}

TEST(DeviceClient, NoWelcomeWithinTheConnectTimeoutIsAFailedAttempt) {
  FakeAgent agent;
  agent.replaceWelcome("");
  auto options = optionsFor({agent.endpoint()});
  options.connectTimeout = 200ms;
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("DISCONNECTED welcome_timeout", 2));
  EXPECT_TRUE(device.eventsStartingWith("CONNECTED").empty());
}

TEST(DeviceClient, SilentAgentIsDetectedAfterTheTimeoutAndReconnected) {
  FakeAgent agent;
  auto options = optionsFor({agent.endpoint()});
  options.heartbeat = 50ms;
  options.timeout = 300ms;
  agent.answerPings(false);
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("DISCONNECTED agent_silent"));
  // Never before the timeout: the welcome is the last frame the agent sent. Measured from when the
  // agent sent it, which is before the device read it; the harness records CONNECTED after the
  // client has taken the frame's time, so CONNECTED to DISCONNECTED may be a little less.
  ASSERT_FALSE(agent.welcomeTimes().empty());
  EXPECT_GE(*device.firstTime("DISCONNECTED agent_silent") - agent.welcomeTimes().front(),
            options.timeout);
  EXPECT_GE(agent.pingSeqs("phone-1").size(), 3u);
  // It reconnects, and the device told the silent agent it was leaving.
  ASSERT_TRUE(device.waitFor("CONNECTED", 2));
  EXPECT_TRUE(zktest::eventually([&] { return !agent.closeCodesFromDevices().empty(); }, 5000ms));
  EXPECT_EQ(agent.closeCodesFromDevices().front(), 1000);
}

TEST(DeviceClient, AnsweringAgentIsNotReportedSilent) {
  FakeAgent agent;
  auto options = optionsFor({agent.endpoint()});
  // A pong is due every 100 ms; the timeout (1 s) leaves ten times that for a slow pong on a
  // stalled machine, where 100 ms (five pings) did not.
  options.heartbeat = 100ms;
  options.timeout = 1000ms;
  DeviceHarness device(options);
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  // Thirty pings span three timeouts; pongs keep the agent alive all along (an agent that does
  // not answer is reported silent after one).
  ASSERT_TRUE(zktest::eventually([&] { return agent.pingSeqs("phone-1").size() >= 30; }, 30000ms));
  EXPECT_TRUE(device.eventsStartingWith("DISCONNECTED").empty())
      << device.eventsStartingWith("DISCONNECTED").front();
}

TEST(DeviceClient, HeartbeatsCarryRisingSeqsAndTheirRoundTripIsMeasured) {
  FakeAgent agent;
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(zktest::eventually([&] { return device.stats().heartbeatsAnswered >= 3; }, 10000ms));
  const auto seqs = agent.pingSeqs("phone-1");
  ASSERT_GE(seqs.size(), 3u);
  for (std::size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], i + 1);
  const auto stats = device.stats();
  EXPECT_GE(stats.heartbeatsSent, stats.heartbeatsAnswered);
  EXPECT_GT(stats.lastRtt.count(), 0);
}

TEST(DeviceClient, HeartbeatZeroSendsNoPings) {
  FakeAgent agent;
  auto quiet = optionsFor({agent.endpoint()}, "quiet");
  quiet.heartbeat = 0ms;
  quiet.timeout = 0ms;
  DeviceHarness silentDevice(quiet);
  ASSERT_TRUE(silentDevice.waitFor("CONNECTED"));
  // A device with heartbeats on the same agent shows how much time has passed.
  DeviceHarness clock(optionsFor({agent.endpoint()}, "clock"));
  ASSERT_TRUE(zktest::eventually([&] { return agent.pingSeqs("clock").size() >= 5; }, 10000ms));
  EXPECT_TRUE(agent.pingSeqs("quiet").empty());
  EXPECT_EQ(silentDevice.stats().heartbeatsSent, 0u);
  EXPECT_TRUE(silentDevice.eventsStartingWith("DISCONNECTED").empty());
}

TEST(DeviceClient, StopSendsANormalCloseAndReportsNoDisconnect) {
  FakeAgent agent;
  DeviceHarness device(optionsFor({agent.endpoint()}));
  ASSERT_TRUE(device.waitFor("CONNECTED"));
  device.stop();
  EXPECT_TRUE(zktest::eventually([&] { return !agent.closeCodesFromDevices().empty(); }, 5000ms));
  EXPECT_EQ(agent.closeCodesFromDevices(), std::vector<std::uint16_t>{1000});
  EXPECT_TRUE(device.eventsStartingWith("DISCONNECTED").empty());
  EXPECT_EQ(agent.accepted(), 1);
}

TEST(DeviceClient, ManyDevicesShareOneIoContext) {
  FakeAgent agent;
  boost::asio::io_context io;
  std::vector<std::unique_ptr<DeviceClient>> devices;
  std::atomic<int> connected{0};
  constexpr int kDevices = 500;
  for (int i = 0; i < kDevices; ++i) {
    // Heartbeats far apart with a long timeout: 500 devices pinging every 50 ms kept one fake
    // agent thread so busy under a sanitizer that some timed out and reconnected (counted twice).
    // The test is about sharing one io_context, not about timeouts.
    auto options = optionsFor({agent.endpoint()}, "d-" + std::to_string(i));
    options.heartbeat = 1000ms;
    options.timeout = 30000ms;
    options.connectTimeout = 10000ms;
    devices.push_back(std::make_unique<DeviceClient>(io, std::move(options)));
    devices.back()->onConnected([&](const ConnectedInfo&) { ++connected; });
    devices.back()->start();
  }
  std::thread runner([&] { io.run(); });
  EXPECT_TRUE(zktest::eventually([&] { return connected.load() == kDevices; }, 20000ms))
      << connected.load();
  boost::asio::post(io, [&] {
    for (auto& device : devices) device->stop();
  });
  EXPECT_TRUE(zktest::eventually([&] { return agent.closeCodesFromDevices().size() == kDevices; },
                                 20000ms));
  io.stop();
  runner.join();
}

}  // namespace
}  // namespace zkagent::device::testing
