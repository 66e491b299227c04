// The agent in-process: its gate against a real ZooKeeper behind a proxy (what a refusal leaves
// behind when ZooKeeper answers after the gate gave up waiting), the gateway heartbeat failures
// its link counts and its metrics report, and the heartbeats to every shard owner of a gateway
// cluster (their state, their series, and the routes passing over an owner that is down).
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "operations/gateway_link.hpp"
#include "operations/owner_links.hpp"
#include "zkagent/agent.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"
#include "zkagent/naming.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_server.hpp"

// The late answer of the strict check lands in a stack frame that has returned; AddressSanitizer
// reports that only with use-after-return detection on (a no-op in builds without it).
extern "C" const char* __asan_default_options() { return "detect_stack_use_after_return=1"; }

namespace {

using namespace std::chrono_literals;

// An io_context run on two threads until destruction (which an early ASSERT return reaches too).
struct IoThreads {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::thread> threads;
  void run() {
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~IoThreads() {
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
  }
};

namespace metrics = zkagent::metrics;
using zkagent::agent::Gate;
using zktest::eventually;

// One account, no gateway heartbeat, the admin API on a free port.
zkagent::agent::Config agentConfig(const std::string& zookeeperHosts) {
  zkagent::agent::Config config;
  config.instanceId = "host-a";
  config.zookeeper.hosts = zookeeperHosts;
  config.zookeeper.root = zktest::uniqueTestRoot() + "/accounts";
  config.zookeeper.agentsPath = zktest::uniqueTestRoot() + "/agents";
  config.accounts = {"acct-0"};
  config.gateway.address = {"127.0.0.1", zktest::freeLoopbackPort()};
  config.gateway.heartbeatInterval = 0ms;  // the link counts as up
  config.admin.listen = {"127.0.0.1", 0};
  config.presence.listen = {"127.0.0.1", 0};  // tests run side by side: no fixed port
  config.health.interval = 100ms;
  config.health.ttl = 20000ms;
  return config;
}

nlohmann::json statusOf(const zkagent::agent::Agent& agent) {
  return nlohmann::json::parse(agent.statusJson());
}

// Shuts the agent down and waits for it (the gateway link stops at once, the session within
// its stop deadline).
void shutDown(zkagent::agent::Agent& agent) {
  auto stopped = std::make_shared<std::promise<void>>();
  agent.shutdown([stopped] { stopped->set_value(); });
  EXPECT_EQ(stopped->get_future().wait_for(20s), std::future_status::ready);
}

// An agent with the strict gate, its ZooKeeper link through a proxy the test can blackhole,
// started on two io threads.
struct StrictGateAgent {
  StrictGateAgent(uint16_t zookeeperPort, std::chrono::milliseconds sessionTimeout)
      : proxy(zookeeperPort), agent(runner.io, config(proxy.connectString(), sessionTimeout)) {
    agent.start();
    runner.run();
  }
  static zkagent::agent::Config config(const std::string& hosts,
                                       std::chrono::milliseconds sessionTimeout) {
    auto config = agentConfig(hosts);
    config.zookeeper.sessionTimeout = sessionTimeout;
    config.gate = zkagent::agent::GateMode::Strict;
    return config;
  }
  // One operation through the gate that does nothing.
  auto execute() {
    return agent.gate().execute("acct-0", [](const auto&) {});
  }

