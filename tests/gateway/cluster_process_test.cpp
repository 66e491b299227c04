// A cluster of real fencing-gateway processes on one ZooKeeper (docs/gateway-cluster.md): every
// shard has one owner, the others answer 421 naming it, the shard count is fixed, an owner's
// kill -9, SIGTERM or SIGSTOP moves its shards without any gateway accepting a stale token, and
// the shards are spread evenly over the gateways standing.
#include "cluster_fixture.hpp"

namespace gateway_cluster_test {

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

// Heartbeats to every owner (docs/gateway-cluster.md, "Agents"): the agent beats to each gateway
// the shard map names. An owner paused (SIGSTOP) shows down in its /v1/status and /metrics within
// the heartbeat timeout + interval while the others stay up; an operation for an account of the
// paused owner's shards is answered at once (503 shard_owner_unreachable, by the configured
// gateway's 421) instead of waiting out the request timeout, while accounts of live owners are
// accepted; once the shards move, the owners listed are the two live ones, both up.
TEST_F(GatewayCluster, AnAgentSeesAPausedOwnerDownAndAnswersItsAccountsAtOnceWhileOthersAccept) {
  auto& configured = *gateways_.front();
  auto& paused = *gateways_.back();
  const auto owners = shardOwners(zkHosts_, root_);
  std::vector<std::string> pausedAccounts, liveAccounts;
  for (int i = 0; pausedAccounts.size() < 2 || liveAccounts.size() < 2; ++i) {
    ASSERT_LT(i, 200) << "no accounts on the paused owner's shards";
    const auto account = "acc-" + std::to_string(i);
    auto& list = owners.at(shardOf(account)) == paused.url() ? pausedAccounts : liveAccounts;
    if (list.size() < 2) list.push_back(account);
  }
  auto accounts = pausedAccounts;
  accounts.insert(accounts.end(), liveAccounts.begin(), liveAccounts.end());
  constexpr auto kBeatInterval = 100ms;
  constexpr auto kBeatTimeout = 300ms;
  constexpr auto kRequestTimeout = 5000ms;  // what an operation sent to the paused owner waits
  auto patch = json::object();
  patch["gateway"]["heartbeat_interval_ms"] = kBeatInterval.count();
  patch["gateway"]["heartbeat_timeout_ms"] = kBeatTimeout.count();
  patch["gateway"]["request_timeout_ms"] = kRequestTimeout.count();
  const zktest::AgentSite site{zkHosts_, siteRoot_, configured.url()};
  auto agent = zktest::AgentProcess::start(
      dir_.path(), zktest::agentConfig(site, "agent-a", accounts, patch),
      zktest::AgentStartOptions{.requestTimeout = kRequestTimeout + 2s});

  // The owners as the agent's status lists them: url -> state.
  const auto listed = [&] {
    std::map<std::string, std::string> states;
    const auto status = agent->status();
    if (status.is_null()) return states;
    for (const auto& owner : status["gateway"]["owners"]) {
      states[owner.value("url", "")] = owner.value("state", "");
    }
    return states;
  };
  const auto upSeries = [&](const std::string& metrics, const ClusterGateway& gateway) {
    return zktest::metricSample(
        metrics, R"(zkagent_gateway_owner_link_up{owner=")" + gateway.url() + R"("})");
  };
  std::map<std::string, std::string> allUp;
  for (const auto& gateway : gateways_) allUp[gateway->url()] = "up";
  ASSERT_TRUE(zktest::eventually([&] { return listed() == allUp; }, 20s)) << agent->status().dump();
  for (const auto& account : accounts) {
    ASSERT_TRUE(zktest::eventually([&] { return agent->leads(account); }, 20s)) << account;
    // Each one once: the kept-alive connections to every owner are open before the pause.
    const auto first = agent->op(account, "before-" + account);
    EXPECT_EQ(first.status, 200) << account << ": " << first.body;
  }

  paused.process().signal(SIGSTOP);
  const auto pausedAt = Clock::now();
  auto expected = allUp;
  expected[paused.url()] = "down";
  std::string metrics;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        if (listed() != expected) return false;
        metrics = agent->metrics();
        return upSeries(metrics, paused) == 0.0 && upSeries(metrics, configured) == 1.0 &&
               upSeries(metrics, *gateways_[1]) == 1.0;
      },
      5s, 10ms))
      << agent->status().dump() << "\n"
      << metrics;
  const auto detectedMs = millisSince(pausedAt);
  std::cout << "paused owner seen down " << detectedMs << " ms after SIGSTOP (heartbeat timeout "
            << kBeatTimeout.count() << " + interval " << kBeatInterval.count() << " ms)\n";
  // The heartbeat bound, with room for a loaded machine; the shards move about 1.5 s after the
  // pause (the gateways' session timeout), so the window above closes there at the latest.
  EXPECT_LT(detectedMs, (kBeatTimeout + kBeatInterval + 700ms).count());

  for (const auto& account : pausedAccounts) {
    const auto sentAt = Clock::now();
    const auto answer = agent->op(account, "paused-" + account);
    const auto tookMs = millisSince(sentAt);
    std::cout << account << " (paused owner's shard): " << answer.status << " " << answer.body
              << " in " << tookMs << " ms\n";
    // 503 while the map still names the paused owner, 200 if its shard has just moved.
    EXPECT_TRUE(answer.status == 503 || answer.status == 200)
        << answer.status << " " << answer.body;
    EXPECT_LT(tookMs, 1000) << "sent into the paused owner's request timeout ("
                            << kRequestTimeout.count() << " ms)";
  }
  for (const auto& account : liveAccounts) {
    const auto answer = agent->op(account, "live-" + account);
    EXPECT_EQ(answer.status, 200) << account << ": " << answer.body;
  }

  // The shards move once the paused owner's session expires: the agent lists the two owners left.
  auto remaining = allUp;
  remaining.erase(paused.url());
  ASSERT_TRUE(zktest::eventually([&] { return listed() == remaining; }, kSessionTimeout + 15s))
      << agent->status().dump();
  EXPECT_FALSE(upSeries(agent->metrics(), paused).has_value()) << "its series stays after it left";
  for (const auto& account : pausedAccounts) {
    http::ClientResponse moved;
    int attempt = 0;
    EXPECT_TRUE(zktest::eventually(
        [&] {
          moved = agent->op(account, "moved-" + account + "-" + std::to_string(++attempt));
          return moved.status == 200;
        },
        10s, 50ms))
        << account << ": " << moved.status << " " << moved.body;
  }
  paused.process().kill();
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

