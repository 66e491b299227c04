// A cluster of real fencing-gateway processes on one ZooKeeper (docs/gateway-cluster.md): every
// shard has one owner, the others answer 421 naming it, the shard count is fixed, an owner's
// kill -9, SIGTERM or SIGSTOP moves its shards without any gateway accepting a stale token, and
// the shards are spread evenly over the gateways standing; presence privacy rules set at any
// gateway are applied by all (kept in ZooKeeper), and a target's versions grow across a move.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "temp_dir.hpp"
#include "zkagent/http.hpp"
#include "zkagent/naming.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/znode.hpp"
#include "zktest/zookeeper_server.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace gateway_cluster_test {

constexpr std::uint32_t kShards = 8;
constexpr auto kSessionTimeout = 1500ms;
constexpr const char* kOperatorToken = "cluster-operator-token";
using Clock = std::chrono::steady_clock;

std::int64_t millisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// One cluster member on a loopback port chosen up front (its URL is advertised before it listens).
class ClusterGateway {
 public:
  ClusterGateway(const std::filesystem::path& dataDir, const std::string& zkHosts,
                 const std::string& root, const std::string& id, std::uint32_t shards = kShards)
      : port_(zktest::freeLoopbackPort()), id_(id) {
    const auto operatorToken = dataDir.string() + ".operator-token";
    std::ofstream(operatorToken) << kOperatorToken;
    process_ = std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(),
        std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(port_), "--data-dir",
                                 dataDir.string(), "--zk", zkHosts, "--root", root,
                                 "--zk-session-timeout-ms", std::to_string(kSessionTimeout.count()),
                                 "--cluster-shards", std::to_string(shards), "--gateway-id", id,
                                 "--advertise-url", url(),
                                 // Not the default (port + 1): that may be another member's.
                                 "--subscribe-listen", "127.0.0.1:0", "--operator-token-file",
                                 operatorToken, "--debounce-ms", "0", "--coalesce-ms", "10"});
  }
  void awaitListening() {
    process_->waitForLine("LISTENING 127.0.0.1:", 30s);
    const auto line = process_->waitForLine("SUBSCRIBE-LISTENING 127.0.0.1:", 5s);
    subscribePort_ = static_cast<std::uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  }
  std::uint16_t subscribePort() const { return subscribePort_; }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& id() const { return id_; }
  http::Client client(std::chrono::milliseconds timeout = 5s) const {
    return http::Client(http::ClientOptions{.port = port_, .requestTimeout = timeout});
  }
  http::Client operatorClient(std::chrono::milliseconds timeout = 10s) const {
    return http::Client(http::ClientOptions{
        .port = port_, .requestTimeout = timeout, .bearerToken = kOperatorToken});
  }
  zktest::ChildProcess& process() { return *process_; }

 private:
  std::uint16_t port_;
  std::uint16_t subscribePort_ = 0;
  std::string id_;
  std::unique_ptr<zktest::ChildProcess> process_;
};

std::string op(std::string_view account, int64_t token, std::string_view opId,
               std::string_view instance, int64_t session) {
  return json{{"account", account},   {"token", token}, {"instanceId", instance},
              {"sessionId", session}, {"opId", opId},   {"payload", {{"n", opId}}}}
      .dump();
}

// The owner URL each shard's `active` node names ("" for a shard without one).
std::map<std::string, std::string> shardOwners(const std::string& zkHosts, const std::string& root,
                                               std::uint32_t shards = kShards) {
  std::map<std::string, std::string> owners;
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    const auto id = naming::shardId(shard);
    const auto node =
        zktest::readZNode(zkHosts, naming::activePath(naming::gatewayShardsRoot(root), id));
    owners[id] = node.state == zktest::ZNode::State::found
                     ? json::parse(node.data).value("endpoint", std::string())
                     : std::string();
  }
  return owners;
}

double misdirectedOps(const ClusterGateway& gateway) {
  return zktest::metricSample(gateway.client().get("/metrics").body,
                              R"(zkagent_gateway_misdirected_total{route="ops"})")
      .value_or(0);
}

// The shards each gateway owns by its own gauge, in order (0 for one that is gone).
std::vector<int> shardsOwned(const std::vector<std::unique_ptr<ClusterGateway>>& gateways) {
  std::vector<int> counts;
  for (const auto& gateway : gateways) {
    const auto metrics = gateway->client(1s).get("/metrics");
    counts.push_back(static_cast<int>(
        zktest::metricSample(metrics.body, "zkagent_gateway_shards_owned").value_or(0)));
  }
  return counts;
}

// The leader of `account` as zk-elect holds it: token, instance, session.
struct Holder {
  int64_t token = -1;
  std::string instance;
  int64_t session = 0;
};

class GatewayCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& zookeeper = zktest::sharedZooKeeper();
    zkHosts_ = zookeeper.connectString();
    siteRoot_ = zktest::uniqueTestRoot();
    root_ = siteRoot_ + "/accounts";  // where the agents of an AgentSite on siteRoot_ elect
    // gw-3 reaches ZooKeeper through a proxy, so that a test can cut it off alone.
    gw3Proxy_ = std::make_unique<zktest::TcpProxy>(zookeeper.port());
    for (const auto* id : {"gw-1", "gw-2", "gw-3"}) {
      const bool proxied = std::string_view(id) == "gw-3";
      gateways_.push_back(std::make_unique<ClusterGateway>(
          dir_.path() / id, proxied ? gw3Proxy_->connectString() : zkHosts_, root_, id));
    }
    for (auto& gateway : gateways_) gateway->awaitListening();
    ASSERT_TRUE(zktest::eventually(
        [&] {
          for (const auto& [shard, owner] : shardOwners(zkHosts_, root_)) {
            if (owner.empty()) return false;
          }
          return true;
        },
        20s))
        << "some shard never got an owner";
    // The balance spreads the 8 shards 3/3/2 a settle window after the three are seen: wait for
    // it, so that no test here sees a shard move under it.
    ASSERT_TRUE(zktest::eventually(
        [&] {
          auto owned = shardsOwned(gateways_);
          std::sort(owned.begin(), owned.end());
          return owned == std::vector<int>{2, 3, 3};
        },
        20s, 20ms))
        << "the shards were never spread over the three gateways";
    // A gateway's view of a shard that has just moved is refreshed about 100 ms later: until every
    // non-owner's 421 names acc-1's owner (the account the tests here use), the map is moving.
    ASSERT_TRUE(zktest::eventually([&] { return allNameTheOwnerOf("acc-1"); }, 10s, 20ms))
        << "the gateways do not agree on acc-1's owner: " << disagreement_;
  }

  bool allNameTheOwnerOf(const std::string& account) const {
    const auto node = zktest::readZNode(
        zkHosts_, naming::activePath(naming::gatewayShardsRoot(root_), shardOf(account)));
    if (node.state != zktest::ZNode::State::found) return false;
    const auto owner = json::parse(node.data).value("endpoint", std::string());
    for (const auto& gateway : gateways_) {
      if (gateway->url() == owner) continue;
      const auto answer = gateway->client().post("/v1/ops", op(account, 0, "probe", "probe", 0));
      if (answer.status != 421 || json::parse(answer.body).value("owner", "") != owner) {
        disagreement_ = gateway->id() + " answered " + std::to_string(answer.status) + " " +
                        answer.body + " (owner " + owner + ")";
        return false;
      }
    }
    return true;
  }

  // A zk-elect leader for `account` (its session as short as the gateways').
  Holder elect(const std::string& account, const std::string& instance) {
    electors_.push_back(std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-elect").string(),
        std::vector<std::string>{"--zk", zkHosts_, "--root", root_, "--instance-id", instance,
                                 "--accounts", account, "--session-timeout-ms", "1500"}));
    electors_.back()->waitForLine("LEADER " + account + " ", 20s);
    return holder(account);
  }

  // Who holds `account`'s active node now (a leader whose session was renewed under load holds it
  // with a new seq).
  Holder holder(const std::string& account) const {
    const auto node = zktest::readZNode(zkHosts_, naming::activePath(root_, account));
    if (node.state != zktest::ZNode::State::found) return {};
    const auto active = json::parse(node.data);
    return {active.value("seq", int64_t{-1}), active.value("instanceId", std::string()),
            active.value("sessionId", int64_t{0})};
  }

  std::string shardOf(const std::string& account) const {
    return naming::shardId(naming::shardOf(account, kShards));
  }
  ClusterGateway& byUrl(const std::string& url) {
    for (auto& gateway : gateways_) {
      if (gateway->url() == url) return *gateway;
    }
    throw std::runtime_error("no gateway at " + url);
  }

  fencing::testing::TempDir dir_;
  std::string zkHosts_;
  std::string siteRoot_;
  std::string root_;                            // the accounts' election root
  std::unique_ptr<zktest::TcpProxy> gw3Proxy_;  // gw-3's way to ZooKeeper
  mutable std::string disagreement_;            // allNameTheOwnerOf's last mismatch
  std::vector<std::unique_ptr<ClusterGateway>> gateways_;
  std::vector<std::unique_ptr<zktest::ChildProcess>> electors_;
};

// An agent whose configured gateway does not own its account's shard sends its operations to the
// owner straight away, by the shard map it watches (no 421 paid); after the owner's kill -9 its
// operations reach the shard's next owner (the map follows the move once the dead owner's session
// expires; the caller retries the 502s until then).
TEST_F(GatewayCluster, AnAgentSendsOperationsToTheOwnerByTheWatchedMapAndReachesTheNextAfterAKill) {
  const std::string account = "acc-1";
  const auto shard = shardOf(account);
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shard));
  ClusterGateway* configured = nullptr;
  for (auto& gateway : gateways_) {
    if (gateway.get() != &owner) configured = gateway.get();
  }
  const auto misdirected = misdirectedOps(*configured);  // the set-up's probes
  const zktest::AgentSite site{zkHosts_, siteRoot_, configured->url()};
  auto agent =
      zktest::AgentProcess::start(dir_.path(), zktest::agentConfig(site, "agent-a", {account}));
  ASSERT_TRUE(zktest::eventually([&] { return agent->leads(account); }, 20s));
  auto first = agent->op(account, "op-1");
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(agent->op(account, "op-2").status, 200);
  EXPECT_EQ(misdirectedOps(*configured), misdirected) << "an operation went to the configured "
                                                         "gateway, not to the watched owner";

  owner.process().kill();
  http::ClientResponse again;
  int attempt = 0;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        again = agent->op(account, "op-3-" + std::to_string(++attempt));
        return again.status == 200;
      },
      kSessionTimeout + 15s, 100ms))
      << again.status << " " << again.body;
}

