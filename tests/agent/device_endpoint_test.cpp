// The agent's device endpoint as devices see it: real ZooKeeper, a real fencing-gateway process,
// real zk-agent processes and a small Beast WebSocket client in the test (the wire protocol of
// docs/presence-runtime.md: refusals before the upgrade, welcome, ping/pong, close codes, leases
// at the gateway).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "device_endpoint_fixture.hpp"
#include "device_socket.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/raw_connection.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zktest::eventually;
using zktest::metricSample;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

using zktest::Device;
using zktest::DeviceEndpointTest;
using zktest::devicePath;

using Agent = zktest::AgentProcess;

TEST_F(DeviceEndpointTest, LeaderWelcomesWithItsTokenAnswersEveryPingAndTheLeaseReachesTheGateway) {
  auto& a = startAgent("host-a", {"acct-0", "acct-1"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s)) << a.status().dump();
  const int64_t token = a.account("acct-0")["token"];

  Device device;
  ASSERT_FALSE(device.connect(a.devicePort, devicePath("acct-0", "phone")));
  const auto welcome = device.read();
  ASSERT_TRUE(welcome);
  EXPECT_EQ((*welcome)["type"], "welcome");
  EXPECT_EQ((*welcome)["account"], "acct-0");
  EXPECT_EQ((*welcome)["device"], "phone");
  EXPECT_EQ((*welcome)["agent"], "host-a");
  EXPECT_EQ((*welcome)["token"], token);
  EXPECT_GT((*welcome)["counter"].get<uint64_t>(), 0u);
  EXPECT_EQ((*welcome)["heartbeat_ms"], 200);
  EXPECT_EQ((*welcome)["timeout_ms"], 0);

  for (uint64_t seq = 1; seq <= 5; ++seq) device.ping(seq);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    const auto pong = device.read();
    ASSERT_TRUE(pong) << "no pong for ping " << seq;
    EXPECT_EQ(*pong, (json{{"type", "pong"}, {"seq", seq}}));
  }
  EXPECT_EQ(a.account("acct-0")["devices"], 1);
  EXPECT_EQ(a.account("acct-1")["devices"], 0);
  EXPECT_EQ(metricSample(a.metrics(), "zkagent_presence_heartbeats_total"), 5)
      << "not exactly 5 heartbeats";

  ASSERT_TRUE(eventually([&] { return leases("acct-0").contains("phone"); }, 3s))
      << gatewayClient_->get("/v1/presence/acct-0").body;
  const auto lease = leases("acct-0")["phone"];
  EXPECT_EQ(lease["agent"], "host-a");
  EXPECT_EQ(lease["token"], token);
  EXPECT_EQ(lease["counter"], (*welcome)["counter"]);

  // Renewal ticks (400 ms) keep it alive well past the gateway's TTL (1200 ms).
  ASSERT_FALSE(eventually([&] { return !leases("acct-0").contains("phone"); }, 2500ms))
      << "the lease expired: not renewed";
  EXPECT_GE(metricSample(a.metrics(), R"(zkagent_presence_lease_batches_total{result="sent"})")
                .value_or(0),
            1);

  // A device that leaves takes its lease with it at once (no TTL wait).
  device.close();
  EXPECT_TRUE(eventually([&] { return !leases("acct-0").contains("phone"); }, 1s));
  EXPECT_TRUE(eventually([&] { return a.account("acct-0")["devices"] == 0; }, 2s));
}

