// The agent's device endpoint as devices see it: real ZooKeeper, a real fencing-gateway process,
// real zk-agent processes and a small Beast WebSocket client in the test (the wire protocol of
// docs/presence-runtime.md: refusals before the upgrade, welcome, ping/pong, close codes, leases
// at the gateway).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zktest::eventually;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

// One device connection, synchronous for the test but every wait bounded.
class Device {
 public:
  struct Refused {
    int status = 0;
    std::string location, retryAfter, body;
  };
  struct Closed {
    int code = 0;  // 0: the connection ended without a close frame
    std::string reason;
  };

  // nullopt: upgraded. Otherwise the HTTP answer that refused the upgrade.
  std::optional<Refused> connect(uint16_t port, const std::string& target) {
    beast::error_code ec;
    ws_.next_layer().expires_after(5s);
    ws_.next_layer().async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                   [&](beast::error_code e) { ec = e; });
    run();
    if (ec) return Refused{-1, "", "", ec.message()};
    websocket::response_type response;
    ws_.async_handshake(response, "127.0.0.1:" + std::to_string(port), target,
                        [&](beast::error_code e) { ec = e; });
    run();
    beast::get_lowest_layer(ws_).expires_never();
    if (!ec) return std::nullopt;
    return Refused{static_cast<int>(response.result_int()),
                   std::string(response[bhttp::field::location]),
                   std::string(response[bhttp::field::retry_after]), response.body()};
  }

  void send(const std::string& text, bool binary = false) {
    ws_.binary(binary);
    ws_.write(asio::buffer(text));
  }
  void ping(uint64_t seq) { send(json{{"type", "ping"}, {"seq", seq}}.dump()); }

  // The next frame, or nullopt when the connection closed or nothing came in time (the read
  // then stays pending for the next call: cancelling it would fail the stream).
  std::optional<json> read(milliseconds timeout = 5s) {
    if (!reading_) {
      reading_ = true;
      done_ = false;
      buffer_.consume(buffer_.size());
      ws_.async_read(buffer_, [this](beast::error_code e, size_t) {
        readError_ = e;
        done_ = true;
      });
    }
    run(timeout);
    if (!done_) return std::nullopt;
    reading_ = false;
    if (readError_) {
      closed_ = Closed{readError_ == websocket::error::closed ? ws_.reason().code : 0,
                       std::string(ws_.reason().reason.c_str())};
      return std::nullopt;
    }
    return json::parse(beast::buffers_to_string(buffer_.data()), nullptr, false);
  }

  // Reads (answering nothing) until the agent closes; the close code and reason it sent.
  std::optional<Closed> awaitClose(milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && std::chrono::steady_clock::now() < deadline) {
      read(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
    }
    return closed_;
  }

  void close() {
    beast::error_code ec;
    ws_.async_close(websocket::close_code::normal, [&](beast::error_code e) { ec = e; });
    run(2s);
  }

 private:
  void run(milliseconds timeout = 5s) {
    io_.restart();
    io_.run_for(timeout);
  }

  asio::io_context io_;
  websocket::stream<beast::tcp_stream> ws_{io_};
  beast::flat_buffer buffer_;
  bool reading_ = false, done_ = false;
  beast::error_code readError_;
  std::optional<Closed> closed_;
};

using Agent = zktest::AgentProcess;

std::string devicePath(const std::string& account, const std::string& device) {
  return "/v1/devices?account=" + account + "&device=" + device;
}

class DeviceEndpointTest : public zktest::AgentProcessFixture {
 protected:
  DeviceEndpointTest()
      : AgentProcessFixture("zk-device-endpoint-test",
                            {"--lease-ttl-ms", "1200", "--lease-sweep-ms", "100"}) {}
  void SetUp() override {
    AgentProcessFixture::SetUp();
    zkagent::http::ClientOptions options;
    options.port = gateway_->port();
    gatewayClient_ = std::make_unique<zkagent::http::Client>(options);
  }

  json config(const std::string& id, const std::vector<std::string>& accounts) const {
    return zktest::agentConfig(site(), id, accounts,
                               {// No admin token: the resign below needs the explicit opt-out.
                                {"admin", {{"open_operator_actions", true}}},
                                {"presence",
                                 {{"heartbeat_ms", 200},
                                  {"ping_timeout_ms", 0},  // tests that want the check turn it on
                                  {"check_interval_ms", 100},
                                  {"renew_interval_ms", 400},
                                  {"lease_ttl_ms", 1200}}}});
  }

  Agent& startAgent(const json& cfg) { return addAgent(cfg); }
  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts) {
    return startAgent(config(id, accounts));
  }

  // The gateway's leases of `account`: device -> {agent, token, counter}.
  json leases(const std::string& account) const {
    auto r = gatewayClient_->get("/v1/presence/" + account);
    if (r.status != 200) return json();
    json out = json::object();
    for (const auto& d : json::parse(r.body).value("devices", json::array())) {
      out[d["device"].get<std::string>()] = {{"agent", d["agent"]},
                                             {"token", d["epoch"]["token"]},
                                             {"counter", d["epoch"]["counter"]}};
    }
    return out;
  }

  std::unique_ptr<zkagent::http::Client> gatewayClient_;
};

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
  EXPECT_NE(a.metrics().find("zkagent_presence_heartbeats_total 5"), std::string::npos);

  ASSERT_TRUE(eventually([&] { return leases("acct-0").contains("phone"); }, 3s))
      << gatewayClient_->get("/v1/presence/acct-0").body;
  const auto lease = leases("acct-0")["phone"];
  EXPECT_EQ(lease["agent"], "host-a");
  EXPECT_EQ(lease["token"], token);
  EXPECT_EQ(lease["counter"], (*welcome)["counter"]);

  // Renewal ticks (400 ms) keep it alive well past the gateway's TTL (1200 ms).
  ASSERT_FALSE(eventually([&] { return !leases("acct-0").contains("phone"); }, 2500ms))
      << "the lease expired: not renewed";
  EXPECT_NE(a.metrics().find("zkagent_presence_lease_batches_total{result=\"sent\"}"),
            std::string::npos);

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
  EXPECT_NE(a.metrics().find("zkagent_presence_refused_upgrades_total{reason=\"bad_request\"} 7"),
            std::string::npos)
      << a.metrics();
}

TEST_F(DeviceEndpointTest, NonLeaderRedirectsToTheLeadersDeviceEndpointWithTheSameQuery) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually(
      [&] {
        return b.account("acct-0")["leader"].is_object() &&
               b.account("acct-0")["leader"]["instance"] == "host-a";
      },
      10s))
      << b.status().dump();
  Device device;
  const auto refused = device.connect(b.devicePort, devicePath("acct-0", "tv"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 307) << refused->body;
  EXPECT_EQ(refused->location, a.deviceUrl + devicePath("acct-0", "tv"));
  EXPECT_NE(b.metrics().find("zkagent_presence_redirects_total{code=\"307\"} 1"),
            std::string::npos);
  // Following the redirect works.
  Device follow;
  EXPECT_FALSE(follow.connect(a.devicePort, devicePath("acct-0", "tv")));
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
  EXPECT_NE(a.metrics().find("zkagent_presence_redirects_total{code=\"503\"} 1"),
            std::string::npos);
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
  EXPECT_NE(a.metrics().find("zkagent_presence_leader_moved_closes_total 1"), std::string::npos);

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
  EXPECT_NE(a.metrics().find("zkagent_presence_ping_timeouts_total 1"), std::string::npos);
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

}  // namespace