// The owner decides; every other gateway answers 421 with the shard and the owner's URL and
// decides nothing (the op is not in its state); the shard map is the one FNV-1a rule.
TEST_F(GatewayCluster, OnlyTheShardsOwnerDecidesAndTheOthersAnswer421NamingIt) {
  const auto holder = elect("acc-1", "agent-a");
  const auto owners = shardOwners(zkHosts_, root_);
  const auto shard = shardOf("acc-1");
  const auto& owner = owners.at(shard);
  for (auto& gateway : gateways_) {
    const auto misdirected = misdirectedOps(*gateway);  // the set-up's probes
    auto answer = gateway->client().post("/v1/ops", op("acc-1", holder.token, "op-" + gateway->id(),
                                                       holder.instance, holder.session));
    if (gateway->url() == owner) {
      EXPECT_EQ(answer.status, 200) << gateway->id() << ": " << answer.body;
      continue;
    }
    ASSERT_EQ(answer.status, 421) << gateway->id() << ": " << answer.body;
    const auto body = json::parse(answer.body);
    EXPECT_EQ(body["shard"], shard);
    EXPECT_EQ(body["owner"], owner);
    EXPECT_EQ(gateway->operatorClient().get("/v1/accounts/acc-1").status, 404)
        << gateway->id() << " kept state for a request it did not own";
    EXPECT_EQ(misdirectedOps(*gateway), misdirected + 1);
  }
  // Every shard has exactly one owner among the three (the gauge sums to the shard count).
  double owned = 0;
  for (auto& gateway : gateways_) {
    owned +=
        zktest::metricSample(gateway->client().get("/metrics").body, "zkagent_gateway_shards_owned")
            .value_or(0);
  }
  EXPECT_EQ(owned, kShards);
}

// kill -9 of the owner: another gateway owns the shard once the dead one's session expires and
// accepts the current leader's token; a stale token (the leader before) is refused by every
// gateway still running, before and after the move.
TEST_F(GatewayCluster, KillNineOfTheOwnerMovesItsShardsAndNoGatewayAcceptsAStaleToken) {
  const auto oldHolder = elect("acc-1", "agent-a");
  const auto shard = shardOf("acc-1");
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shard));
  ASSERT_EQ(owner.client()
                .post("/v1/ops",
                      op("acc-1", oldHolder.token, "a-1", oldHolder.instance, oldHolder.session))
                .status,
            200);
  // Leadership moves: agent-a is killed, agent-b leads with a larger token.
  electors_.front()->kill();
  const auto newHolder = elect("acc-1", "agent-b");
  ASSERT_GT(newHolder.token, oldHolder.token);

  owner.process().kill();
  const auto killedAt = std::chrono::steady_clock::now();
  std::string newOwner;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        newOwner = shardOwners(zkHosts_, root_).at(shard);
        return !newOwner.empty() && newOwner != owner.url();
      },
      kSessionTimeout + 15s))
      << "the shard never moved";
  auto& successor = byUrl(newOwner);
  // The new owner's first decision reads ZooKeeper after a sync: the old leader's token is
  // refused, the current one accepted.
  auto stale = successor.client().post(
      "/v1/ops", op("acc-1", oldHolder.token, "a-2", oldHolder.instance, oldHolder.session));
  EXPECT_EQ(stale.status, 409) << stale.body;
  http::ClientResponse current;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        const auto now = holder("acc-1");
        current = successor.client().post("/v1/ops",
                                          op("acc-1", now.token, "b-1", now.instance, now.session));
        return current.status == 200;
      },
      5s))
      << current.status << " " << current.body;
  std::cout << "shard " << shard << " accepting again at " << successor.id() << " "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - killedAt)
                   .count()
            << " ms after kill -9 (session timeout " << kSessionTimeout.count() << " ms)\n";
  for (auto& gateway : gateways_) {
    if (gateway.get() == &owner) continue;
    auto answer = gateway->client().post(
        "/v1/ops", op("acc-1", oldHolder.token, "a-3", oldHolder.instance, oldHolder.session));
    EXPECT_NE(answer.status, 200) << gateway->id() << " accepted a stale token: " << answer.body;
  }
}

// SIGTERM hands the owner's shards over before it stops serving, and it exits 0.
TEST_F(GatewayCluster, SigtermHandsTheOwnersShardsToTheOthersAndExitsCleanly) {
  const auto shard = shardOf("acc-1");
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shard));
  owner.process().signal(SIGTERM);
  EXPECT_TRUE(owner.process().wait(20s).exitedWith(0)) << owner.process().stderrText();
  EXPECT_NE(owner.process().stderrText().find("cluster: shards handed over"), std::string::npos);
  ASSERT_TRUE(zktest::eventually(
      [&] {
        for (const auto& [id, url] : shardOwners(zkHosts_, root_)) {
          if (url.empty() || url == owner.url()) return false;
        }
        return true;
      },
      10s))
      << "shards left without an owner after a clean stop";
}