TEST_F(DeviceEndpointTest, BadUpgradesAreRefusedBeforeTheHandshakeNamingTheProblem) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  struct Case {
    std::string target;
    int status;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"/v1/devices?account=acct-0", 400, "device: missing"},
      {"/v1/devices?device=d", 400, "account: missing"},
      {"/v1/devices?account=acct%2F0&device=d", 400, "account: must match [A-Za-z0-9_.-]{1,128}"},
      {"/v1/devices?account=acct-0&device=..", 400, "device: must match"},
      {"/v1/devices?account=acct-0&device=" + std::string(129, 'd'), 400, "device: must match"},
      {"/v1/devices?account=acct-0&account=acct-0&device=d", 400, "account: given twice"},
      {"/v1/devices?account=other&device=d", 404, "account: 'other' is not served"},
      {"/v1/other?account=acct-0&device=d", 404, "not found"},
  };
  for (const auto& c : cases) {
    Device device;
    const auto refused = device.connect(a.devicePort, c.target);
    ASSERT_TRUE(refused) << c.target << " was accepted";
    EXPECT_EQ(refused->status, c.status) << c.target;
    const auto body = json::parse(refused->body, nullptr, false);
    EXPECT_NE(body.value("error", "").find(c.error), std::string::npos)
        << c.target << ": " << refused->body;
  }
  // A plain GET is not an upgrade.
  zkagent::http::ClientOptions options;
  options.port = a.devicePort;
  zkagent::http::Client plain(options);
  const auto r = plain.get(devicePath("acct-0", "d"));
  EXPECT_EQ(r.status, 426) << r.body;
  // A header larger than the bound is refused too, and the agent keeps serving.
  Device big;
  const auto refused =
      big.connect(a.devicePort, devicePath("acct-0", "d") + "&pad=" + std::string(10000, 'x'));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  Device good;
  EXPECT_FALSE(good.connect(a.devicePort, devicePath("acct-0", "d")));
  EXPECT_EQ(
      metricSample(a.metrics(), R"(zkagent_presence_refused_upgrades_total{reason="bad_request"})"),
      7)
      << a.metrics();
}

TEST_F(DeviceEndpointTest, NonLeaderRedirectsToTheLeadersDeviceEndpointWithTheSameQuery) {
  auto [a, b] = leaderAndFollower();
  Device device;
  const auto refused = device.connect(b.devicePort, devicePath("acct-0", "tv"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 307) << refused->body;
  EXPECT_EQ(refused->location, a.deviceUrl + devicePath("acct-0", "tv"));
  EXPECT_EQ(metricSample(b.metrics(), R"(zkagent_presence_redirects_total{code="307"})"), 1);
  // Following the redirect works.
  Device follow;
  EXPECT_FALSE(follow.connect(a.devicePort, devicePath("acct-0", "tv")));
}

// redirect=close: what a browser can follow. The upgrade completes and the agent closes at once
// with 4001 naming the leader's URL (the device's own path and query, the token left out): the
// same frame as a leader-moved close. Nothing is admitted at the non-leader.
TEST_F(DeviceEndpointTest, NonLeaderRedirectsInBandWithACloseNamingTheLeadersUrlWhenAsked) {
  auto [a, b] = leaderAndFollower();
  const std::string asked = devicePath("acct-0", "tv") + "&redirect=close";
  Device device;
  ASSERT_FALSE(device.connect(b.devicePort, asked + "&token=secret.jwt.value"));
  auto closed = device.awaitClose();
  ASSERT_TRUE(closed) << "no close after the in-band redirect";
  EXPECT_EQ(closed->code, 4001);
  EXPECT_EQ(closed->reason, a.deviceUrl + asked);
  // Ids too long for the path to fit in a close reason: the endpoint alone (the device adds its
  // own path and query, as after any leader-moved close).
  Device longIds;
  ASSERT_FALSE(longIds.connect(b.devicePort,
                               devicePath("acct-0", std::string(100, 'd')) + "&redirect=close"));
  closed = longIds.awaitClose();
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->code, 4001);
  EXPECT_EQ(closed->reason, a.deviceUrl);

  // Admitted nowhere: not counted, no connection left open, no lease written by B.
  const auto metrics = b.metrics();
  EXPECT_EQ(metricSample(metrics, R"(zkagent_presence_redirects_total{code="4001"})"), 2)
      << metrics;
  EXPECT_EQ(metricSample(metrics, R"(zkagent_presence_redirects_total{code="307"})"), std::nullopt);
  EXPECT_EQ(b.account("acct-0")["devices"], 0);
  EXPECT_TRUE(eventually(
      [&follower = b] {  // clang 14 captures no structured binding
        return metricSample(follower.metrics(),
                            R"(zkagent_presence_device_connections{state="closing"})") == 0;
      },
      2s));
  EXPECT_EQ(b.metrics().find("zkagent_presence_lease_entries_total{kind=\"renew\""),
            std::string::npos);
  EXPECT_FALSE(leases("acct-0").contains("tv"));

  // The named URL works: the device lands at the leader, keeping its parameters.
  Device follow;
  ASSERT_FALSE(follow.connect(a.devicePort, asked));
  const auto welcome = follow.read();
  ASSERT_TRUE(welcome);
  EXPECT_EQ((*welcome)["type"], "welcome");
  EXPECT_EQ((*welcome)["agent"], "host-a");

  // Bad values of the parameter are refused like any bad parameter.
  for (const auto& [query, error] : std::vector<std::pair<std::string, std::string>>{
           {"&redirect=307", "redirect: must be 'close'"},
           {"&redirect=close&redirect=close", "redirect: given twice"}}) {
    Device bad;
    const auto refused = bad.connect(b.devicePort, devicePath("acct-0", "tv") + query);
    ASSERT_TRUE(refused) << query;
    EXPECT_EQ(refused->status, 400) << query;
    EXPECT_NE(refused->body.find(error), std::string::npos) << refused->body;
  }
}

