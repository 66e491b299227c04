// The cluster process tests' fixture (cluster_process_test.cpp, cluster_presence_process_test.cpp):
// real fencing-gateway processes on one ZooKeeper (docs/gateway-cluster.md), three of them standing
// for 8 shards, and the helpers that read who owns what.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
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

namespace gateway_cluster_test {

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr std::uint32_t kShards = 8;
constexpr auto kSessionTimeout = 1500ms;
constexpr const char* kOperatorToken = "cluster-operator-token";
using Clock = std::chrono::steady_clock;

inline std::int64_t millisSince(Clock::time_point start) {
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
  http::Client operatorClient(std::chrono::milliseconds timeout = 10s,
                              std::string token = kOperatorToken) const {
    return http::Client(http::ClientOptions{
        .port = port_, .requestTimeout = timeout, .bearerToken = std::move(token)});
  }
  zktest::ChildProcess& process() { return *process_; }
  // One sample of its /metrics (asked with a 1 s timeout), or `missing`.
  double metric(const std::string& sample, double missing) const {
    return zktest::metricSample(client(1s).get("/metrics").body, sample).value_or(missing);
  }

 private:
  std::uint16_t port_;
  std::uint16_t subscribePort_ = 0;
  std::string id_;
  std::unique_ptr<zktest::ChildProcess> process_;
};

inline std::string op(std::string_view account, int64_t token, std::string_view opId,
                      std::string_view instance, int64_t session) {
  return json{{"account", account},   {"token", token}, {"instanceId", instance},
              {"sessionId", session}, {"opId", opId},   {"payload", {{"n", opId}}}}
      .dump();
}

// The owner URL each shard's `active` node names ("" for a shard without one).
inline std::map<std::string, std::string> shardOwners(const std::string& zkHosts,
                                                      const std::string& root,
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

inline double misdirectedOps(const ClusterGateway& gateway) {
  return zktest::metricSample(gateway.client().get("/metrics").body,
                              R"(zkagent_gateway_misdirected_total{route="ops"})")
      .value_or(0);
}

// The shards each gateway owns by its own gauge, in order (0 for one that is gone).
inline std::vector<int> shardsOwned(const std::vector<std::unique_ptr<ClusterGateway>>& gateways) {
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
                        answer.body + " (owner " + owner + "); its log:\n" +
                        gateway->process().stderrText();
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

  // Every gateway but `owner`, in start order.
  std::vector<ClusterGateway*> othersThan(const ClusterGateway& owner) const {
    std::vector<ClusterGateway*> others;
    for (const auto& gateway : gateways_) {
      if (gateway.get() != &owner) others.push_back(gateway.get());
    }
    return others;
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

}  // namespace gateway_cluster_test