// A gateway paused past its session with a request waiting in its socket: on SIGCONT it decides
// nothing on the ownership it had (its session is gone): the answer is a refusal, and the shard is
// served by its new owner.
TEST_F(GatewayCluster, AnOwnerPausedPastItsSessionRefusesWhatWaitedWhenItResumes) {
  const auto holder = elect("acc-1", "agent-a");
  const auto shard = shardOf("acc-1");
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shard));
  owner.process().signal(SIGSTOP);
  // Its answer must come from the gateway, not from the client giving up.
  auto waiting = std::async(std::launch::async, [&] {
    return owner.client(60s).post(
        "/v1/ops", op("acc-1", holder.token, "late-1", holder.instance, holder.session));
  });
  ASSERT_TRUE(zktest::eventually(
      [&] {
        const auto now = shardOwners(zkHosts_, root_).at(shard);
        return !now.empty() && now != owner.url();
      },
      kSessionTimeout + 15s))
      << "the shard never moved off the paused owner";
  owner.process().signal(SIGCONT);
  const auto late = waiting.get();
  ASSERT_TRUE(late.delivered()) << late.transportError;
  EXPECT_NE(late.status, 200) << "a paused owner accepted after losing its shard: " << late.body;
  EXPECT_EQ(owner.operatorClient().get("/v1/accounts/acc-1").status, 404);
}

// The shard count is fixed when the cluster is created: a gateway started with another fails at
// start naming both, and takes no shard.
TEST(GatewayClusterStart, AGatewayWithAnotherShardCountFailsToStartNamingBoth) {
  auto& zookeeper = zktest::sharedZooKeeper();
  const auto root = zktest::uniqueTestRoot();
  fencing::testing::TempDir dir;
  ClusterGateway first(dir.path() / "a", zookeeper.connectString(), root, "gw-a", 8);
  first.awaitListening();
  ClusterGateway second(dir.path() / "b", zookeeper.connectString(), root, "gw-b", 16);
  const auto status = second.process().wait(30s);
  EXPECT_FALSE(status.exitedWith(0)) << status.describe();
  const auto err = second.process().stderrText();
  EXPECT_NE(err.find("cluster.shards (--cluster-shards) is 16"), std::string::npos) << err;
  EXPECT_NE(err.find("has 8 shards"), std::string::npos) << err;
}

// A cluster node that names no shard count (here a string where the number goes) is not taken for
// a cluster of any size: the gateway fails at start naming the node and what it holds.
TEST(GatewayClusterStart, AClusterNodeWithoutACountFailsTheStartNamingItsData) {
  auto& zookeeper = zktest::sharedZooKeeper();
  const auto root = zktest::uniqueTestRoot();
  ASSERT_TRUE(zktest::writeZNode(zookeeper.connectString(), naming::gatewayClusterPath(root),
                                 R"({"shards":"8"})"));
  fencing::testing::TempDir dir;
  ClusterGateway gateway(dir.path() / "a", zookeeper.connectString(), root, "gw-a", 8);
  const auto status = gateway.process().wait(30s);
  EXPECT_FALSE(status.exitedWith(0)) << status.describe();
  const auto err = gateway.process().stderrText();
  EXPECT_NE(err.find(R"(holds '{"shards":"8"}', not {"shards": N})"), std::string::npos) << err;
}

// ---- Presence: an agent sends each lease to the owner of its account's shard.

// The first acc-N of each shard: accounts spread over every shard, so over every gateway.
std::vector<std::string> oneAccountPerShard() {
  std::map<std::uint32_t, std::string> byShard;
  for (int n = 0; byShard.size() < kShards; ++n) {
    const auto account = "acc-" + std::to_string(n);
    byShard.try_emplace(naming::shardOf(account, kShards), account);
  }
  std::vector<std::string> accounts;
  for (const auto& [shard, account] : byShard) accounts.push_back(account);
  return accounts;
}

bool holdsLease(const ClusterGateway& gateway, const std::string& account,
                const std::string& device) {
  const auto answer = gateway.operatorClient(1s).get("/v1/presence/" + account);
  if (!answer.delivered() || answer.status != 200) return false;
  const auto table = json::parse(answer.body, nullptr, false);
  if (!table.is_object()) return false;
  for (const auto& entry : table.value("devices", json::array())) {
    if (entry.value("device", "") == device) return true;
  }
  return false;
}

double refusedLeaseBatches(const std::vector<std::unique_ptr<ClusterGateway>>& gateways) {
  double refused = 0;
  for (const auto& gateway : gateways) {
    refused += zktest::metricSample(gateway->client(1s).get("/metrics").body,
                                    R"(zkagent_gateway_misdirected_total{route="leases"})")
                   .value_or(0);
  }
  return refused;
}