// Devices are admitted by the gate operations pass: while the successor of an expired leader
// waits out its lock delay (the old leader's writes may still be in flight), a device's upgrade
// waits with it, then is welcomed under the new token.
TEST_F(DeviceEndpointTest, ADeviceWaitsOutTheLockDelayOfASuccessorLikeAnOperation) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto bConfig = config("host-b", {"acct-0"});
  bConfig["lock_delay_ms"] = 2000;
  auto& b = startAgent(bConfig);
  ASSERT_TRUE(eventually([&] { return b.account("acct-0")["leader"].is_object(); }, 10s));
  a.process->signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return b.leads("acct-0"); }, 15s)) << b.status().dump();
  const auto remaining =
      milliseconds(b.account("acct-0").value("lock_delay_remaining_ms", int64_t{0}));
  ASSERT_GT(remaining, 500ms) << "the lock delay was over before the device could try";
  const auto asked = std::chrono::steady_clock::now();
  Device device;
  const auto refused = device.connect(b.devicePort, devicePath("acct-0", "phone"));
  ASSERT_FALSE(refused) << refused->status << " " << refused->body;
  const auto welcome = device.read();
  const auto waited = std::chrono::steady_clock::now() - asked;
  ASSERT_TRUE(welcome && (*welcome)["type"] == "welcome");
  // `remaining` was read just before asking: allow for that read, never for an early welcome.
  EXPECT_GE(waited, remaining - 200ms) << "admitted during the lock delay";
  EXPECT_EQ((*welcome)["agent"], "host-b");
  a.process->signal(SIGCONT);
}

