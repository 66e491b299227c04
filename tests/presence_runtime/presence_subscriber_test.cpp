// What a subscriber sees, on the real processes: ZooKeeper, a fencing-gateway, zk-agent and
// zk-device processes, and zk-presence-watch as the subscriber. Parameters are compressed
// (heartbeat 200 ms, ping timeout 600 ms, renewal 400 ms, TTL 1200 ms, debounce 500 ms).
// "Nothing is published" is checked by reading no line for well past the debounce.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

#include "presence_cluster.hpp"
#include "zkagent/auth.hpp"
#include "zkagent/http/websocket.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using zktest::ChildProcess;
using zktest::eventually;
using zktest::presence::Cluster;
using zktest::presence::json;
using zktest::presence::parseWatchLine;
using zktest::presence::WatchLine;

// A WebSocket upgrade to the subscriber listener, as a raw client makes it: the status (101 when
// it was upgraded) and what a refusal said. Closed again at once.
struct UpgradeAnswer {
  int status = 0;  // 0: no answer within 5 s
  std::string retryAfter, body;
};
UpgradeAnswer tryUpgrade(uint16_t port, const std::string& target) {
  namespace beast = boost::beast;
  namespace websocket = beast::websocket;
  boost::asio::io_context io;
  zkagent::http::WebSocketStream<beast::tcp_stream> ws(io);
  ws.set_option(websocket::stream_base::decorator([](websocket::request_type& request) {
    request.set(beast::http::field::authorization,
                std::string("Bearer ") + zktest::presence::kGatewayToken);
  }));
  websocket::response_type response;
  UpgradeAnswer answer;
  beast::get_lowest_layer(ws).expires_after(5s);
  beast::get_lowest_layer(ws).async_connect(
      {boost::asio::ip::make_address("127.0.0.1"), port}, [&](beast::error_code error) {
        if (error) return;
        ws.async_handshake(response, "127.0.0.1", target, [&](beast::error_code refused) {
          answer = {refused ? static_cast<int>(response.result_int()) : 101,
                    std::string(response[beast::http::field::retry_after]), response.body()};
        });
      });
  io.run_for(5s);
  return answer;
}

