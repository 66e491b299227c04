// Presence in a cluster of real fencing-gateway processes (docs/gateway-cluster.md "Presence"):
// each lease at its shard's owner, privacy rules set at any gateway applied by all (kept in
// ZooKeeper), and a target's versions that grow across a shard's move.
#include "cluster_fixture.hpp"

namespace gateway_cluster_test {

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
    refused += gateway->metric(R"(zkagent_gateway_misdirected_total{route="leases"})", 0);
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

// A SNAPSHOT or CHANGE line of zk-presence-watch: its fields (unixNs only on a CHANGE).
struct StatusLine {
  std::string kind, target, status;
  std::uint64_t version = 0;
  std::int64_t minute = 0, unixNs = 0;
};

StatusLine parseStatusLine(const std::string& line) {
  StatusLine parsed;
  std::istringstream fields(line);
  fields >> parsed.kind >> parsed.target >> parsed.status >> parsed.version >> parsed.minute >>
      parsed.unixNs;
  return parsed;
}

// The next line of `watch` that shows `target` with `status` (snapshot or change).
StatusLine waitForStatusLine(zktest::ChildProcess& watch, const std::string& target,
                             const std::string& status, std::chrono::milliseconds timeout = 10s) {
  return parseStatusLine(watch.waitForLine(
      [&](std::string_view text) {
        return text.starts_with("SNAPSHOT " + target + " " + status + " ") ||
               text.starts_with("CHANGE " + target + " " + status + " ");
      },
      timeout, target + " " + status));
}

// The same, its version.
std::uint64_t waitForStatus(zktest::ChildProcess& watch, const std::string& target,
                            const std::string& status, std::chrono::milliseconds timeout = 10s) {
  return waitForStatusLine(watch, target, status, timeout).version;
}

// Every version `watch` printed for `target` so far (snapshot and changes), in order.
std::vector<std::uint64_t> versionsSeen(const zktest::ChildProcess& watch,
                                        const std::string& target) {
  std::vector<std::uint64_t> versions;
  for (const auto& line : watch.stdoutLines()) {
    if (line.starts_with("SNAPSHOT " + target + " ") ||
        line.starts_with("CHANGE " + target + " ")) {
      versions.push_back(parseStatusLine(line).version);
    }
  }
  return versions;
}

std::string epochAndCount(std::uint64_t version) {
  return std::to_string(version >> 32) + ":" + std::to_string(version & 0xffffffffu);
}

double invalidPrivacyNodes(const ClusterGateway& gateway) {
  return gateway.metric("zkagent_gateway_presence_privacy_invalid_total", -1);
}

// A rule set through one gateway is applied by the owner of the account's shard, another gateway,
// to its live subscribers (carol, blocked, stops seeing the account; bob still sees it), and it
// survives the kill -9 of the gateway it was set through: it is in ZooKeeper, not on that disk.
TEST_F(GatewayCluster, APrivacyRuleSetAtOneGatewayIsAppliedByTheOwnerAndSurvivesItsKill) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  const auto others = othersThan(owner);
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
  EXPECT_GT(after, before) << "versions went backwards across the move: " << epochAndCount(before)
                           << " then " << epochAndCount(after);
  std::cout << "version before the move " << epochAndCount(before) << ", after at "
            << successor.id() << " " << epochAndCount(after) << "\n";
}

// ---- Presence: a subscriber at any gateway (relayed subscriptions).

// (subscription, target) pairs `gateway` serves: a relayed subscription's count at the owner.
double watchedAt(const ClusterGateway& gateway) {
  return gateway.metric("zkagent_gateway_presence_watched_targets", -1);
}