// Two agents lead one account per shard, each with a device connected, both configured with gw-1:
// every lease is at the gateway owning its account's shard (the agents watch the shard map and
// split each lease batch by owner), and no gateway refused a batch. After a SIGTERM of another
// gateway its shards move and the next renewals put the leases at the new owners.
TEST_F(GatewayCluster, EveryLeaseIsAtItsShardsOwnerAndFollowsTheShardWhenAGatewayStops) {
  const auto accounts = oneAccountPerShard();
  const zktest::AgentSite site{zkHosts_, siteRoot_, gateways_.front()->url()};
  const json presence{{"zookeeper", {{"session_timeout_ms", kSessionTimeout.count()}}},
                      {"presence",
                       {{"heartbeat_ms", 200},
                        {"ping_timeout_ms", 600},
                        {"check_interval_ms", 100},
                        {"renew_interval_ms", 400},
                        {"lease_ttl_ms", 1200}}}};
  const auto half = accounts.begin() + static_cast<std::ptrdiff_t>(accounts.size() / 2);
  std::vector<std::unique_ptr<zktest::AgentProcess>> agents;
  agents.push_back(zktest::AgentProcess::start(
      dir_.path(), zktest::agentConfig(site, "agent-a", {accounts.begin(), half}, presence)));
  agents.push_back(zktest::AgentProcess::start(
      dir_.path(), zktest::agentConfig(site, "agent-b", {half, accounts.end()}, presence)));
  std::map<std::string, zktest::AgentProcess*> leader;
  for (std::size_t i = 0; i < accounts.size(); ++i) {
    leader[accounts[i]] = agents[i < accounts.size() / 2 ? 0 : 1].get();
  }
  for (const auto& account : accounts) {
    ASSERT_TRUE(zktest::eventually([&] { return leader[account]->leads(account); }, 20s))
        << account;
  }
  const auto refusedBefore = refusedLeaseBatches(gateways_);
  std::vector<std::unique_ptr<zktest::ChildProcess>> devices;
  const auto connectedAt = std::chrono::steady_clock::now();
  for (const auto& account : accounts) {
    devices.push_back(std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-device").string(),
        std::vector<std::string>{"--connect", leader[account]->deviceUrl, "--account", account,
                                 "--device", "dev-" + account, "--heartbeat-ms", "200",
                                 "--timeout-ms", "600"}));
  }
  for (auto& device : devices) device->waitForLine("CONNECTED ", 10s);

  // Every lease at its account's owner: by the shard map in ZooKeeper now.
  const auto allAtTheirOwners = [&](const std::string& gone) {
    const auto owners = shardOwners(zkHosts_, root_);
    for (const auto& account : accounts) {
      const auto& owner = owners.at(shardOf(account));
      if (owner.empty() || owner == gone) return false;
      if (!holdsLease(byUrl(owner), account, "dev-" + account)) return false;
    }
    return true;
  };
  ASSERT_TRUE(zktest::eventually([&] { return allAtTheirOwners(""); }, 5s, 20ms))
      << "some lease is not at its shard's owner";
  const auto placedMs = millisSince(connectedAt);
  std::set<std::string> owning;
  for (const auto& [shard, owner] : shardOwners(zkHosts_, root_)) owning.insert(owner);
  EXPECT_EQ(owning.size(), gateways_.size()) << "the accounts do not span every gateway";
  EXPECT_EQ(refusedLeaseBatches(gateways_), refusedBefore) << "a gateway refused a lease batch";
  for (const auto& agent : agents) {
    EXPECT_EQ(zktest::metricSample(agent->metrics(),
                                   R"(zkagent_presence_lease_batches_total{result="failed"})")
                  .value_or(0),
              0)
        << agent->id;
  }

  // SIGTERM of the gateway (not the configured one) owning the most of these shards.
  std::map<std::string, int> owned;
  for (const auto& [shard, owner] : shardOwners(zkHosts_, root_)) ++owned[owner];
  ClusterGateway* leaving = gateways_[1].get();
  if (owned[gateways_[2]->url()] > owned[leaving->url()]) leaving = gateways_[2].get();
  const auto signalled = std::chrono::steady_clock::now();
  leaving->process().signal(SIGTERM);
  ASSERT_TRUE(zktest::eventually([&] { return allAtTheirOwners(leaving->url()); }, 10s, 20ms))
      << "the leases of " << leaving->id() << "'s shards never reached their new owners";
  const auto movedMs = millisSince(signalled);
  EXPECT_TRUE(leaving->process().wait(20s).exitedWith(0)) << leaving->process().stderrText();
  std::cout << "leases at their owners " << placedMs << " ms after the devices started; after "
            << leaving->id() << "'s SIGTERM (" << owned[leaving->url()]
            << " shards) at their new owners after " << movedMs << " ms (renewals every 400 ms)\n";
}

// ---- Presence: privacy rules in ZooKeeper, versions that grow across a shard's move.

http::ClientResponse putPrivacy(const ClusterGateway& gateway, const std::string& account,
                                const json& rules) {
  return gateway.operatorClient().request(http::Method::Put, "/v1/presence/privacy/" + account,
                                          rules.dump());
}

json privacyAt(const ClusterGateway& gateway, const std::string& account) {
  const auto answer = gateway.client().get("/v1/presence/privacy/" + account);
  if (answer.status != 200) return json{{"status", answer.status}, {"body", answer.body}};
  return json::parse(answer.body, nullptr, false);
}

// One lease of `account`'s device "phone" from the zk-elect leader `holder`: renewed, or removed.
http::ClientResponse lease(const ClusterGateway& gateway, const std::string& account,
                           const Holder& holder, int counter, bool remove = false) {
  json entry{
      {"account", account}, {"device", "phone"}, {"token", holder.token}, {"counter", counter}};
  if (remove) entry["reason"] = "close";
  json batch{{"instanceId", holder.instance}, {"sessionId", holder.session}};
  batch[remove ? "remove" : "renew"] = json::array({entry});
  return gateway.client().post("/v1/presence/leases", batch.dump());
}

// zk-presence-watch as `viewer` at `gateway`'s subscriber listener (a claimed viewer on loopback).
std::unique_ptr<zktest::ChildProcess> watchAt(const ClusterGateway& gateway,
                                              const std::string& viewer,
                                              const std::string& target) {
  return std::make_unique<zktest::ChildProcess>(
      zktest::binaryPath("zk-presence-watch").string(),
      std::vector<std::string>{"--gateway",
                               "ws://127.0.0.1:" + std::to_string(gateway.subscribePort()),
                               "--viewer", viewer, "--targets", target});
}