int64_t unixNanosNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class PresenceSubscriberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("zk-subscriber-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    cluster_ = std::make_unique<Cluster>(zktest::sharedZooKeeper().connectString(),
                                         zktest::uniqueTestRoot(), dir_);
  }
  void TearDown() override {
    cluster_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Every account in `accounts` lets bob see it exactly.
  void letBobSee(const std::vector<std::string>& accounts) {
    for (const auto& account : accounts) {
      ASSERT_EQ(cluster_->setPrivacy(account, {{"granularity", "exact"}, {"contacts", {"bob"}}}),
                200);
    }
  }
  Cluster::Agent& leaderOf(const std::vector<std::string>& accounts) {
    auto& agent = cluster_->startAgent("host-a", accounts);
    for (const auto& account : accounts) {
      EXPECT_TRUE(eventually([&] { return agent.leads(account); }, 15s)) << account;
    }
    return agent;
  }
  // The next CHANGE line (other lines skipped).
  static WatchLine nextChange(ChildProcess& watch, std::chrono::milliseconds timeout) {
    return parseWatchLine(watch.waitForLine("CHANGE ", timeout));
  }
  // No line at all for `quiet`.
  static void expectSilence(ChildProcess& watch, std::chrono::milliseconds quiet) {
    auto line = watch.tryReadLine(quiet);
    EXPECT_FALSE(line.has_value()) << "unexpected: " << *line;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Cluster> cluster_;
  static inline int counter_ = 0;
};

TEST_F(PresenceSubscriberTest, ADeviceCloseIsOneOfflineAfterTheDebounceAndAQuickReconnectNothing) {
  // The reconnect below (a new zk-device process, its upgrade, the agent's lease renewal reaching
  // the gateway) must land inside the debounce. With the cluster's 500 ms that was a race on a
  // loaded machine under the sanitizers; 3 s leaves room for a 5x slowdown.
  cluster_.reset();
  cluster_ =
      std::make_unique<Cluster>(zktest::sharedZooKeeper().connectString(), zktest::uniqueTestRoot(),
                                dir_ / "debounce", zktest::presence::Timing{.debounceMs = 3000});
  const auto debounce = milliseconds(cluster_->timing().debounceMs);
  letBobSee({"acct-0"});
  auto& agent = leaderOf({"acct-0"});
  auto& watch = cluster_->startWatch("bob", "acct-0");
  const auto snapshot = Cluster::waitSnapshot(watch, 10s);
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].status(), "offline");

  auto* phone = &cluster_->startDevice({agent.deviceUrl}, "acct-0", "phone");
  phone->waitForLine("CONNECTED ", 10s);
  const auto online = nextChange(watch, 5s);
  EXPECT_EQ(online.status(), "online");
  EXPECT_GT(online.version(), snapshot[0].version());

  // Leaves and comes back inside the debounce: subscribers see nothing, neither when the close's
  // debounce would have run out (closed + debounce, inside the window below) nor after.
  const auto left = std::chrono::steady_clock::now();
  phone->signal(SIGTERM);
  ASSERT_TRUE(phone->wait(5s).exitedWith(0));
  phone = &cluster_->startDevice({agent.deviceUrl}, "acct-0", "phone");
  phone->waitForLine("CONNECTED ", 10s);
  const auto away =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - left);
  {
    SCOPED_TRACE("back after " + std::to_string(away.count()) + " ms of a " +
                 std::to_string(debounce.count()) + " ms debounce");
    expectSilence(watch, debounce + 2000ms);
  }

  const int64_t closedAt = unixNanosNow();
  phone->signal(SIGTERM);
  ASSERT_TRUE(phone->wait(5s).exitedWith(0));
  const auto offline = nextChange(watch, debounce + 10s);
  EXPECT_EQ(offline.status(), "offline");
  EXPECT_GT(offline.version(), online.version());
  EXPECT_GE(offline.unixNs() - closedAt, int64_t{cluster_->timing().debounceMs} * 1000000)
      << "published only after the debounce";
  expectSilence(watch, debounce);  // exactly one
}

TEST_F(PresenceSubscriberTest, WithTwoDevicesTheUserGoesOfflineOnlyAfterTheLastLeaves) {
  letBobSee({"acct-0"});
  auto& agent = leaderOf({"acct-0"});
  auto& watch = cluster_->startWatch("bob", "acct-0");
  Cluster::waitSnapshot(watch, 10s);
  auto& phone = cluster_->startDevice({agent.deviceUrl}, "acct-0", "phone");
  auto& laptop = cluster_->startDevice({agent.deviceUrl}, "acct-0", "laptop");
  phone.waitForLine("CONNECTED ", 10s);
  laptop.waitForLine("CONNECTED ", 10s);
  EXPECT_EQ(nextChange(watch, 5s).status(), "online");
  ASSERT_TRUE(eventually([&] { return cluster_->leases("acct-0")["devices"].size() == 2; }, 5s));

  phone.signal(SIGTERM);
  ASSERT_TRUE(phone.wait(5s).exitedWith(0));
  ASSERT_TRUE(eventually([&] { return cluster_->leases("acct-0")["devices"].size() == 1; }, 5s));
  expectSilence(watch, 3 * milliseconds(cluster_->timing().debounceMs));
  laptop.signal(SIGTERM);
  ASSERT_TRUE(laptop.wait(5s).exitedWith(0));
  EXPECT_EQ(nextChange(watch, 5s).status(), "offline");
}

