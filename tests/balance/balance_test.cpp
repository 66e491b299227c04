// The balance plan (who gives how many accounts, or shards, to whom).
#include "zkagent/balance.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace {

using zkagent::balance::planBalance;
using zkagent::balance::rowOf;
using Counts = std::map<std::string, size_t>;

TEST(BalancePlan, FirstAgentWithEveryAccountGivesEachNewcomerItsShare) {
  const auto plan = planBalance({{"a", 300}, {"b", 0}, {"c", 0}}, 0, 0.1, false);
  EXPECT_EQ(plan.accounts, 300u);
  EXPECT_EQ(plan.threshold, 10u);
  EXPECT_TRUE(plan.imbalanced);
  EXPECT_EQ(plan.excess, 200u);
  EXPECT_EQ(rowOf(plan, "a"), (Counts{{"b", 100}, {"c", 100}}));
  EXPECT_TRUE(rowOf(plan, "b").empty());
}

TEST(BalancePlan, TwoGiversFillOneNewcomerOnlyOnceBetweenThem) {
  const auto plan = planBalance({{"a", 150}, {"b", 150}, {"c", 0}}, 0, 0.1, false);
  EXPECT_EQ(rowOf(plan, "a"), (Counts{{"c", 50}}));
  EXPECT_EQ(rowOf(plan, "b"), (Counts{{"c", 50}}));
}

TEST(BalancePlan, CountsWithinTheBandMoveNothingUnlessAGiverIsFinishing) {
  const Counts counts{{"a", 108}, {"b", 92}, {"c", 100}};
  EXPECT_FALSE(planBalance(counts, 0, 0.1, false).imbalanced);
  EXPECT_TRUE(planBalance(counts, 0, 0.1, false).transfers.empty());
  EXPECT_EQ(rowOf(planBalance(counts, 0, 0.1, true), "a"), (Counts{{"b", 8}}));
}

TEST(BalancePlan, AnAgentAtOrUnderItsTargetNeverGives) {
  const auto plan = planBalance({{"a", 10}, {"b", 4}, {"c", 0}}, 0, 0.1, false);
  EXPECT_EQ(plan.target.at("a"), 5u);  // the remainder goes to the agent leading most
  EXPECT_EQ(plan.target.at("b"), 5u);
  EXPECT_EQ(plan.target.at("c"), 4u);
  EXPECT_EQ(rowOf(plan, "a"), (Counts{{"b", 1}, {"c", 4}}));
  EXPECT_TRUE(rowOf(plan, "b").empty());
}

TEST(BalancePlan, TheThresholdIsAtLeastOneAccount) {
  EXPECT_EQ(planBalance({{"a", 3}, {"b", 2}}, 0, 0.1, false).threshold, 1u);
  EXPECT_FALSE(planBalance({{"a", 3}, {"b", 2}}, 0, 0.1, false).imbalanced);
  EXPECT_TRUE(planBalance({{"a", 4}, {"b", 1}}, 0, 0.1, false).imbalanced);
}

TEST(BalancePlan, AccountsWithNoLeaderSeenCountInTheTargetsButForNobody) {
  // a sees 3 of b's accounts without their leader yet: the targets are the same as everyone's;
  // what the stale view can cost is those 3 accounts given to b on top of its 100.
  const auto plan = planBalance({{"a", 200}, {"b", 97}, {"c", 0}}, 3, 0.1, false);
  EXPECT_EQ(plan.accounts, 300u);
  EXPECT_EQ(plan.target.at("b"), 100u);
  EXPECT_EQ(rowOf(plan, "a"), (Counts{{"b", 3}, {"c", 97}}));
}

TEST(BalancePlan, NoAgentsOrNoAccountsPlanNothing) {
  EXPECT_TRUE(planBalance({}, 0, 0.1, false).transfers.empty());
  EXPECT_TRUE(planBalance({{"a", 0}, {"b", 0}}, 0, 0.1, false).transfers.empty());
}