// The bound on unfinished upgrades drops idle connects, not devices whose request is waiting for
// the agent: a device that sent its whole upgrade request while the agent could not read it (here
// SIGSTOP; in a reconnect storm, a busy endpoint thread) is upgraded although it is the oldest
// unfinished upgrade, long past the idle bound, when the next connect comes over the bound.
TEST_F(DeviceEndpointTest, TheUpgradeBoundDropsIdleConnectsButNotADeviceWaitingToBeRead) {
  constexpr size_t kSoftBound = 4096;  // agent/src/devices/device_endpoint_core.hpp kMaxUpgrading
  // This process and the agent (which inherits the limit) each hold one socket per connect.
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GE(files.rlim_cur, kSoftBound + 512) << "the fd hard limit is too low for this test";
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  const std::string upgrading = "zkagent_presence_device_connections{state=\"upgrading\"}";
  const std::string evicted = "zkagent_presence_refused_upgrades_total{reason=\"evicted\"}";
  zktest::RawConnection device(a.devicePort);  // the oldest: nothing sent yet
  ASSERT_TRUE(device.connected());
  std::vector<std::unique_ptr<zktest::RawConnection>> idle;
  for (size_t i = 1; i < kSoftBound; ++i) {
    idle.push_back(std::make_unique<zktest::RawConnection>(a.devicePort));
    ASSERT_TRUE(idle.back()->connected()) << "idle connect " << i;
  }
  ASSERT_TRUE(eventually(
      [&] { return zktest::metricSample(a.metrics(), upgrading) == double(kSoftBound); }, 20s))
      << zktest::metricSample(a.metrics(), upgrading).value_or(-1);
  std::this_thread::sleep_for(1100ms);  // every upgrade is past the idle bound (kStaleUpgrade 1 s)

  a.process->signal(SIGSTOP);
  ASSERT_TRUE(device.send("GET " + devicePath("acct-0", "phone") +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          "Sec-WebSocket-Version: 13\r\n\r\n"));
  zktest::RawConnection next(
      a.devicePort);  // over the bound: the agent finds both when it runs again
  ASSERT_TRUE(next.connected());
  a.process->signal(SIGCONT);

  EXPECT_EQ(device.readHead(10s).substr(0, 12), "HTTP/1.1 101") << "the waiting device was dropped";
  // The bound still holds against idle connects: the next connect over it drops the oldest idle
  // one (the device's own upgrade is finished and out of the count).
  zktest::RawConnection overflow(a.devicePort);
  ASSERT_TRUE(overflow.connected());
  EXPECT_TRUE(eventually([&] { return zktest::metricSample(a.metrics(), evicted) >= 1.0; }, 10s))
      << a.metrics();
}

TEST_F(DeviceEndpointTest, NoLeaderKnownAnswers503WithRetryAfter) {
  // Its gateway never answers: the agent is not ready, does not stand, nobody leads acct-0.
  auto cfg = config("host-a", {"acct-0"});
  cfg["gateway"]["url"] = "http://127.0.0.1:1";
  auto& a = startAgent(cfg);
  ASSERT_TRUE(eventually(
      [&] {
        const auto reasons = a.status()["health"]["blocked_reasons"];
        return reasons.is_array() &&
               std::find(reasons.begin(), reasons.end(), "runtime_not_ready") != reasons.end();
      },
      5s));
  ASSERT_NE(a.account("acct-0")["role"], "LEADER");
  Device device;
  const auto refused = device.connect(a.devicePort, devicePath("acct-0", "d"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(refused->retryAfter, "1");
  EXPECT_EQ(metricSample(a.metrics(), R"(zkagent_presence_redirects_total{code="503"})"), 1);
  // In band: the handshake completes and the close says "try again later"; nothing is admitted.
  Device inBand;
  ASSERT_FALSE(inBand.connect(a.devicePort, devicePath("acct-0", "d") + "&redirect=close"));
  const auto closed = inBand.awaitClose();
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->code, 1013) << closed->reason;
  EXPECT_EQ(metricSample(a.metrics(), R"(zkagent_presence_redirects_total{code="1013"})"), 1);
  EXPECT_EQ(a.account("acct-0")["devices"], 0);
}

TEST_F(DeviceEndpointTest, GarbageBinaryAndOversizedFramesCloseOnlyTheirConnection) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  Device good;
  ASSERT_FALSE(good.connect(a.devicePort, devicePath("acct-0", "good")));
  ASSERT_TRUE(good.read());  // welcome

  struct Case {
    std::string name, frame;
    bool binary;
    int code;
  };
  const std::vector<Case> cases = {{"garbage", "not json at all", false, 1003},
                                   {"array", "[1,2]", false, 1003},
                                   {"unknown", R"({"type":"hello"})", false, 1003},
                                   {"noseq", R"({"type":"ping"})", false, 1003},
                                   {"binary", "\x01\x02", true, 1003},
                                   {"big", std::string(5000, ' '), false, 1009}};
  for (const auto& c : cases) {
    Device bad;
    ASSERT_FALSE(bad.connect(a.devicePort, devicePath("acct-0", c.name)));
    ASSERT_TRUE(bad.read());
    ASSERT_TRUE(eventually([&] { return leases("acct-0").contains(c.name); }, 3s)) << c.name;
    bad.send(c.frame, c.binary);
    const auto closed = bad.awaitClose();
    ASSERT_TRUE(closed) << c.name;
    EXPECT_EQ(closed->code, c.code) << c.name << " reason=" << closed->reason;
    if (c.code == 1003) {
      EXPECT_TRUE(closed->reason.starts_with("bad frame: ")) << closed->reason;
    }
    EXPECT_TRUE(eventually([&] { return !leases("acct-0").contains(c.name); }, 1s))
        << c.name << "'s lease was not removed";
    // The other device is still served.
    good.ping(7);
    const auto pong = good.read();
    ASSERT_TRUE(pong) << "after " << c.name;
    EXPECT_EQ((*pong)["seq"], 7);
  }
  EXPECT_TRUE(leases("acct-0").contains("good"));
}