// ---- Drain: POST /v1/drain hands a gateway's shards over as SIGTERM does, and it serves on.

// The first account `prefix`N (N from 1) in `shard`.
std::string accountIn(const std::string& shard, const std::string& prefix) {
  for (int n = 1;; ++n) {
    const auto account = prefix + std::to_string(n);
    if (naming::shardId(naming::shardOf(account, kShards)) == shard) return account;
  }
}

// What a client following a 421 once sees (as an agent does).
http::ClientResponse postFollowing(const std::vector<std::unique_ptr<ClusterGateway>>& gateways,
                                   const ClusterGateway& first, const std::string& body) {
  auto answer = first.client(3s).post("/v1/ops", body);
  if (answer.status != 421) return answer;
  const auto misdirected = json::parse(answer.body, nullptr, false);
  const auto owner = misdirected.is_object() ? misdirected.value("owner", "") : "";
  for (const auto& gateway : gateways) {
    if (gateway->url() == owner) return gateway->client(3s).post("/v1/ops", body);
  }
  return answer;
}

// The drain of the gateway owning the most shards (3 of 8) while a client sends operations for an
// account in each of its shards, with the current leader's token and a deposed one's: every
// shard owned by the others within a second (4/4: each receiver by the balance rule), the
// drained gateway answering 421 naming each new owner and saying "drained" in /healthz and
// /metrics, a second drain changing nothing, the shards never given back, and no stale token
// accepted anywhere.
TEST_F(GatewayCluster, ADrainHandsEveryShardOverWithinASecondAndTheGatewayServesOn421s) {
  const auto before = shardOwners(zkHosts_, root_);
  std::map<std::string, int> byOwner;
  for (const auto& [shard, url] : before) ++byOwner[url];
  const auto most =
      std::max_element(byOwner.begin(), byOwner.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  auto& drained = byUrl(most->first);
  std::vector<std::string> accounts;  // one in each of its shards
  for (const auto& [shard, url] : before) {
    if (url == drained.url()) accounts.push_back(accountIn(shard, "dr-"));
  }
  ASSERT_EQ(accounts.size(), 3u);
  std::size_t drainedIndex = 0;
  while (gateways_[drainedIndex].get() != &drained) ++drainedIndex;

  // agent-a leads the accounts, then agent-b: agent-a's tokens are stale.
  std::string list;
  for (const auto& account : accounts) list += (list.empty() ? "" : ",") + account;
  auto electAll = [&](const std::string& instance) {
    electors_.push_back(std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-elect").string(),
        std::vector<std::string>{"--zk", zkHosts_, "--root", root_, "--instance-id", instance,
                                 "--accounts", list, "--session-timeout-ms", "1500"}));
    for (std::size_t led = 0; led < accounts.size(); ++led) {
      electors_.back()->waitForLine("LEADER ", 20s);
    }
    std::map<std::string, Holder> holders;
    for (const auto& account : accounts) holders[account] = holder(account);
    return holders;
  };
  const auto stale = electAll("agent-a");
  electors_.front()->kill();
  const auto current = electAll("agent-b");
  for (const auto& account : accounts) {
    ASSERT_EQ(current.at(account).instance, "agent-b") << account;
    ASSERT_GT(current.at(account).token, stale.at(account).token) << account;
  }

  // Refused, changing nothing: no credential, a wrong one.
  EXPECT_EQ(drained.client().post("/v1/drain", "").status, 401);
  EXPECT_EQ(drained.operatorClient(5s, "not-the-operator-token").post("/v1/drain", "").status, 401);
  EXPECT_EQ(drained.metric("zkagent_gateway_shards_owned", -1), 3);

  // The client: each round, every account's operation with the current token at the drained
  // gateway (a 421 followed once), and with the stale token at every gateway.
  std::atomic<bool> sending{true};
  std::atomic<Clock::rep> drainedSince{Clock::time_point::max().time_since_epoch().count()};
  std::mutex tallyMutex;
  std::map<int, int> currentBefore, currentAfter;  // status: count
  int staleRefused = 0;
  std::vector<std::string> staleAccepted;
  auto client = std::async(std::launch::async, [&] {
    for (int round = 0; sending; ++round) {
      for (const auto& account : accounts) {
        const auto& now = current.at(account);
        const auto& old = stale.at(account);
        const auto sent = Clock::now().time_since_epoch().count();
        const auto answer = postFollowing(
            gateways_, drained,
            op(account, now.token, "c-" + std::to_string(round), now.instance, now.session));
        std::vector<std::pair<std::string, http::ClientResponse>> staleAnswers;
        for (const auto& gateway : gateways_) {
          staleAnswers.emplace_back(
              gateway->id(), postFollowing(gateways_, *gateway,
                                           op(account, old.token,
                                              "s-" + gateway->id() + "-" + std::to_string(round),
                                              old.instance, old.session)));
        }
        std::lock_guard lock(tallyMutex);
        ++(sent >= drainedSince.load() ? currentAfter : currentBefore)[answer.status];
        for (const auto& [id, staleAnswer] : staleAnswers) {
          if (staleAnswer.status == 200) {
            staleAccepted.push_back(account + " via " + id + ": " + staleAnswer.body);
          } else {
            ++staleRefused;
          }
        }
      }
    }
  });
  struct StopSending {  // before the client's future waits for it, on every way out
    std::atomic<bool>& flag;
    ~StopSending() { flag = false; }
  } stopSending{sending};
  ASSERT_TRUE(zktest::eventually(
      [&] {
        std::lock_guard lock(tallyMutex);
        return currentBefore[200] >= 6;
      },
      10s))
      << "the client's operations are not accepted before the drain";

  const auto drainStarted = Clock::now();
  drainedSince = drainStarted.time_since_epoch().count();
  const auto answer = drained.operatorClient().post("/v1/drain", "");
  ASSERT_TRUE(answer.status == 202 || answer.status == 200) << answer.status << " " << answer.body;
  std::vector<int> counts;
  ASSERT_TRUE(zktest::eventually(
      [&] {
        counts = shardsOwned(gateways_);
        int others = 0;
        for (std::size_t i = 0; i < counts.size(); ++i) {
          if (i != drainedIndex) others += counts[i];
        }
        return others == static_cast<int>(kShards);
      },
      10s, 1ms))
      << "the others never owned every shard after the drain";
  const auto ownedAfter = millisSince(drainStarted);
  EXPECT_LT(ownedAfter, 1000) << "a drain as slow as a session expiry";
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(counts[i], i == drainedIndex ? 0 : 4) << gateways_[i]->id()
                                                    << ": the receivers "
                                                       "were not chosen by the balance rule";
  }
  const auto after = shardOwners(zkHosts_, root_);
  for (const auto& [shard, url] : after) {
    EXPECT_FALSE(url.empty() || url == drained.url()) << shard << " owned by '" << url << "'";
  }

  // The drained gateway serves on: 421 naming each account's new owner, which accepts.
  for (const auto& account : accounts) {
    const auto& owner = after.at(shardOf(account));
    const auto& now = current.at(account);
    http::ClientResponse misdirected;
    ASSERT_TRUE(zktest::eventually(
        [&] {
          misdirected = drained.client().post(
              "/v1/ops", op(account, now.token, "probe-" + account, now.instance, now.session));
          const auto body = json::parse(misdirected.body, nullptr, false);
          return misdirected.status == 421 && body.is_object() && body.value("owner", "") == owner;
        },
        2s))
        << account << ": " << misdirected.status << " " << misdirected.body << " (owner " << owner
        << ")";
    EXPECT_EQ(
        byUrl(owner)
            .client()
            .post("/v1/ops", op(account, now.token, "after-" + account, now.instance, now.session))
            .status,
        200)
        << account;
  }
  ASSERT_TRUE(zktest::eventually(
      [&] {
        const auto health = json::parse(drained.client().get("/healthz").body, nullptr, false);
        return health.is_object() && health.value("cluster", "") == "drained" &&
               health.value("shards_owned", -1) == 0;
      },
      2s))
      << drained.client().get("/healthz").body;
  EXPECT_EQ(drained.metric(R"(zkagent_gateway_cluster_standing{state="drained"})", 0), 1);
  EXPECT_EQ(drained.metric(R"(zkagent_gateway_cluster_standing{state="standing"})", 1), 0);
  for (const auto& gateway : othersThan(drained)) {
    EXPECT_EQ(gateway->metric(R"(zkagent_gateway_cluster_standing{state="standing"})", 0), 1)
        << gateway->id();
  }
  // A second drain changes nothing and says so.
  const auto again = drained.operatorClient().post("/v1/drain", "");
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body).value("cluster", ""), "drained") << again.body;

  // Not given back: the others forget it (2 s), settle (2 s) and find nothing to move.
  EXPECT_FALSE(zktest::eventually(
      [&] { return drained.metric("zkagent_gateway_shards_owned", 0) > 0; }, 5s, 50ms))
      << "the balance gave the drained gateway shards back";
  counts = shardsOwned(gateways_);
  EXPECT_EQ(counts[drainedIndex], 0);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0), static_cast<int>(kShards));

  sending = false;
  client.get();
  std::lock_guard lock(tallyMutex);
  EXPECT_TRUE(staleAccepted.empty()) << "stale tokens accepted: " << staleAccepted.front();
  EXPECT_GT(currentAfter[200], 0) << "no operation accepted after the drain";
  EXPECT_NE(drained.process().stderrText().find("cluster: drained"), std::string::npos);
  // SIGTERM of a drained gateway: nothing to hand over, a clean stop.
  drained.process().signal(SIGTERM);
  EXPECT_TRUE(drained.process().wait(20s).exitedWith(0)) << drained.process().stderrText();
  std::string statuses;
  for (const auto& [status, n] : currentAfter) {
    statuses += " " + std::to_string(status) + "x" + std::to_string(n);
  }
  std::cout << "drain of " << drained.id() << " (3 of 8 shards): every shard owned by the others "
            << ownedAfter << " ms after the request, " << counts[(drainedIndex + 1) % 3] << "/"
            << counts[(drainedIndex + 2) % 3]
            << "; current-token operations since the drain:" << statuses
            << "; stale tokens: " << staleRefused << " refused, 0 accepted\n";
}

// A drain that would leave the shards without an owner (no other gateway stands) is refused with
// 409 and changes nothing: the gateway still owns every shard and stands for them.
TEST(GatewayClusterStart, ADrainWithNoOtherGatewayIsRefusedAndChangesNothing) {
  auto& zookeeper = zktest::sharedZooKeeper();
  const auto root = zktest::uniqueTestRoot();
  fencing::testing::TempDir dir;
  ClusterGateway alone(dir.path() / "a", zookeeper.connectString(), root, "gw-a", kShards);
  alone.awaitListening();
  ASSERT_TRUE(zktest::eventually(
      [&] { return alone.metric("zkagent_gateway_shards_owned", 0) == kShards; }, 20s));
  const auto refused = alone.operatorClient().post("/v1/drain", "");
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_NE(refused.body.find("no other gateway stands"), std::string::npos) << refused.body;
  EXPECT_EQ(alone.metric("zkagent_gateway_shards_owned", 0), kShards);
  EXPECT_EQ(json::parse(alone.client().get("/healthz").body).value("cluster", ""), "standing");
  EXPECT_EQ(alone.metric(R"(zkagent_gateway_cluster_standing{state="standing"})", 0), 1);
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