// Givers move in a random interleaving, each from a snapshot of the counts that may be behind the
// other givers' moves (an agent sees them land later), planning again between batches: the total
// is at most the first plan's excess, no agent that received ever gives (no receiver is filled
// past its target, no account moves twice) and the counts end within the band.
TEST(BalancePlan, GiversPlanningFromSnapshotsBehindEachOtherNeverOvershoot) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    Counts counts;
    const int agents = 2 + static_cast<int>(rng() % 6);
    for (int i = 0; i < agents; ++i) counts["agent-" + std::to_string(i)] = rng() % 400;
    const auto first = planBalance(counts, 0, 0.1, false);
    std::map<std::string, bool> giving;
    std::set<std::string> received;
    size_t moves = 0;
    for (int step = 0; step < 10000; ++step) {
      const Counts snapshot = counts;  // every giver of this batch plans from the same view
      bool moved = false;
      for (const auto& [agent, n] : snapshot) {
        const auto row = rowOf(planBalance(snapshot, 0, 0.1, giving[agent]), agent);
        giving[agent] = !row.empty();
        for (const auto& [to, k] : row) {
          const size_t now = 1 + rng() % k;  // some of the row, as many in flight at once
          ASSERT_FALSE(received.contains(agent)) << "round " << round << ": " << agent;
          received.insert(to);
          counts[agent] -= now;
          counts[to] += now;
          moves += now;
          moved = true;
        }
      }
      if (!moved) break;
    }
    EXPECT_LE(moves, first.excess) << "round " << round;
    EXPECT_FALSE(planBalance(counts, 0, 0.1, false).imbalanced) << "round " << round;
  }
}

struct Member {
  std::string instanceId;
  int64_t seq;
};
const auto anyone = [](const std::string&) { return true; };

TEST(QueueJump, TheReceiverNextInTheQueueNeedsNoJumpAndTheGiverIsSkipped) {
  const std::vector<Member> queue{{"a", 1}, {"b", 2}, {"c", 3}};
  const auto jump = zkagent::balance::jumpTo(
      queue, "a", [](const std::string& id) { return id == "b"; }, anyone);
  ASSERT_TRUE(jump);
  EXPECT_EQ(jump->to, "b");
  EXPECT_EQ(jump->receiverSeq, 2);
  EXPECT_TRUE(jump->ahead.empty());
}

TEST(QueueJump, TheMembersBetweenTheGiverAndTheReceiverStepBack) {
  const std::vector<Member> queue{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};
  const auto jump = zkagent::balance::jumpTo(
      queue, "a", [](const std::string& id) { return id == "d"; }, anyone);
  ASSERT_TRUE(jump);
  EXPECT_EQ(jump->receiverSeq, 4);
  EXPECT_EQ(jump->ahead, (std::vector<int64_t>{2, 3}));
}

TEST(QueueJump, NoJumpOverAnotherKindOfElectorNorToAnAbsentReceiver) {
  const std::vector<Member> queue{{"a", 1}, {"zk-elect", 2}, {"c", 3}};
  const auto receivesC = [](const std::string& id) { return id == "c"; };
  EXPECT_FALSE(zkagent::balance::jumpTo(queue, "a", receivesC,
                                        [](const std::string& id) { return id != "zk-elect"; }));
  EXPECT_FALSE(zkagent::balance::jumpTo(
      queue, "a", [](const std::string& id) { return id == "x"; }, anyone));
}

TEST(MoveState, LandsOnAnotherLeaderFailsWhenStillLeadingAndIsForgottenUnseen) {
  using zkagent::balance::MoveState;
  using zkagent::balance::moveState;
  const std::optional<std::string> none, self = "a", other = "b";
  EXPECT_EQ(moveState(false, other, "a", std::chrono::milliseconds(10)), MoveState::Landed);
  EXPECT_EQ(moveState(false, self, "a", std::chrono::milliseconds(10)), MoveState::InFlight);
  EXPECT_EQ(moveState(true, none, "a", std::chrono::milliseconds(10)), MoveState::InFlight);
  EXPECT_EQ(moveState(true, self, "a", std::chrono::seconds(6)), MoveState::Over);
  EXPECT_EQ(moveState(false, none, "a", std::chrono::seconds(6)), MoveState::InFlight);
  EXPECT_EQ(moveState(false, none, "a", std::chrono::seconds(31)), MoveState::Over);
}

}  // namespace