// The next line of `watch` that shows `target` with `status` (snapshot or change); its version.
std::uint64_t waitForStatus(zktest::ChildProcess& watch, const std::string& target,
                            const std::string& status, std::chrono::milliseconds timeout = 10s) {
  const auto line = watch.waitForLine(
      [&](std::string_view text) {
        return text.starts_with("SNAPSHOT " + target + " " + status + " ") ||
               text.starts_with("CHANGE " + target + " " + status + " ");
      },
      timeout, target + " " + status);
  std::istringstream fields(line);
  std::string kind, name, shown;
  std::uint64_t version = 0;
  fields >> kind >> name >> shown >> version;
  return version;
}

double invalidPrivacyNodes(const ClusterGateway& gateway) {
  return zktest::metricSample(gateway.client(1s).get("/metrics").body,
                              "zkagent_gateway_presence_privacy_invalid_total")
      .value_or(-1);
}

// A rule set through one gateway is applied by the owner of the account's shard, another gateway,
// to its live subscribers (carol, blocked, stops seeing the account; bob still sees it), and it
// survives the kill -9 of the gateway it was set through: it is in ZooKeeper, not on that disk.
TEST_F(GatewayCluster, APrivacyRuleSetAtOneGatewayIsAppliedByTheOwnerAndSurvivesItsKill) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  std::vector<ClusterGateway*> others;
  for (auto& gateway : gateways_) {
    if (gateway.get() != &owner) others.push_back(gateway.get());
  }
  auto& writer = *others[0];
  const auto holder = elect(target, "agent-a");
  const json both{{"granularity", "exact"}, {"contacts", json::array({"bob", "carol"})}};
  auto put = putPrivacy(writer, target, both);
  ASSERT_EQ(put.status, 200) << put.body << put.transportError;
  http::ClientResponse renewed;
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(owner, target, holder, 1)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  auto bob = watchAt(owner, "bob", target);
  auto carol = watchAt(owner, "carol", target);
  waitForStatus(*bob, target, "online");
  waitForStatus(*carol, target, "online");

  const json blockCarol{{"granularity", "exact"},
                        {"contacts", json::array({"bob", "carol"})},
                        {"blocked", json::array({"carol"})}};
  const auto putAt = Clock::now();
  put = putPrivacy(writer, target, blockCarol);
  ASSERT_EQ(put.status, 200) << put.body;
  carol->waitForLine("REMOVED " + target + " ", 5s);
  const auto appliedMs = millisSince(putAt);
  EXPECT_EQ(privacyAt(owner, target).value("blocked", json::array()), json::array({"carol"}));
  const auto node = zktest::readZNode(zkHosts_, naming::gatewayPrivacyPath(root_, target));
  ASSERT_EQ(node.state, zktest::ZNode::State::found);
  EXPECT_EQ(json::parse(node.data).value("blocked", json::array()), json::array({"carol"}));

  writer.process().kill();
  writer.process().wait(10s);
  // Still applied at the owner for new subscribers, and read by the third gateway.
  auto carolAgain = watchAt(owner, "carol", target);
  carolAgain->waitForLine("SNAPSHOT-END", 10s);
  auto bobAgain = watchAt(owner, "bob", target);
  waitForStatus(*bobAgain, target, "online");
  for (const auto& line : carolAgain->stdoutLines()) {
    EXPECT_FALSE(line.starts_with("SNAPSHOT " + target + " ")) << "carol sees " << line;
  }
  for (const auto& line : bob->stdoutLines()) {
    EXPECT_FALSE(line.starts_with("REMOVED ")) << "bob lost " << line;
  }
  EXPECT_EQ(privacyAt(*others[1], target).value("blocked", json::array()), json::array({"carol"}));
  std::cout << "rule PUT at " << writer.id() << " applied to a subscriber at " << owner.id()
            << " after " << appliedMs << " ms\n";
}

// A rule node that does not parse (written straight into ZooKeeper) hides its account from every
// viewer at every gateway (fail closed), is counted and logged naming the account, and GET says
// so; a PUT repairs it.
TEST_F(GatewayCluster, ARuleNodeThatDoesNotParseHidesTheAccountEverywhereAndIsCounted) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  const auto holder = elect(target, "agent-a");
  const json bobOnly{{"granularity", "exact"}, {"contacts", json::array({"bob"})}};
  ASSERT_EQ(putPrivacy(owner, target, bobOnly).status, 200);
  http::ClientResponse renewed;
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(owner, target, holder, 1)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  auto bob = watchAt(owner, "bob", target);
  waitForStatus(*bob, target, "online");
  std::vector<double> before;
  for (const auto& gateway : gateways_) before.push_back(invalidPrivacyNodes(*gateway));

  ASSERT_TRUE(zktest::writeZNode(zkHosts_, naming::gatewayPrivacyPath(root_, target),
                                 R"({"granularity": "exact", "contacts": "bob"})"));
  bob->waitForLine("REMOVED " + target + " ", 5s);
  for (std::size_t i = 0; i < gateways_.size(); ++i) {
    auto& gateway = *gateways_[i];
    EXPECT_TRUE(
        zktest::eventually([&] { return invalidPrivacyNodes(gateway) == before[i] + 1; }, 5s))
        << gateway.id() << " counted " << invalidPrivacyNodes(gateway);
    const auto answer = gateway.client().get("/v1/presence/privacy/" + target);
    EXPECT_EQ(answer.status, 500) << gateway.id() << ": " << answer.body;
    EXPECT_NE(gateway.process().stderrText().find("presence privacy of " + target +
                                                  " in ZooKeeper does not parse"),
              std::string::npos)
        << gateway.id();
  }
  auto late = watchAt(owner, "bob", target);
  late->waitForLine("SNAPSHOT-END", 10s);
  for (const auto& line : late->stdoutLines()) {
    EXPECT_FALSE(line.starts_with("SNAPSHOT " + target + " "))
        << "a hidden account shown: " << line;
  }

  ASSERT_EQ(putPrivacy(*gateways_.front(), target, bobOnly).status, 200);
  waitForStatus(*bob, target, "online", 5s);
  EXPECT_EQ(privacyAt(owner, target).value("contacts", json::array()), json::array({"bob"}));
}