TEST_F(PresenceSubscriberTest, StrangersAndBlockedViewersSeeNothingAndABlockMidStreamIsARemoval) {
  ASSERT_EQ(cluster_->setPrivacy("acct-0", {{"granularity", "exact"},
                                            {"contacts", {"bob", "mallory"}},
                                            {"blocked", {"mallory"}}}),
            200);
  ASSERT_EQ(cluster_->setPrivacy("acct-1", {{"granularity", "coarse"}, {"contacts", {"bob"}}}),
            200);
  auto& agent = leaderOf({"acct-0", "acct-1"});
  auto& bob = cluster_->startWatch("bob", "acct-0,acct-1");
  auto& eve = cluster_->startWatch("eve", "acct-0,acct-1");
  auto& mallory = cluster_->startWatch("mallory", "acct-0");
  ASSERT_EQ(Cluster::waitSnapshot(bob, 10s).size(), 2u);
  EXPECT_TRUE(Cluster::waitSnapshot(eve, 10s).empty()) << "absent, not offline";
  EXPECT_TRUE(Cluster::waitSnapshot(mallory, 10s).empty());

  auto& phone = cluster_->startDevice({agent.deviceUrl}, "acct-1", "phone");
  phone.waitForLine("CONNECTED ", 10s);
  const auto online = nextChange(bob, 5s);
  EXPECT_EQ(online.target(), "acct-1");
  EXPECT_EQ(online.status(), "online");
  phone.signal(SIGTERM);
  ASSERT_TRUE(phone.wait(5s).exitedWith(0));
  const auto recently = nextChange(bob, 5s);
  EXPECT_EQ(recently.status(), "recently") << "coarse: no minute, only recently";
  EXPECT_EQ(recently.words.size(), 6u);

  ASSERT_EQ(cluster_->setPrivacy("acct-0", {{"granularity", "exact"},
                                            {"contacts", {"bob", "mallory"}},
                                            {"blocked", {"mallory", "bob"}}}),
            200);
  const auto removed = parseWatchLine(bob.readLine(5s));
  EXPECT_EQ(removed.kind(), "REMOVED");
  EXPECT_EQ(removed.target(), "acct-0");
  auto& laptop = cluster_->startDevice({agent.deviceUrl}, "acct-0", "laptop");
  laptop.waitForLine("CONNECTED ", 10s);
  expectSilence(bob, 3 * milliseconds(cluster_->timing().debounceMs));
  expectSilence(eve, 100ms);
  expectSilence(mallory, 100ms);
}

TEST_F(PresenceSubscriberTest, VersionsNeverGoBackAcrossAGatewayRestartAndALeaderFailover) {
  letBobSee({"acct-0"});
  auto& a = leaderOf({"acct-0"});
  auto& b = cluster_->startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return b.account("acct-0").value("role", "") == "WAITING"; }, 15s));
  auto& phone = cluster_->startDevice({a.deviceUrl, b.deviceUrl}, "acct-0", "phone");
  phone.waitForLine("CONNECTED ", 10s);
  auto* watch = &cluster_->startWatch("bob", "acct-0");
  Cluster::waitSnapshot(*watch, 10s);
  ASSERT_TRUE(eventually([&] { return cluster_->leases("acct-0")["online"] == true; }, 5s));
  watch = &cluster_->startWatch("bob", "acct-0");
  const uint64_t before = Cluster::waitSnapshot(*watch, 10s).at(0).version();

  // Leader failover: the device moves to host-b; any change published carries a higher version.
  a.process->signal(SIGTERM);
  ASSERT_TRUE(a.process->wait(10s).exitedWith(0));
  phone.waitForLine(
      [](std::string_view l) {
        return l.starts_with("CONNECTED ") && l.find(" host-b ") != l.npos;
      },
      10s, "CONNECTED to host-b");
  uint64_t highest = before;
  while (auto line = watch->tryReadLine(3 * milliseconds(cluster_->timing().debounceMs))) {
    const auto change = parseWatchLine(*line);
    ASSERT_EQ(change.kind(), "CHANGE") << *line;
    EXPECT_GT(change.version(), highest) << *line;
    highest = change.version();
  }

  // Gateway restart: the view starts empty, versions still only grow.
  cluster_->stopGateway();
  EXPECT_EQ(watch->waitForLine("CLOSED ", 5s).rfind("CLOSED 1001", 0), 0u);
  cluster_->startGateway();
  auto& again = cluster_->startWatch("bob", "acct-0");
  const auto snapshot = Cluster::waitSnapshot(again, 10s);
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_GT(snapshot[0].version(), highest);
  if (snapshot[0].status() != "online") {  // the renewals rebuild the lease table, maybe later
    const auto online = nextChange(again, 5s);
    EXPECT_EQ(online.status(), "online");
    EXPECT_GT(online.version(), snapshot[0].version());
  }
}

