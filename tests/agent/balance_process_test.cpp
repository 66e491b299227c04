// Leadership balance on real zk-agent processes over a real ZooKeeper: agents joining take their
// share, a killed agent's accounts spread over the others, a drained agent is given nothing, a
// preferred instance leads its accounts while it can. Throughout, a sampler of every agent's
// status sees no account led twice at once and tokens growing per account.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "balance_cluster.hpp"
#include "zktest/deadline.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zkagent_test::accountNames;
using zkagent_test::BalanceAgent;
using zkagent_test::BalanceCluster;
using zkagent_test::LeadershipSampler;
using zktest::eventually;

constexpr int kSettleMs = 1000;
// Beyond the settle window: the moves themselves, health reports, a loaded 2-core machine.
constexpr auto kMargin = 20s;

// The sampler's check on made-up samples (no processes): every pair of holders is compared, so a
// long interval overlapping a later one is found even with a shorter interval between them.
TEST(LeadershipViolations, AreFoundBetweenAnyTwoHoldersNotOnlyNeighboursInStartOrder) {
  using zkagent_test::leadershipViolations;
  const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  auto at = [&](int ms) { return t0 + milliseconds(ms); };
  // host-a leads with token 5 from 0 to 100 ms; host-a again (token 6) from 10 to 20 ms; host-b
  // (token 7) from 30 to 40 ms, while host-a still led with token 5.
  const zkagent_test::LeadershipSeen overlap{{"acct-0",
                                              {{{"host-a", 5}, {at(0), at(100)}},
                                               {{"host-a", 6}, {at(10), at(20)}},
                                               {{"host-b", 7}, {at(30), at(40)}}}}};
  const auto found = leadershipViolations(overlap);
  ASSERT_EQ(found.size(), 1u) << json(found).dump();
  EXPECT_EQ(found[0], "acct-0: host-a (token 5) and host-b (token 7) led at once");

  // A token lower than an earlier holder's, two holders later.
  const zkagent_test::LeadershipSeen backwards{{"acct-1",
                                                {{{"host-a", 5}, {at(0), at(10)}},
                                                 {{"host-b", 7}, {at(20), at(30)}},
                                                 {{"host-c", 6}, {at(40), at(50)}}}}};
  EXPECT_EQ(leadershipViolations(backwards), (std::vector<std::string>{"acct-1: token 6 after 7"}));

  // Clean handovers: one holder at a time, tokens growing.
  const zkagent_test::LeadershipSeen clean{{"acct-2",
                                            {{{"host-a", 5}, {at(0), at(10)}},
                                             {{"host-b", 6}, {at(11), at(30)}},
                                             {{"host-a", 9}, {at(31), at(50)}}}}};
  EXPECT_TRUE(leadershipViolations(clean).empty()) << json(leadershipViolations(clean)).dump();
}

class BalanceProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<BalanceCluster>(
        zktest::sharedZooKeeper().connectString(), zktest::uniqueTestRoot(),
        std::filesystem::temp_directory_path() /
            ("zk-balance-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++)));
  }
  void TearDown() override {
    sampler_.reset();
    cluster_.reset();
  }

  // Every count in [want - tolerance, want + tolerance] and every account led exactly once.
  bool spread(size_t agents, size_t want, size_t tolerance, size_t total) {
    const auto counts = cluster_->counts();
    size_t sum = 0, in = 0;
    for (const auto& [id, n] : counts) {
      sum += n;
      if (n + tolerance >= want && n <= want + tolerance) ++in;
    }
    return counts.size() == agents && in == agents && sum == total;
  }
  std::string countsText() { return json(cluster_->counts()).dump(); }
  // The sampler must have looked (more than 10 rounds) for "no violation" to mean anything; on a
  // loaded machine a short test reaches that a little later, so it is awaited, not assumed.
  void expectNoViolations() {
    EXPECT_TRUE(eventually([&] { return sampler_->rounds() > 10u; }, 10s))
        << "the sampler ran " << sampler_->rounds() << " rounds";
    sampler_->stop();
    for (const auto& v : sampler_->violations()) ADD_FAILURE() << v;
  }
  static double moves(BalanceAgent& agent) {
    return agent.metric("zkagent_balance_moves_total", "result=\"started\"");
  }

  std::unique_ptr<BalanceCluster> cluster_;
  std::unique_ptr<LeadershipSampler> sampler_;
  static inline int counter_ = 0;
};