// A gateway cut off from ZooKeeper answers a PUT with 503 and changes nothing, neither in
// ZooKeeper nor at any gateway (itself included); once back it reads the rules set meanwhile
// through another gateway.
TEST_F(GatewayCluster, APrivacyPutWhileZooKeeperIsUnreachableIs503AndChangesNothing) {
  const std::string target = "acc-1";
  auto& cutOff = *gateways_[2];  // gw-3, behind the proxy
  const json bobOnly{{"granularity", "exact"}, {"contacts", json::array({"bob"})}};
  ASSERT_EQ(putPrivacy(cutOff, target, bobOnly).status, 200);
  ASSERT_TRUE(zktest::eventually(
      [&] {
        for (const auto& gateway : gateways_) {
          if (privacyAt(*gateway, target).value("contacts", json::array()) !=
              json::array({"bob"})) {
            return false;
          }
        }
        return true;
      },
      5s));
  const auto stored = zktest::readZNode(zkHosts_, naming::gatewayPrivacyPath(root_, target));

  gw3Proxy_->setMode(zktest::TcpProxy::Mode::close);
  const json blockBob{{"granularity", "hidden"}, {"blocked", json::array({"bob"})}};
  const auto refused = putPrivacy(cutOff, target, blockBob);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(privacyAt(cutOff, target).value("contacts", json::array()), json::array({"bob"}));
  const auto after = zktest::readZNode(zkHosts_, naming::gatewayPrivacyPath(root_, target));
  EXPECT_EQ(after.data, stored.data);
  for (const auto& gateway : gateways_) {
    EXPECT_EQ(privacyAt(*gateway, target).value("blocked", json::array()), json::array())
        << gateway->id();
  }

  // Set meanwhile through another gateway: gw-3 learns it once back (its watches went with the
  // link; it reads every rule again on its new connection).
  const json bobAndCarol{{"granularity", "exact"}, {"contacts", json::array({"bob", "carol"})}};
  ASSERT_EQ(putPrivacy(*gateways_[0], target, bobAndCarol).status, 200);
  gw3Proxy_->setMode(zktest::TcpProxy::Mode::pass);
  EXPECT_TRUE(zktest::eventually(
      [&] {
        return privacyAt(cutOff, target).value("contacts", json::array()) ==
               json::array({"bob", "carol"});
      },
      kSessionTimeout + 15s, 100ms))
      << privacyAt(cutOff, target);
}

// A subscriber of a target at its shard's owner sees its versions; after the owner's SIGTERM the
// shard's next owner sends versions above every one seen before (its take bumped the cluster's
// epoch, the versions' high part), although its own view of the target starts again at 1.
TEST_F(GatewayCluster, ATargetsVersionsAfterItsShardMovesAreAboveEveryVersionBefore) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  const auto holder = elect(target, "agent-a");
  ASSERT_EQ(
      putPrivacy(owner, target, json{{"granularity", "exact"}, {"contacts", json::array({"bob"})}})
          .status,
      200);
  auto bob = watchAt(owner, "bob", target);
  bob->waitForLine("SNAPSHOT-END", 10s);
  std::uint64_t before = 0;
  // online, offline, online: three versions of the target at the first owner.
  for (int step = 0; step < 3; ++step) {
    const bool remove = step == 1;
    http::ClientResponse answer;
    ASSERT_TRUE(zktest::eventually(
        [&] { return (answer = lease(owner, target, holder, 1 + step / 2, remove)).status == 200; },
        5s))
        << answer.status << " " << answer.body;
    before = std::max(before, waitForStatus(*bob, target, remove ? "offline" : "online"));
  }

  owner.process().signal(SIGTERM);
  std::string next;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        next = shardOwners(zkHosts_, root_).at(shardOf(target));
        return !next.empty() && next != owner.url();
      },
      10s));
  EXPECT_TRUE(owner.process().wait(20s).exitedWith(0)) << owner.process().stderrText();
  auto& successor = byUrl(next);
  auto bobAtNext = watchAt(successor, "bob", target);
  bobAtNext->waitForLine("SNAPSHOT-END", 10s);
  http::ClientResponse renewed;
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(successor, target, holder, 3)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  const auto after = waitForStatus(*bobAtNext, target, "online");
  EXPECT_GT(after, before) << "versions went backwards across the move: " << (before >> 32) << ":"
                           << (before & 0xffffffffu) << " then " << (after >> 32) << ":"
                           << (after & 0xffffffffu);
  std::cout << "version before the move " << (before >> 32) << ":" << (before & 0xffffffffu)
            << ", after at " << successor.id() << " " << (after >> 32) << ":"
            << (after & 0xffffffffu) << "\n";
}

// ---- Balance: the agents' rule spreads the shards over the gateways standing.