// With viewer keys configured a subscriber is the viewer its token names: a claim for another
// viewer, a forged, expired or missing token is refused before the upgrade (the watch exits 1
// with the gateway's words), and the honest viewers see exactly what privacy gives each of them.
TEST_F(PresenceSubscriberTest, ASubscriberIsTheViewerItsTokenNamesAndSeesWhatThatViewerMay) {
  const auto secret = zktest::testCertificates() / "tokens" / "hs256.secret";
  std::ofstream(dir_ / "viewers.json")
      << json{{"presence",
               {{"viewer_auth",
                 {{"keys", {{{"kid", "v1"}, {"alg", "HS256"}, {"file", secret.string()}}}}}}}}}
             .dump();
  cluster_.reset();
  cluster_ = std::make_unique<Cluster>(
      zktest::sharedZooKeeper().connectString(), zktest::uniqueTestRoot(), dir_,
      zktest::presence::Timing{},
      std::vector<std::string>{"--config", (dir_ / "viewers.json").string()});
  ASSERT_EQ(cluster_->setPrivacy("acct-0", {{"granularity", "exact"}, {"contacts", {"bob"}}}), 200);
  const auto now = zkagent::auth::unixNow();
  auto tokenFor = [&](const std::string& viewer, std::int64_t expiresAt, std::string key) {
    zkagent::auth::TokenRequest request;
    request.subject = viewer;
    request.scope = "viewer";
    request.expiresAt = expiresAt;
    return zkagent::auth::mint({"v1", zkagent::auth::Algorithm::HS256, std::move(key)}, request);
  };
  const std::string realKey = zktest::tokenKey("hs256.secret");
  auto watchAs = [&](const std::string& claimed, const std::string& token) {
    return std::make_unique<ChildProcess>(
        zktest::binaryPath("zk-presence-watch").string(),
        std::vector<std::string>{"--gateway", cluster_->subscribeUrl(), "--viewer", claimed,
                                 "--targets", "acct-0", "--token", token});
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> refusals = {
      {"eve claiming bob", tokenFor("eve", now + 600, realKey), "HTTP 403"},
      {"forged for bob", tokenFor("bob", now + 600, std::string(40, 'x')), "HTTP 401"},
      {"bob's expired", tokenFor("bob", now - 3600, realKey), "HTTP 401"},
      {"the agents' token", zktest::presence::kGatewayToken, "HTTP 401"},
  };
  for (const auto& [what, token, expected] : refusals) {
    auto refused = watchAs("bob", token);
    EXPECT_TRUE(refused->wait(10s).exitedWith(1)) << what;
    EXPECT_NE(refused->stderrText().find(expected), std::string::npos)
        << what << ": " << refused->stderrText();
  }
  auto bob = watchAs("bob", tokenFor("bob", now + 600, realKey));
  const auto seen = Cluster::waitSnapshot(*bob, 10s);
  ASSERT_EQ(seen.size(), 1u) << "bob is a contact";
  EXPECT_EQ(seen[0].target(), "acct-0");
  auto eve = watchAs("eve", tokenFor("eve", now + 600, realKey));
  EXPECT_TRUE(Cluster::waitSnapshot(*eve, 10s).empty()) << "eve is not: absent, not offline";
}

TEST_F(PresenceSubscriberTest, BadSubscribeRequestsAndMessagesAreRefusedAndChangeNothing) {
  letBobSee({"acct-0"});
  auto& badViewer = cluster_->startWatch("bob", "acct-0", {});
  Cluster::waitSnapshot(badViewer, 10s);
  auto response = cluster_->gateway().get("/v1/presence/privacy/acct-0");
  const auto rulesBefore = response.body;
  EXPECT_EQ(cluster_->setPrivacy("acct-0", {{"granularity", "loud"}}), 400);
  EXPECT_EQ(cluster_->gateway().get("/v1/presence/privacy/acct-0").body, rulesBefore);

  badViewer.writeLine(R"({"type":"replace","targets":["acct-0"]})");
  EXPECT_EQ(badViewer.readLine(5s), R"(ERROR type: must be "add" or "remove")");
  badViewer.writeLine("add acct-0,no way");
  EXPECT_EQ(badViewer.readLine(5s).rfind("ERROR targets[1]: must match", 0), 0u);
  badViewer.writeLine("remove acct-0");
  EXPECT_EQ(badViewer.readLine(5s), "UNSUBSCRIBED acct-0");
  badViewer.writeLine("remove acct-0");  // idempotent
  EXPECT_EQ(badViewer.readLine(5s), "UNSUBSCRIBED acct-0");
  badViewer.writeLine("add acct-0");
  EXPECT_EQ(badViewer.readLine(5s).rfind("SNAPSHOT acct-0 offline ", 0), 0u);

  // Refused before the upgrade, naming the parameter (zk-presence-watch exiting 1 with the
  // gateway's words on such a refusal is tried in
  // ASubscriberIsTheViewerItsTokenNamesAndSeesWhatThatViewerMay).
  zkagent::http::ClientOptions options;
  options.port = static_cast<uint16_t>(std::stoi(cluster_->subscribeUrl().substr(15)));
  options.bearerToken = zktest::presence::kGatewayToken;
  zkagent::http::Client raw(options);
  auto noTargets = raw.get("/v1/presence/subscribe?viewer=bob");
  EXPECT_EQ(noTargets.status, 400);
  EXPECT_NE(noTargets.body.find("targets: missing"), std::string::npos) << noTargets.body;
  auto badTarget = raw.get("/v1/presence/subscribe?viewer=bob&targets=a,..");
  EXPECT_EQ(badTarget.status, 400);
  EXPECT_NE(badTarget.body.find("targets[1]"), std::string::npos) << badTarget.body;
  EXPECT_EQ(raw.get("/v1/presence/elsewhere").status, 404);
  EXPECT_EQ(raw.get("/v1/presence/subscribe?viewer=bob&targets=a").status, 426);
  ChildProcess badArgs(
      zktest::binaryPath("zk-presence-watch").string(),
      {"--gateway", cluster_->subscribeUrl(), "--viewer", "b b", "--targets", "a"});
  EXPECT_TRUE(badArgs.wait(5s).exitedWith(2));
}

TEST_F(PresenceSubscriberTest, ASlowSubscriberIsDroppedWithResubscribeWhileOthersKeepReceiving) {
  // Its own gateway: no debounce, one message per 2 ms at most, 4 unsent messages at most.
  cluster_.reset();
  cluster_ = std::make_unique<Cluster>("", zktest::uniqueTestRoot(), dir_ / "slow",
                                       zktest::presence::Timing{.debounceMs = 0, .coalesceMs = 2},
                                       std::vector<std::string>{"--subscriber-queue", "4"});
  std::vector<std::string> accounts;
  std::string targets;
  for (int i = 0; i < 200; ++i) {
    accounts.push_back("acct-" + std::to_string(i));
    targets += (i == 0 ? "" : ",") + accounts.back();
  }
  letBobSee(accounts);
  auto& slow = cluster_->startWatch("bob", targets);
  auto& fast = cluster_->startWatch("bob", targets);
  Cluster::waitSnapshot(slow, 10s);
  Cluster::waitSnapshot(fast, 10s);
  slow.signal(SIGSTOP);  // never reads again: its socket buffers fill, then its queue

  // Lease writes straight to the gateway (without ZooKeeper it fences by HWM only): every batch
  // turns all 200 accounts online or offline at once.
  auto batch = [&](bool online) {
    json entries = json::array();
    for (const auto& account : accounts) {
      json entry{{"account", account}, {"device", "phone"}, {"token", 1}, {"counter", 1}};
      if (!online) entry["reason"] = "close";
      entries.push_back(entry);
    }
    return json{{"instanceId", "host-x"}, {"sessionId", 1}, {online ? "renew" : "remove", entries}}
        .dump();
  };
  auto droppedCount = [&] {
    return zktest::metricSample(cluster_->gateway().get("/metrics").body,
                                "zkagent_gateway_presence_dropped_subscribers_total")
        .value_or(0);
  };
  auto dropped = [&] { return droppedCount() >= 1; };
  int rounds = 0;
  for (; rounds < 400 && !dropped(); ++rounds) {
    // Epochs only grow per device, so each round uses a new counter.
    auto renew = json::parse(batch(true));
    auto remove = json::parse(batch(false));
    for (auto& e : renew["renew"]) e["counter"] = rounds + 1;
    for (auto& e : remove["remove"]) e["counter"] = rounds + 1;
    ASSERT_EQ(cluster_->gateway().post("/v1/presence/leases", renew.dump()).status, 200);
    ASSERT_EQ(cluster_->gateway().post("/v1/presence/leases", remove.dump()).status, 200);
  }
  ASSERT_TRUE(dropped()) << "after " << rounds << " rounds";
  EXPECT_EQ(droppedCount(), 1) << "only the slow subscriber is dropped";
  // The fast subscriber keeps up and sees the last round: every account offline.
  std::map<std::string, std::string> last;
  EXPECT_TRUE(eventually(
      [&] {
        while (auto line = fast.tryReadLine(10ms)) {
          const auto change = parseWatchLine(*line);
          if (change.kind() == "CHANGE") last[change.target()] = change.status();
        }
        return last.size() == accounts.size() &&
               std::all_of(last.begin(), last.end(),
                           [](const auto& kv) { return kv.second == "offline"; });
      },
      10s));
  // And it still gets what comes next.
  auto renew = json::parse(batch(true));
  for (auto& e : renew["renew"]) e["counter"] = rounds + 1;
  ASSERT_EQ(cluster_->gateway().post("/v1/presence/leases", renew.dump()).status, 200);
  EXPECT_EQ(nextChange(fast, 5s).status(), "online");
  slow.signal(SIGCONT);
  EXPECT_EQ(slow.waitForLine("CLOSED ", 10s).rfind("CLOSED 4008", 0), 0u)
      << "the slow one learns it must resubscribe (or finds the socket cut)";
}

TEST_F(PresenceSubscriberTest,
       SubscribersBeyondTheCapGet503WithRetryAfterAndTheOnesInKeepReceiving) {
  // Its own gateway (lease writes by hand, no debounce), two subscriber connections at most.
  cluster_.reset();
  cluster_ = std::make_unique<Cluster>("", zktest::uniqueTestRoot(), dir_ / "capped",
                                       zktest::presence::Timing{.debounceMs = 0},
                                       std::vector<std::string>{"--max-subscribers", "2"});
  const auto port = static_cast<uint16_t>(std::stoi(cluster_->subscribeUrl().substr(15)));
  const std::string target = "/v1/presence/subscribe?viewer=bob&targets=acct-0";
  letBobSee({"acct-0"});
  auto& first = cluster_->startWatch("bob", "acct-0");
  auto& second = cluster_->startWatch("bob", "acct-0");
  ASSERT_EQ(Cluster::waitSnapshot(first, 10s).size(), 1u);
  ASSERT_EQ(Cluster::waitSnapshot(second, 10s).size(), 1u);

  const auto refused = tryUpgrade(port, target);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.retryAfter, "5");
  EXPECT_NE(refused.body.find("at most 2 (presence.max_subscribers)"), std::string::npos)
      << refused.body;
  EXPECT_EQ(
      zktest::metricSample(cluster_->gateway().get("/metrics").body,
                           R"(zkagent_gateway_presence_refused_subscribes_total{code="503"})"),
      1);

  // The two inside still get what happens.
  const json renew{
      {"instanceId", "host-x"},
      {"sessionId", 1},
      {"renew", {{{"account", "acct-0"}, {"device", "phone"}, {"token", 1}, {"counter", 1}}}}};
  ASSERT_EQ(cluster_->gateway().post("/v1/presence/leases", renew.dump()).status, 200);
  EXPECT_EQ(nextChange(first, 5s).status(), "online");
  EXPECT_EQ(nextChange(second, 5s).status(), "online");

  // One leaves: its place is taken again (once the gateway has seen it go).
  first.signal(SIGTERM);
  first.wait(5s);
  EXPECT_TRUE(eventually([&] { return tryUpgrade(port, target).status == 101; }, 5s));
}

}  // namespace