TEST_F(DeviceEndpointTest, ResignClosesDevicesWith4001NamingTheNewLeaderWhoTakesThemOver) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return b.account("acct-0")["standing"] == true; }, 10s));
  Device device;
  ASSERT_FALSE(device.connect(a.devicePort, devicePath("acct-0", "phone")));
  ASSERT_TRUE(device.read());
  ASSERT_TRUE(eventually([&] { return leases("acct-0").contains("phone"); }, 3s));

  ASSERT_EQ(a.admin->post("/v1/accounts/acct-0/resign", "").status, 202);
  const auto closed = device.awaitClose();
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->code, 4001);
  EXPECT_EQ(closed->reason, b.deviceUrl);
  EXPECT_EQ(metricSample(a.metrics(), "zkagent_presence_leader_moved_closes_total"), 1);

  ASSERT_TRUE(eventually([&] { return b.leads("acct-0"); }, 5s));
  const int64_t token = b.account("acct-0")["token"];
  Device again;
  ASSERT_FALSE(again.connect(b.devicePort, devicePath("acct-0", "phone")));
  const auto welcome = again.read();
  ASSERT_TRUE(welcome);
  EXPECT_EQ((*welcome)["token"], token);
  EXPECT_TRUE(eventually(
      [&] {
        const auto l = leases("acct-0");
        return l.contains("phone") && l["phone"]["token"] == token &&
               l["phone"]["agent"] == "host-b";
      },
      3s))
      << leases("acct-0").dump();
}

TEST_F(DeviceEndpointTest, SilentDeviceIsClosedWith4002AndItsLeaseRemoved) {
  auto cfg = config("host-a", {"acct-0"});
  cfg["presence"]["ping_timeout_ms"] = 600;
  auto& a = startAgent(cfg);
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  Device silent, chatty;
  ASSERT_FALSE(silent.connect(a.devicePort, devicePath("acct-0", "silent")));
  ASSERT_FALSE(chatty.connect(a.devicePort, devicePath("acct-0", "chatty")));
  ASSERT_TRUE(silent.read());
  ASSERT_TRUE(chatty.read());
  ASSERT_TRUE(eventually([&] { return leases("acct-0").contains("silent"); }, 3s));
  std::optional<Device::Closed> closed;
  for (uint64_t seq = 1; seq <= 10 && !closed; ++seq) {
    chatty.ping(seq);
    ASSERT_TRUE(chatty.read());
    closed = silent.awaitClose(200ms);
  }
  ASSERT_TRUE(closed) << "the silent device was not closed";
  EXPECT_EQ(closed->code, 4002);
  EXPECT_TRUE(eventually([&] { return !leases("acct-0").contains("silent"); }, 1s));
  EXPECT_TRUE(leases("acct-0").contains("chatty"));
  EXPECT_EQ(metricSample(a.metrics(), "zkagent_presence_ping_timeouts_total"), 1);
}