constexpr std::uint32_t kBalanceShards = 12;
// The balance's timings (docs/gateway-cluster.md): a gateway not seen for kForget has left, and
// nothing moves until the gateways seen have been the same for kSettle.
constexpr auto kForget = 2s;
constexpr auto kSettle = 2s;

class GatewayClusterBalance : public ::testing::Test {
 protected:
  void SetUp() override {
    zkHosts_ = zktest::sharedZooKeeper().connectString();
    root_ = zktest::uniqueTestRoot() + "/accounts";
  }

  ClusterGateway& start(const std::string& id) {
    gateways_.push_back(
        std::make_unique<ClusterGateway>(dir_.path() / id, zkHosts_, root_, id, kBalanceShards));
    return *gateways_.back();
  }

  std::vector<int> owned() const { return shardsOwned(gateways_); }

  ::testing::AssertionResult reaches(const std::vector<int>& expected,
                                     std::chrono::milliseconds timeout = 20s) const {
    std::vector<int> seen;
    if (zktest::eventually(
            [&] {
              seen = owned();
              return seen == expected;
            },
            timeout, 20ms)) {
      return ::testing::AssertionSuccess();
    }
    std::string text;
    for (int n : seen) text += std::to_string(n) + " ";
    return ::testing::AssertionFailure() << "owned shards stayed at " << text;
  }

  // gw-1, gw-2 and gw-3 started in turn, each once the ones before own their shares; returns the
  // milliseconds from gw-3's start until 4/4/4.
  std::int64_t startInTurn() {
    start("gw-1").awaitListening();
    EXPECT_TRUE(reaches({12}));
    start("gw-2").awaitListening();
    EXPECT_TRUE(reaches({6, 6}));
    const auto third = Clock::now();
    start("gw-3");
    EXPECT_TRUE(reaches({4, 4, 4}));
    return millisSince(third);
  }

  fencing::testing::TempDir dir_;
  std::string zkHosts_;
  std::string root_;
  std::vector<std::unique_ptr<ClusterGateway>> gateways_;
};

// Three gateways started one after the other end with 4 of the 12 shards each: the first owns
// them all, and each newcomer is given its share by the ones before (ZooKeeper's `active` nodes
// say the same as the gateways' gauges).
TEST_F(GatewayClusterBalance, ThreeGatewaysStartedInTurnOwnFourShardsEach) {
  const auto balancedAfter = startInTurn();
  std::map<std::string, int> byOwner;
  for (const auto& [shard, owner] : shardOwners(zkHosts_, root_, kBalanceShards)) ++byOwner[owner];
  for (const auto& gateway : gateways_) EXPECT_EQ(byOwner[gateway->url()], 4) << gateway->id();
  std::cout << "third gateway started: 4/4/4 after " << balancedAfter << " ms\n";
}

// SIGTERM of gw-1: before its stop hands its shards over, it puts each one's receiver next in the
// queue by the balance rule (the queue order alone would give all 4 to gw-2, never moved since it
// stood): every shard is owned again within milliseconds, already 6/6.
TEST_F(GatewayClusterBalance, SigtermHandsTheShardsOverInMillisecondsSixToEachOfTheOthers) {
  startInTurn();
  auto& leaving = *gateways_.front();
  const auto signalled = Clock::now();
  leaving.process().signal(SIGTERM);
  // Until the other two own all 12, some shard has no owner (gw-1 reports its losses first).
  std::vector<int> counts;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        counts = owned();
        return counts[1] + counts[2] == 12;
      },
      10s, 1ms));
  const auto handedOver = millisSince(signalled);
  EXPECT_LT(handedOver, 1000) << "hand-over as slow as a session expiry";
  EXPECT_EQ(counts[1], 6) << "the hand-over did not follow the balance";
  EXPECT_TRUE(leaving.process().wait(20s).exitedWith(0)) << leaving.process().stderrText();
  // Nothing moves after it, also once the others have forgotten gw-1 and settled.
  const auto moved = [&] { return owned() != std::vector<int>{0, 6, 6}; };
  EXPECT_FALSE(zktest::eventually(moved, kForget + kSettle + 1s, 20ms))
      << "shards moved after the hand-over";
  std::cout << "SIGTERM: every shard owned again after " << handedOver << " ms, at " << counts[1]
            << "/" << counts[2] << "\n";
}

// kill -9 of gw-1: the others own its shards once its session expires, then 6/6, and stay so.
TEST_F(GatewayClusterBalance, KillNineLeavesTheShardsOwnedAfterTheSessionTimeoutThenSixEach) {
  startInTurn();
  gateways_.front()->process().kill();
  const auto killed = Clock::now();
  std::vector<int> counts;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        counts = owned();
        return counts[1] + counts[2] == 12;
      },
      kSessionTimeout + 5s, 5ms));
  const auto ownedAgain = millisSince(killed);
  ASSERT_TRUE(reaches({0, 6, 6}));
  const auto balanced = millisSince(killed);
  // No further moves: a balanced pair stays as it is.
  const auto heldSince = Clock::now();
  EXPECT_FALSE(zktest::eventually(
      [&] {
        return owned() != std::vector<int>{0, 6, 6};
      },
      1s, 20ms))
      << "shards kept moving after the balance";
  std::cout << "kill -9: its 4 shards without an owner for " << ownedAgain
            << " ms (session timeout " << kSessionTimeout.count() << " ms), 6/6 after " << balanced
            << " ms, unchanged for " << millisSince(heldSince) << " ms\n";
}

}  // namespace gateway_cluster_test
