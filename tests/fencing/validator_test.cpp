// The fencing rules, on a memory-only validator.
#include <gtest/gtest.h>

#include <string>
#include <zkagent/fencing.hpp>

namespace zkagent::fencing::validator_test {
namespace {

Operation op(std::uint64_t token, std::string opId, std::string account = "acct") {
  return Operation{{std::move(account), token, "host-a", 11}, std::move(opId), R"({"n":1})"};
}

TEST(TokenValidator, FirstTokenOfAnAccountIsAccepted) {
  TokenValidator validator;
  const Decision decision = validator.submit(op(3, "a"));
  EXPECT_TRUE(decision.accepted());
  EXPECT_EQ(decision.hwm, 3u);
  EXPECT_FALSE(decision.replayed);
}

TEST(TokenValidator, HigherTokenRaisesTheHwm) {
  TokenValidator validator;
  validator.submit(op(3, "a"));
  const Decision decision = validator.submit(op(8, "b"));
  EXPECT_TRUE(decision.accepted());
  EXPECT_EQ(decision.hwm, 8u);
  EXPECT_EQ(validator.status("acct")->hwm, 8u);
}

TEST(TokenValidator, EqualTokenIsAccepted) {
  TokenValidator validator;
  validator.submit(op(5, "a"));
  const Decision decision = validator.submit(op(5, "b"));
  EXPECT_TRUE(decision.accepted());
  EXPECT_EQ(decision.hwm, 5u);
}

TEST(TokenValidator, StaleTokenIsRejectedWithTheCurrentHwm) {
  TokenValidator validator;
  validator.submit(op(5, "a"));
  const Decision decision = validator.submit(op(4, "b"));
  EXPECT_EQ(decision.verdict, Verdict::stale_token);
  EXPECT_EQ(decision.hwm, 5u);
  EXPECT_NE(decision.detail.find("below"), std::string::npos);
  const AccountStatus status = *validator.status("acct");
  EXPECT_EQ(status.hwm, 5u);
  EXPECT_EQ(status.accepted, 1u);
  EXPECT_EQ(status.rejected, 1u);
}

TEST(TokenValidator, AccountsAreIndependent) {
  TokenValidator validator;
  validator.submit(op(9, "a", "one"));
  EXPECT_TRUE(validator.submit(op(1, "a", "two")).accepted());
  EXPECT_EQ(validator.status("one")->hwm, 9u);
  EXPECT_EQ(validator.status("two")->hwm, 1u);
}

TEST(TokenValidator, TokenOtherThanTheActiveSeqIsNotCurrentLeader) {
  TokenValidator validator;
  validator.submit(op(5, "a"));
  // A paused old leader (5) after the successor (6) took active, before 6 sent anything.
  const Decision paused = validator.submit(op(5, "b"), ActiveView::present(6));
  EXPECT_EQ(paused.verdict, Verdict::not_current_leader);
  // A forged future token.
  const Decision forged = validator.submit(op(100, "c"), ActiveView::present(6));
  EXPECT_EQ(forged.verdict, Verdict::not_current_leader);
  EXPECT_EQ(validator.status("acct")->hwm, 5u);
  EXPECT_TRUE(validator.submit(op(6, "d"), ActiveView::present(6)).accepted());
}

TEST(TokenValidator, NoActiveNodeRefusesEveryToken) {
  TokenValidator validator;
  const Decision decision = validator.submit(op(5, "a"), ActiveView::absent());
  EXPECT_EQ(decision.verdict, Verdict::not_current_leader);
  EXPECT_FALSE(validator.status("acct").has_value()) << "a rejection must not create state";
}

TEST(TokenValidator, StaleTokenWinsOverLeaderCheck) {
  TokenValidator validator;
  validator.submit(op(5, "a"));
  EXPECT_EQ(validator.submit(op(4, "b"), ActiveView::present(7)).verdict, Verdict::stale_token);
}

TEST(TokenValidator, ActiveSeqBelowHwmFencesTheAccountUntilReset) {
  TokenValidator validator;
  validator.submit(op(57, "a"));
  // ZooKeeper was wiped: the members counter restarted and the new leader has seq 2.
  const Decision first = validator.submit(op(2, "b"), ActiveView::present(2));
  EXPECT_EQ(first.verdict, Verdict::account_fenced);
  EXPECT_NE(first.detail.find("hwm_ahead_of_zookeeper"), std::string::npos);
  EXPECT_EQ(validator.fencedAccounts(), std::vector<std::string>{"acct"});
  // Fail closed: even a token that passes the HWM is refused, with or without ZooKeeper.
  EXPECT_EQ(validator.submit(op(60, "c")).verdict, Verdict::account_fenced);
  EXPECT_EQ(validator.submit(op(2, "d"), ActiveView::present(60)).verdict, Verdict::account_fenced);

  const AccountStatus reset = validator.resetHighWaterMark("acct", 2, "alice", "zk wiped");
  EXPECT_FALSE(reset.fenced);
  EXPECT_EQ(reset.hwm, 2u);
  EXPECT_TRUE(validator.fencedAccounts().empty());
  EXPECT_TRUE(validator.submit(op(2, "e"), ActiveView::present(2)).accepted());
}

// A cached view may only lag ZooKeeper: a seq below the HWM in it fences nothing and is not
// even counted as a rejection; the caller must decide again on a view read after a sync.
TEST(TokenValidator, ACachedViewBelowTheHwmAsksForAConfirmedViewAndChangesNothing) {
  TokenValidator validator;
  validator.submit(op(57, "a"), ActiveView::present(57));
  ActiveView lagging = ActiveView::present(2);
  lagging.cached = true;
  const Decision refused = validator.submit(op(57, "b"), lagging);
  EXPECT_TRUE(refused.confirmFirst);
  EXPECT_FALSE(refused.accepted());
  EXPECT_FALSE(refused.superseded) << "the writer may try again";
  const FencedWrite write{op(57, "c").fencing, lagging};
  EXPECT_TRUE(validator.admit(std::span(&write, 1)).front().confirmFirst);
  EXPECT_EQ(validator.status("acct")->rejected, 0u);
  EXPECT_TRUE(validator.fencedAccounts().empty());
  // Decided again on the confirmed view: the leader that holds the HWM's token goes on.
  EXPECT_TRUE(validator.submit(op(57, "b"), ActiveView::present(57)).accepted());
  // A cached view at or above the HWM decides as any view does.
  ActiveView current = ActiveView::present(57);
  current.cached = true;
  EXPECT_TRUE(validator.submit(op(57, "d"), current).accepted());
  // And a confirmed view below the HWM fences, as before.
  EXPECT_EQ(validator.submit(op(57, "e"), ActiveView::present(2)).verdict, Verdict::account_fenced);
}

TEST(TokenValidator, ResetRefusesBadInputAndChangesNothing) {
  TokenValidator validator;
  validator.submit(op(7, "a"));
  EXPECT_THROW(validator.resetHighWaterMark("..", 0, "alice", "x"), BadRequest);
  EXPECT_THROW(validator.resetHighWaterMark("acct", 0, "", "x"), BadRequest);
  EXPECT_EQ(validator.status("acct")->hwm, 7u);
}

TEST(TokenValidator, RetryWithSameOpIdGetsTheFirstAnswerAndIsNotApplied) {
  TokenValidator validator;
  validator.submit(op(5, "a"));
  validator.submit(op(9, "b"));
  // op "a" is retried after its timeout; it would now be stale, but it was accepted first.
  const Decision retry = validator.submit(op(5, "a"));
  EXPECT_TRUE(retry.accepted());
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.hwm, 5u);
  EXPECT_EQ(validator.status("acct")->accepted, 2u);
}

TEST(TokenValidator, RejectedOperationIsEvaluatedAgainOnRetry) {
  TokenValidator validator;
  const Decision refused = validator.submit(op(6, "x"), ActiveView::present(5));
  EXPECT_EQ(refused.verdict, Verdict::not_current_leader);
  // The gateway's cache caught up: the same op now passes; nothing was applied the first time.
  const Decision retried = validator.submit(op(6, "x"), ActiveView::present(6));
  EXPECT_TRUE(retried.accepted());
  EXPECT_FALSE(retried.replayed);
}

TEST(TokenValidator, OpIdMemoryIsBoundedToTheLastAcceptedOps) {
  ValidatorOptions options;
  options.rememberedOpsPerAccount = 3;
  TokenValidator validator(options);
  for (const char* id : {"1", "2", "3", "4"}) validator.submit(op(1, id));
  EXPECT_TRUE(validator.submit(op(1, "4")).replayed);
  EXPECT_TRUE(validator.submit(op(1, "2")).replayed);
  // "1" was forgotten: a retry this late is a new operation.
  const Decision late = validator.submit(op(1, "1"));
  EXPECT_TRUE(late.accepted());
  EXPECT_FALSE(late.replayed);
  EXPECT_EQ(validator.status("acct")->accepted, 5u);
}

TEST(TokenValidator, InvalidOperationBuiltInCodeIsRefused) {
  TokenValidator validator;
  EXPECT_THROW(validator.submit(op(1, "a", "bad/account")), BadRequest);
  EXPECT_THROW(validator.submit(op(1, "")), BadRequest);
  EXPECT_FALSE(validator.status("bad/account").has_value());
}

TEST(TokenValidator, MemoryOnlyCompactionIsANoOp) {
  TokenValidator validator;
  validator.submit(op(1, "a"));
  validator.compact();
  EXPECT_EQ(validator.status("acct")->hwm, 1u);
}

}  // namespace
}  // namespace zkagent::fencing::validator_test