TEST_F(DeviceEndpointTest, SigtermClosesEveryDeviceAndTheAgentExitsZero) {
  auto& a = startAgent("host-a", {"acct-0", "acct-1"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0") && a.leads("acct-1"); }, 15s));
  Device d0, d1;
  ASSERT_FALSE(d0.connect(a.devicePort, devicePath("acct-0", "d")));
  ASSERT_FALSE(d1.connect(a.devicePort, devicePath("acct-1", "d")));
  ASSERT_TRUE(d0.read());
  ASSERT_TRUE(d1.read());
  a.process->signal(SIGTERM);
  for (auto* d : {&d0, &d1}) {
    const auto closed = d->awaitClose();
    ASSERT_TRUE(closed);
    EXPECT_TRUE(closed->code == 4001 || closed->code == 1001) << closed->code;
  }
  EXPECT_TRUE(a.process->wait(5s).exitedWith(0)) << a.process->transcript();
}

// The gateway says its lease TTL (1.2 s here) in every lease answer; an agent configured for
// another one says so once, as an error when its renewals would let leases lapse at the gateway.
TEST_F(DeviceEndpointTest, AnAgentWarnsOnceWhenTheGatewaysLeaseTtlIsNotItsOwn) {
  struct Case {
    std::string id;
    int renewMs, ttlMs;
    std::string expected;  // the line the agent logs; empty: none
  };
  const std::vector<Case> cases = {
      {"host-a", 400, 1200, ""},
      {"host-b", 400, 3000, "presence lease ttl differs: the gateway's is 1200 ms"},
      {"host-c", 700, 3000, "presence lease ttl too short: the gateway's is 1200 ms"}};
  for (const Case& c : cases) {
    auto cfg = config(c.id, {"acct-" + c.id});
    cfg["presence"]["renew_interval_ms"] = c.renewMs;
    cfg["presence"]["lease_ttl_ms"] = c.ttlMs;
    auto& agent = startAgent(cfg);
    ASSERT_TRUE(eventually([&] { return agent.leads("acct-" + c.id); }, 15s)) << c.id;
    Device device;
    ASSERT_FALSE(device.connect(agent.devicePort, devicePath("acct-" + c.id, "phone")));
    ASSERT_TRUE(device.read()) << c.id << ": no welcome";
    ASSERT_TRUE(eventually(
        [&] {
          return zktest::metricSample(agent.metrics(),
                                      "zkagent_presence_gateway_lease_ttl_seconds") == 1.2;
        },
        5s))
        << c.id << "\n"
        << agent.metrics();
    // Two renewal rounds more, each answered with the same TTL: still one line.
    const auto batches = [&] {
      return zktest::metricSample(agent.metrics(),
                                  "zkagent_presence_lease_batches_total{result=\"sent\"}")
          .value_or(0);
    };
    const double sent = batches();
    ASSERT_TRUE(eventually([&] { return batches() >= sent + 2; }, 5s)) << c.id;
    const std::string log = agent.process->stderrText();
    size_t lines = 0;
    for (size_t at = 0; (at = log.find("presence lease ttl ", at)) != std::string::npos; ++at) {
      ++lines;
    }
    if (c.expected.empty()) {
      EXPECT_EQ(lines, 0u) << c.id << ": " << log;
    } else {
      EXPECT_NE(log.find(c.expected), std::string::npos) << c.id << ": " << log;
      EXPECT_EQ(lines, 1u) << c.id << ": " << log;
    }
  }
}

}  // namespace