TEST_F(BalanceProcessTest, ThreeAgentsStartedInTurnLeadAThirdEachThroughKillAndRestart) {
  const auto accounts = accountNames(300);
  auto config = [&](const std::string& id) { return cluster_->config(id, accounts, kSettleMs); };
  auto& a = cluster_->start(config("host-a"));
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 20s))
      << countsText();
  sampler_ = std::make_unique<LeadershipSampler>(*cluster_);
  // Operations all along; counted while accounts move by handovers (not across the kill -9,
  // where the dead agent's accounts wait for its session to expire).
  zkagent_test::OperationLoad load(*cluster_, accountNames(30), 2);
  load.count(true);
  auto& b = cluster_->start(config("host-b"));
  auto& c = cluster_->start(config("host-c"));
  ASSERT_TRUE(
      eventually([&] { return spread(3, 100, 10, 300); }, milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  // A gives the 200 the newcomers lack, and not many more (the plan fills each receiver once).
  EXPECT_LE(moves(a) + moves(b) + moves(c), 220) << countsText();
  EXPECT_NE(b.process->stderrText().find("reason=rebalance"), std::string::npos)
      << "a receiver logs the leadership line of a rebalance";

  load.count(false);
  cluster_->kill9(a);
  ASSERT_TRUE(eventually([&] { return spread(2, 150, 15, 300); },
                         2000ms + milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();

  load.count(true);
  auto& restarted = cluster_->start(config("host-a"));
  ASSERT_TRUE(
      eventually([&] { return spread(3, 100, 10, 300); }, milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  EXPECT_EQ(moves(restarted), 0) << "a receiver gave accounts away";
  load.stop();
  // Only an operation caught in the moment of a handover may fail its three attempts.
  RecordProperty("operations", load.result().dump());
  EXPECT_GT(load.ok(), 100) << load.result().dump();
  EXPECT_LE(load.failed() * 50, load.ok()) << load.result().dump();
  expectNoViolations();
}

TEST_F(BalanceProcessTest, ADrainedAgentLeadsNothingAndIsGivenNothing) {
  const auto accounts = accountNames(60);
  auto config = [&](const std::string& id) { return cluster_->config(id, accounts, kSettleMs); };
  cluster_->start(config("host-a"));
  cluster_->start(config("host-b"));
  auto& c = cluster_->start(config("host-c"));
  ASSERT_TRUE(
      eventually([&] { return spread(3, 20, 2, 60); }, milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  sampler_ = std::make_unique<LeadershipSampler>(*cluster_);

  ASSERT_EQ(c.admin->post("/v1/drain", "").status / 100, 2);
  ASSERT_TRUE(eventually([&] { return c.status().value("lifecycle", "") == "drained"; }, 15s))
      << c.status().dump();
  // The others share the drained agent's accounts, and it stays out of the plan.
  ASSERT_TRUE(eventually(
      [&] {
        const auto counts = cluster_->counts();
        return counts.at("host-c") == 0 && counts.at("host-a") >= 27 && counts.at("host-b") >= 27;
      },
      milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  EXPECT_EQ(c.status()["balance"].value("state", ""), "unschedulable");
  // The others count only each other once they read the drained report.
  for (const auto& agent : cluster_->running()) {
    if (agent->id == "host-c") continue;
    EXPECT_TRUE(eventually(
        [&] {
          return agent->status()["balance"]["agents"] == json({"host-a", "host-b"});
        },
        5s, 50ms))
        << agent->id << ": " << agent->status()["balance"].dump();
  }
  EXPECT_TRUE(c.leading().empty());
  expectNoViolations();
}

TEST_F(BalanceProcessTest, APreferredInstanceLeadsItsAccountsWhileSchedulable) {
  const auto accounts = accountNames(40);
  json preferred;
  for (int i = 0; i < 10; ++i) preferred["acct-" + std::to_string(i)] = "host-b";
  auto config = [&](const std::string& id) {
    auto c = cluster_->config(id, accounts, kSettleMs);
    c["balance"]["preferred"] = preferred;
    return c;
  };
  auto& a = cluster_->start(config("host-a"));
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 20s));
  sampler_ = std::make_unique<LeadershipSampler>(*cluster_);
  auto& b = cluster_->start(config("host-b"));
  // The 10 preferred go to host-b; balance splits the other 30.
  ASSERT_TRUE(eventually(
      [&] {
        const auto led = b.leading();
        for (int i = 0; i < 10; ++i) {
          if (!led.contains("acct-" + std::to_string(i))) return false;
        }
        return led.size() >= 24 && led.size() <= 26 && a.leading().size() + led.size() == 40;
      },
      milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  EXPECT_GE(a.metric("zkagent_balance_moves_total", "reason=\"preferred\",result=\"started\""), 10);

  // Not schedulable (drained): its preferred accounts go back to balance, here host-a.
  ASSERT_EQ(b.admin->post("/v1/drain", "").status / 100, 2);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); },
                         milliseconds(kSettleMs) + kMargin, 50ms))
      << countsText();
  expectNoViolations();
}

TEST_F(BalanceProcessTest, AnAgentStandingForOtherAccountsOnlyIsNotCounted) {
  auto& a = cluster_->start(cluster_->config("host-a", accountNames(20), 200));
  auto& b = cluster_->start(cluster_->config("host-b", accountNames(20, "other-"), 200));
  ASSERT_TRUE(
      eventually([&] { return a.leading().size() == 20 && b.leading().size() == 20; }, 20s));
  for (auto* agent : {&a, &b}) {
    EXPECT_TRUE(eventually(
        [&] {
          const auto balance = agent->status()["balance"];
          return balance["state"] == "balanced" && balance["agents"] == json({agent->id});
        },
        5s, 50ms))
        << agent->status()["balance"].dump();
  }
  EXPECT_EQ(a.metric("zkagent_balance_moves_total"), 0);
}

TEST_F(BalanceProcessTest, DisabledBalanceKeepsTheQueueOrder) {
  const auto accounts = accountNames(30);
  auto config = [&](const std::string& id) {
    auto c = cluster_->config(id, accounts, 200);
    c["balance"]["enabled"] = false;
    return c;
  };
  auto& a = cluster_->start(config("host-a"));
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 20s));
  auto& b = cluster_->start(config("host-b"));
  ASSERT_TRUE(eventually(
      [&] {
        const auto peers = a.status().value("peers", json::array());
        return std::any_of(peers.begin(), peers.end(), [](const json& p) {
          return p["instance"] == "host-b" && p["schedulable"];
        });
      },
      10s));
  // Several settle windows with b schedulable: nothing moves.
  EXPECT_FALSE(eventually(
      [&] {
        const auto s = a.status();
        return s.is_object() && s.value("leading", size_t{0}) != accounts.size();
      },
      2000ms, 50ms))
      << countsText();
  EXPECT_EQ(b.status()["balance"].value("state", ""), "disabled");
}

}  // namespace