  zktest::TcpProxy proxy;
  IoThreads runner;
  zkagent::agent::Agent agent;
};

TEST(AgentGateTest, StrictGateRefusalSurvivesZooKeeperAnsweringAfterTheGateGaveUp) {
  // The gate waits the configured session timeout (600 ms); the server grants at least 6 s, so
  // the client notices the dead link only after about 4 s (two thirds of the negotiated timeout)
  // and only then fails the sync the gate had sent: an answer well after the gate returned.
  zktest::ZooKeeperOptions options;
  options.minSessionTimeout = 6000ms;
  zktest::ZooKeeperServer zk(options);
  StrictGateAgent strict(zk.port(), 600ms);
  auto& agent = strict.agent;
  ASSERT_TRUE(eventually([&] { return strict.execute().executed(); }, 20s)) << agent.statusJson();

  strict.proxy.setMode(zktest::TcpProxy::Mode::blackhole);
  const auto refused = strict.execute();
  EXPECT_EQ(refused.result, Gate::Result::Suspended) << refused.reason();

  // The client gives up on the link and fails the sync the gate had sent: that answer reaches the
  // abandoned gate call meanwhile (it is posted to the account's strand as the link is dropped).
  auto sessionState = [&] { return statusOf(agent)["session"]["state"]; };
  ASSERT_TRUE(eventually([&] { return sessionState() != "connected"; }, 20s)) << agent.statusJson();
  EXPECT_EQ(strict.execute().result, Gate::Result::Suspended);
  shutDown(agent);
}

// Operations waiting on the gate hold no thread: with ZooKeeper blackholed, the strict check of
// each waits out the session timeout, yet a status request sent after more of them than the
// admin server has handler threads (it used to have 16, each blocked by one operation) is
// answered before any of them.
TEST(AgentGateTest, OperationsWaitingOnTheStrictGateHoldNoThread) {
  zktest::ZooKeeperServer zk;
  StrictGateAgent strict(zk.port(), 4000ms);
  auto& agent = strict.agent;
  ASSERT_TRUE(eventually([&] { return strict.execute().executed(); }, 20s)) << agent.statusJson();
  strict.proxy.setMode(zktest::TcpProxy::Mode::blackhole);

  namespace asio = boost::asio;
  asio::io_context io;
  const asio::ip::tcp::endpoint admin(asio::ip::make_address("127.0.0.1"), agent.adminPort());
  const std::string operation =
      "POST /v1/accounts/acct-0/ops HTTP/1.1\r\nHost: agent\r\nContent-Type: "
      "application/json\r\nContent-Length: 2\r\n\r\n{}";
  constexpr int kWaiting = 24;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  for (int i = 0; i < kWaiting; ++i) {
    sockets.push_back(std::make_unique<asio::ip::tcp::socket>(io));
    sockets.back()->connect(admin);
    asio::write(*sockets.back(), asio::buffer(operation));
  }
  std::atomic<int> answered{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kWaiting; ++i) {
    readers.emplace_back([&, i] {
      char byte = 0;
      boost::system::error_code ignored;
      asio::read(*sockets[static_cast<size_t>(i)], asio::buffer(&byte, 1), ignored);
      ++answered;
    });
  }
  zkagent::http::Client client({.port = agent.adminPort(), .requestTimeout = 20000ms});
  const auto status = client.get("/v1/status");
  const int statusOrder = answered++;
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(status.status, 200) << status.transportError;
  EXPECT_EQ(statusOrder, 0) << "the status waited for " << statusOrder << " operations";
  strict.proxy.setMode(zktest::TcpProxy::Mode::pass);
  shutDown(agent);
}

// The link counts each failed heartbeat into the metric as it fails: no scrape needed (a copy
// brought up to date at scrape time counted twice when two scrapes ran at once).
TEST(AgentMetricsTest, GatewayLinkCountsEachFailedHeartbeatIntoTheMetricAsItFails) {
  metrics::Registry registry;
  auto& failures = registry.counter("failures_total", "test").with({});
  zkagent::agent::Config::Gateway gateway;
  gateway.address = {"127.0.0.1", zktest::freeLoopbackPort()};
  gateway.heartbeatInterval = 1ms;
  gateway.heartbeatTimeout = 50ms;
  IoThreads runner;
  auto link = std::make_shared<zkagent::agent::detail::GatewayLink>(
      runner.io, gateway, "host-a", failures,
      std::make_shared<zkagent::agent::detail::ShardRoutes>(gateway));
  link->start([](bool) {});
  runner.run();
  EXPECT_TRUE(eventually([&] { return failures.value() >= 20; }, 10s));
  link->stop();
}

// However many scrapes run at once, /metrics reports the failures the status reports.
// A link whose heartbeat is still unanswered when its io_context goes must go with it: nothing of
// it may stay behind on another thread (a completion left there would later run into the
// destroyed io_context's timers; ASan saw that at shutdown).
TEST(AgentGatewayLinkTest, ALinkWithAHeartbeatInFlightGoesWithItsIoContext) {
  namespace asio = boost::asio;
  asio::io_context peerIo;
  asio::ip::tcp::acceptor silentGateway(peerIo, {asio::ip::make_address("127.0.0.1"), 0});
  silentGateway.non_blocking(true);
  metrics::Registry registry;
  auto& failures = registry.counter("failures_total", "test").with({});
  zkagent::agent::Config::Gateway gateway;
  gateway.address = {"127.0.0.1", silentGateway.local_endpoint().port()};
  gateway.heartbeatInterval = 10ms;
  gateway.heartbeatTimeout = 60s;  // the beat stays in flight for the whole test
  std::weak_ptr<zkagent::agent::detail::GatewayLink> weak;
  asio::ip::tcp::socket accepted(peerIo);
  {
    IoThreads runner;
    auto link = std::make_shared<zkagent::agent::detail::GatewayLink>(
        runner.io, gateway, "host-a", failures,
        std::make_shared<zkagent::agent::detail::ShardRoutes>(gateway));
    weak = link;
    link->start([](bool) {});
    runner.run();
    boost::system::error_code ec;
    ASSERT_TRUE(eventually([&] { return !silentGateway.accept(accepted, ec); }, 10s))
        << "the heartbeat never connected";
    link->stop();
  }
  EXPECT_TRUE(weak.expired()) << "the link outlived its io_context (held by a pending heartbeat)";
  EXPECT_EQ(failures.value(), 0) << "no heartbeat can have timed out";
}

// A gateway of a cluster that the agent sends an operation to and that does not own the account's
// shard answers 421 naming the owner: the link sends the operation once more, to that owner, and
// the caller gets the owner's answer. A second 421 (the map is moving) goes back to the caller
// as it is: one follow per request, never a loop. (Process tests route by the watched shard map,
// before any 421; this is the fallback when the map is not known yet.)
TEST(AgentGatewayLinkTest, A421IsFollowedOnceToTheOwnerItNames) {
  namespace http = zkagent::http;
  IoThreads servers;
  std::atomic<int> atOwner{0}, atOther{0};
  std::atomic<bool> ownerMoved{false};
  std::string ownerBody, otherUrl;
  // The configured gateway names the owner; once the shard "moves", the owner names the
  // configured one.
  const auto answer = [](int status, std::string body) {
    http::Response response;
    response.status = status;
    response.body = std::move(body);
    return response;
  };
  const auto misdirect = [&answer](const std::string& to) {
    return answer(
        421,
        nlohmann::json{{"error", "elsewhere"},
                       {"shard", zkagent::naming::shardId(zkagent::naming::shardOf("acc-1", 8))},
                       {"shards", 8},
                       {"owner", to}}
            .dump());
  };
  http::Router ownerRoutes;
  ownerRoutes.add(http::Method::Post, "/v1/ops", [&](const http::Request& request) {
    ++atOwner;
    if (ownerMoved) return misdirect(otherUrl);
    ownerBody = request.body;
    return answer(200, R"({"accepted":true})");
  });
  http::Server owner(servers.io, {}, std::move(ownerRoutes));
  const std::string ownerUrl = "http://127.0.0.1:" + std::to_string(owner.port());
  http::Router otherRoutes;
  otherRoutes.add(http::Method::Post, "/v1/ops", [&](const http::Request&) {
    ++atOther;
    return misdirect(ownerUrl);
  });
  http::Server other(servers.io, {}, std::move(otherRoutes));
  otherUrl = "http://127.0.0.1:" + std::to_string(other.port());
  owner.start();
  other.start();
  servers.run();

  metrics::Registry registry;
  auto& failures = registry.counter("failures_total", "test").with({});
  zkagent::agent::Config::Gateway gateway;
  gateway.address = {"127.0.0.1", other.port()};
  gateway.heartbeatInterval = 0ms;  // no heartbeats: only the operations reach the servers
  IoThreads runner;
  auto link = std::make_shared<zkagent::agent::detail::GatewayLink>(
      runner.io, gateway, "host-a", failures,
      std::make_shared<zkagent::agent::detail::ShardRoutes>(gateway));
  runner.run();
  const auto forward = [&](const std::string& body) {
    std::promise<http::ClientResponse> answered;
    link->forward("acc-1", body, [&](http::ClientResponse r) { answered.set_value(std::move(r)); });
    return answered.get_future().get();
  };
  const auto first = forward(R"({"opId":"op-1"})");
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(atOther.load(), 1);
  EXPECT_EQ(atOwner.load(), 1);
  EXPECT_EQ(ownerBody, R"({"opId":"op-1"})") << "the owner gets the operation as it was sent";
  // Learned: the next operation for the shard goes to the owner straight away.
  EXPECT_EQ(forward(R"({"opId":"op-2"})").status, 200);
  EXPECT_EQ(atOther.load(), 1);
  EXPECT_EQ(atOwner.load(), 2);
  // Each names the other: the learned owner's 421 is followed once, and the second 421 is the
  // caller's answer.
  ownerMoved = true;
  const auto moving = forward(R"({"opId":"op-3"})");
  EXPECT_EQ(moving.status, 421) << moving.body;
  EXPECT_EQ(atOwner.load(), 3);
  EXPECT_EQ(atOther.load(), 2);
  link->stop();
}

namespace http = zkagent::http;
namespace detail = zkagent::agent::detail;

// A shard owner that answers heartbeats and counts them with the instance they name.
struct AnsweringOwner {
  explicit AnsweringOwner(boost::asio::io_context& io) : server(io, {}, routes()) {
    server.start();
  }
  http::Router routes() {
    http::Router router;
    router.add(http::Method::Get, "/healthz", [this](const http::Request& request) {
      if (request.query == "instance=host-a") ++beats;
      return http::Response::json(200, R"({"status":"ok"})");
    });
    return router;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server.port()); }
  std::atomic<int> beats{0};
  http::Server server;
};

// A shard owner that takes connections (the kernel's backlog) and never answers: a paused process.
struct SilentOwner {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor{io, {boost::asio::ip::make_address("127.0.0.1"), 0}};
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port());
  }
};