// A subscriber at a gateway that does not own the target's shard sees the target and its changes
// (the gateway subscribes at the owner for it), about as soon as a subscriber at the owner does.
// One subscriber at each of the two other gateways: after the owner's SIGTERM its shard moves to
// one of them, which then serves the target itself, while the other subscribes at it. Both,
// still connected, see the next owner's changes, every version at or above the one before.
TEST_F(GatewayCluster, ASubscriberAtAnyGatewaySeesATargetAndKeepsItWhenTheShardMoves) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  const auto edges = othersThan(owner);
  const auto holder = elect(target, "agent-a");
  ASSERT_EQ(
      putPrivacy(owner, target, json{{"granularity", "exact"}, {"contacts", json::array({"bob"})}})
          .status,
      200);
  http::ClientResponse renewed;
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(owner, target, holder, 1)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  std::vector<std::unique_ptr<zktest::ChildProcess>> bobs;
  for (auto* edge : edges) bobs.push_back(watchAt(*edge, "bob", target));
  auto bobAtOwner = watchAt(owner, "bob", target);
  std::uint64_t first = 0;
  for (auto& bob : bobs) first = waitForStatus(*bob, target, "online");
  waitForStatus(*bobAtOwner, target, "online");

  // A change: at the owner's subscriber, then one hop later at the others'.
  ASSERT_EQ(lease(owner, target, holder, 1, true).status, 200);
  const auto atOwner = waitForStatusLine(*bobAtOwner, target, "offline", 5s);
  std::string hops;
  for (std::size_t i = 0; i < bobs.size(); ++i) {
    const auto atEdge = waitForStatusLine(*bobs[i], target, "offline", 5s);
    EXPECT_EQ(atEdge.version, atOwner.version) << edges[i]->id();
    EXPECT_GT(atEdge.version, first) << edges[i]->id();
    hops += " " + edges[i]->id() + " " +
            std::to_string(static_cast<double>(atEdge.unixNs - atOwner.unixNs) / 1e6) + " ms";
  }

  owner.process().signal(SIGTERM);
  std::string next;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        next = shardOwners(zkHosts_, root_).at(shardOf(target));
        return !next.empty() && next != owner.url();
      },
      10s));
  const auto movedAt = Clock::now();
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(byUrl(next), target, holder, 3)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  std::string after;
  for (std::size_t i = 0; i < bobs.size(); ++i) {
    auto& bob = *bobs[i];
    const auto online = waitForStatusLine(bob, target, "online", 5s);
    EXPECT_GT(online.version >> 32, atOwner.version >> 32)
        << edges[i]->id() << ": the new owner's epoch is not above";
    const auto versions = versionsSeen(bob, target);
    EXPECT_TRUE(std::is_sorted(versions.begin(), versions.end()))
        << "a version went backwards at " << edges[i]->id() << ": " << bob.transcript();
    for (const auto& line : bob.stdoutLines()) {
      EXPECT_FALSE(line.starts_with("CLOSED ")) << edges[i]->id() << " closed bob: " << line;
    }
    after += " " + edges[i]->id() + (edges[i]->url() == next ? " (the new owner) " : " ") +
             epochAndCount(online.version) + " after " + std::to_string(millisSince(movedAt)) +
             " ms";
  }
  EXPECT_TRUE(owner.process().wait(20s).exitedWith(0)) << owner.process().stderrText();
  std::cout << "relayed: a change at " << owner.id() << " (" << epochAndCount(atOwner.version)
            << ") at the other gateways' subscribers, after the owner's:" << hops
            << "; after the move, online at" << after << " from the new owner seen\n";
}

// Privacy stays with the owner, for the real viewer: through a gateway that does not own the
// target, a contact (bob) sees it and its changes, a viewer the rules do not allow (carol) sees
// nothing of it, although her subscription is live at the owner through the relay.
TEST_F(GatewayCluster, ARelayedViewerSeesOnlyWhatTheOwnersRulesLetHerSee) {
  const std::string target = "acc-1";
  auto& owner = byUrl(shardOwners(zkHosts_, root_).at(shardOf(target)));
  ClusterGateway* edge = othersThan(owner).back();
  const auto holder = elect(target, "agent-a");
  ASSERT_EQ(
      putPrivacy(owner, target, json{{"granularity", "exact"}, {"contacts", json::array({"bob"})}})
          .status,
      200);
  const auto watchedBefore = watchedAt(owner);
  auto carol = watchAt(*edge, "carol", target);
  auto bob = watchAt(*edge, "bob", target);
  carol->waitForLine("SNAPSHOT-END", 10s);
  bob->waitForLine("SNAPSHOT-END", 10s);
  // Both relayed subscriptions watch the target at the owner before it changes.
  ASSERT_TRUE(zktest::eventually([&] { return watchedAt(owner) == watchedBefore + 2; }, 5s))
      << watchedAt(owner);
  http::ClientResponse renewed;
  ASSERT_TRUE(zktest::eventually(
      [&] { return (renewed = lease(owner, target, holder, 1)).status == 200; }, 5s))
      << renewed.status << " " << renewed.body;
  waitForStatus(*bob, target, "online");
  ASSERT_EQ(lease(owner, target, holder, 1, true).status, 200);
  waitForStatus(*bob, target, "offline");
  for (const auto& line : carol->stdoutLines()) {
    EXPECT_EQ(line.find(" " + target + " "), std::string::npos) << "carol sees " << line;
  }
}

}  // namespace gateway_cluster_test