zkagent::agent::Config::Gateway clusterGateway(uint16_t configuredPort) {
  zkagent::agent::Config::Gateway gateway;
  gateway.address = {"127.0.0.1", configuredPort};
  gateway.heartbeatInterval = 20ms;
  gateway.heartbeatTimeout = 100ms;
  gateway.requestTimeout = 3000ms;  // what an operation sent to a silent owner would wait
  return gateway;
}

std::string misdirectedTo(const std::string& owner) {
  return nlohmann::json{{"error", "elsewhere"},
                        {"shard", zkagent::naming::shardId(zkagent::naming::shardOf("acc-1", 8))},
                        {"shards", 8},
                        {"owner", owner}}
      .dump();
}

// Every owner of the map gets its own heartbeat with the agent's instance; each is up or down by
// its own answers, with its own failure count and its own series; an owner that leaves a complete
// map loses its heartbeat and its series, one missing from a partial view keeps them.
TEST(AgentOwnerLinksTest, EachOwnerInTheMapIsUpOrDownByItsOwnHeartbeatAndLeavesWithTheMap) {
  IoThreads servers;
  AnsweringOwner answering(servers.io);
  SilentOwner silent;
  servers.run();
  metrics::Registry registry;
  auto& up = registry.gauge("owner_up", "test", {"owner"});
  auto& failures = registry.counter("owner_failures_total", "test", {"owner"});
  IoThreads runner;
  auto links =
      std::make_shared<detail::OwnerLinks>(runner.io, clusterGateway(zktest::freeLoopbackPort()),
                                           "host-a", detail::OwnerLinks::Families{up, failures});
  runner.run();
  const auto stateOf = [&](const std::string& url) {
    for (const auto& link : links->links()) {
      if (link.owner == url) return link.state;
    }
    return std::string("absent");
  };
  links->follow({{answering.url(), silent.url()}, true});
  ASSERT_TRUE(eventually(
      [&] { return stateOf(answering.url()) == "up" && stateOf(silent.url()) == "down"; }, 10s))
      << stateOf(answering.url()) << " " << stateOf(silent.url());
  EXPECT_FALSE(links->down(answering.url()));
  EXPECT_TRUE(links->down(silent.url()));
  EXPECT_FALSE(links->down("http://127.0.0.1:1")) << "an owner without a heartbeat is tried";
  EXPECT_GT(answering.beats.load(), 0) << "the beats name the agent's instance";
  EXPECT_TRUE(eventually([&] { return failures.with({silent.url()}).value() >= 1; }, 10s));
  EXPECT_EQ(failures.with({answering.url()}).value(), 0);
  EXPECT_EQ(up.with({answering.url()}).value(), 1);
  EXPECT_EQ(up.with({silent.url()}).value(), 0);

  links->follow({{answering.url()}, false});  // the silent owner's shard is being read again
  EXPECT_EQ(stateOf(silent.url()), "down");
  links->follow({{answering.url()}, true});  // it owns nothing any more
  EXPECT_EQ(stateOf(silent.url()), "absent");
  const auto text = registry.expose();
  EXPECT_EQ(text.find(silent.url()), std::string::npos) << text;
  EXPECT_NE(text.find("owner_up{owner=\"" + answering.url() + "\"} 1"), std::string::npos) << text;
  links->stop();
}

// An operation for a shard whose owner's heartbeat says down is not sent into the owner's
// timeout: the configured gateway's 421 naming that owner becomes a 503 at once, and with the
// configured gateway down as well nothing is sent.
TEST(AgentOwnerLinksTest, AnOperationForAShardWhoseOwnerIsDownIsAnsweredAtOnce) {
  IoThreads servers;
  SilentOwner owner;
  std::atomic<int> atConfigured{0};
  http::Router configuredRoutes;
  configuredRoutes.add(http::Method::Post, "/v1/ops", [&](const http::Request&) {
    ++atConfigured;
    http::Response response;
    response.status = 421;
    response.body = misdirectedTo(owner.url());
    return response;
  });
  configuredRoutes.add(http::Method::Get, "/healthz", [](const http::Request&) {
    return http::Response::json(200, R"({"status":"ok"})");
  });
  auto configured = std::make_unique<http::Server>(servers.io, http::ServerOptions{},
                                                   std::move(configuredRoutes));
  configured->start();
  servers.run();

  metrics::Registry registry;
  auto& up = registry.gauge("owner_up", "test", {"owner"});
  auto& failures = registry.counter("owner_failures_total", "test", {"owner"});
  auto& linkFailures = registry.counter("link_failures_total", "test").with({});
  const auto gateway = clusterGateway(configured->port());
  IoThreads runner;
  auto routes = std::make_shared<detail::ShardRoutes>(gateway);
  auto links = std::make_shared<detail::OwnerLinks>(runner.io, gateway, "host-a",
                                                    detail::OwnerLinks::Families{up, failures});
  routes->avoidDown([links](const std::string& url) { return links->down(url); });
  auto link =
      std::make_shared<detail::GatewayLink>(runner.io, gateway, "host-a", linkFailures, routes);
  link->start([](bool) {});
  runner.run();
  links->follow({{owner.url()}, true});
  ASSERT_TRUE(eventually([&] { return links->down(owner.url()) && link->up(); }, 10s));

  const auto forward = [&] {
    std::promise<http::ClientResponse> answered;
    link->forward("acc-1", R"({"opId":"op-1"})",
                  [&](http::ClientResponse r) { answered.set_value(std::move(r)); });
    const auto sentAt = std::chrono::steady_clock::now();
    auto answer = answered.get_future().get();
    return std::make_pair(answer, std::chrono::steady_clock::now() - sentAt);
  };
  const auto first = forward();
  EXPECT_EQ(first.first.status, 503)
      << first.first.status << " " << first.first.body << " " << first.first.transportError;
  EXPECT_EQ(nlohmann::json::parse(first.first.body, nullptr, false).value("owner", ""),
            owner.url());
  EXPECT_LT(first.second, gateway.requestTimeout / 3) << "sent into the silent owner's timeout";
  EXPECT_EQ(atConfigured.load(), 1);
  // The 421's owner is remembered for the shard, and passed over while it is down.
  const auto second = forward();
  EXPECT_EQ(second.first.status, 503) << second.first.body;
  EXPECT_LT(second.second, gateway.requestTimeout / 3);
  EXPECT_EQ(atConfigured.load(), 2);

  // The configured gateway goes too: nothing is sent, the answer is the same.
  configured->stop();
  ASSERT_TRUE(eventually([&] { return !link->up() && link->missedHeartbeats() > 0; }, 10s));
  ASSERT_TRUE(eventually(
      [&] {
        const auto third = forward();
        return third.first.status == 503 && third.second < gateway.requestTimeout / 3;
      },
      10s));
  EXPECT_EQ(atConfigured.load(), 2);
  links->stop();
  link->stop();
}

TEST(AgentMetricsTest, MetricsAndStatusAgreeOnGatewayHeartbeatFailuresUnderConcurrentScrapes) {
  auto config = agentConfig(zktest::sharedZooKeeper().connectString());
  config.gateway.heartbeatInterval = 1ms;  // below what the config file allows: many failures
  config.gateway.heartbeatTimeout = 50ms;
  IoThreads runner;
  zkagent::agent::Agent agent(runner.io, config);
  agent.start();
  runner.run();

  auto failures = [&] { return statusOf(agent)["gateway"]["failed_heartbeats"].get<uint64_t>(); };
  std::atomic<bool> scraping{true};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 4; ++i) {
    scrapers.emplace_back([&] {
      while (scraping) (void)agent.metricsText();
    });
  }
  EXPECT_TRUE(eventually([&] { return failures() >= 300; }, 30s));
  scraping = false;
  for (auto& t : scrapers) t.join();
  shutDown(agent);  // no heartbeat after this

  const std::string text = agent.metricsText();
  const std::string family = "zkagent_gateway_heartbeat_failures_total ";
  const auto at = text.find("\n" + family);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(std::stod(text.substr(at + 1 + family.size())), static_cast<double>(failures()));
}

}  // namespace
