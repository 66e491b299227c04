// The real Elector on the in-memory ZooKeeper (fake_keeper.hpp): elections, successions and the
// failure modes of a session, deterministically and in milliseconds. The same cases against a real
// server are in election_integration_test and election_hardening_test.
#include "elector_fixture.hpp"

namespace zkagent::election::fake {
namespace {

TEST_F(ElectorTest, TheFirstMemberCreatesTheTreeAndLeads) {
  auto a = standing("a");
  ASSERT_EQ(a->role(), Role::Leader);
  ASSERT_EQ(a->events.size(), 1u);
  EXPECT_EQ(a->events[0].kind, Kind::Acquired);
  EXPECT_EQ(a->events[0].token, 0);
  EXPECT_FALSE(a->events[0].previous);
  auto record = active();
  ASSERT_TRUE(record);
  EXPECT_EQ(record->instanceId, "a");
  EXPECT_EQ(record->seq, 0);
  EXPECT_EQ(zk.find(kActive)->ephemeralOwner, a->keeper->sessionId());
  EXPECT_EQ(members(), (std::vector<std::string>{"m-0000000000"}));
  const GateDecision gate = a->elector->check();
  EXPECT_TRUE(gate.allowed());
  EXPECT_EQ(gate.token, 0);
}

TEST_F(ElectorTest, TheNextMemberWaitsBehindItsPredecessorAndSucceedsWhenItsSessionEnds) {
  auto a = standing("a");
  auto b = standing("b");
  ASSERT_EQ(b->role(), Role::Waiting);
  EXPECT_FALSE(b->elector->check().allowed());
  ASSERT_TRUE(b->elector->status().leader);
  EXPECT_EQ(b->elector->status().leader->instanceId, "a") << "a refusal names the leader";

  a->keeper->expire();
  drain();
  ASSERT_EQ(b->role(), Role::Leader);
  ASSERT_FALSE(b->events.empty());
  const LeadershipEvent& acquired = b->events.back();
  EXPECT_EQ(acquired.kind, Kind::Acquired);
  EXPECT_EQ(acquired.token, b->seq());
  ASSERT_TRUE(acquired.previous);
  EXPECT_EQ(acquired.previous->instanceId, "a");
  EXPECT_TRUE(acquired.previousExpired) << "a left without a word: the agent keeps its lock-delay";
  EXPECT_EQ(active()->instanceId, "b");
}

TEST_F(ElectorTest, ACandidateThatReadsNoActiveLearnsTheLeaderCreatedBeforeItsWatchWasSet) {
  // x (no elector here, a node as another process leaves it) heads the queue and has not created
  // `active` yet when c reads it; x creates it before c's watch for its creation is set. That
  // watch then waits on a node that may never change again: c must read it, or its refusals (and
  // a gateway's 421) name no leader for as long as x leads.
  makeTree();
  MemberInfo member;
  member.instanceId = "x";
  ASSERT_EQ(zk.create(kMembers + "/m-0000000000", toJson(member)), ZkError::Ok);
  auto c = std::make_unique<Member>(zk, io, "c");
  c->keeper->hold();
  c->elector->join();
  c->keeper->connect();
  const std::string readOfActive = "reply get " + kActive;
  for (int step = 0; step < 100; ++step) {
    drain();
    const auto held = c->keeper->held();
    ASSERT_FALSE(held.empty()) << "c never read active";
    if (held.front() == readOfActive) break;
    c->keeper->release(0);
  }
  ASSERT_EQ(c->keeper->held().front(), readOfActive);
  ActiveInfo x;
  x.seq = 0;
  x.instanceId = "x";
  x.sessionId = 77;
  ASSERT_EQ(zk.create(kActive, toJson(x)), ZkError::Ok);  // after c's read, before its watch
  c->keeper->releaseAll();
  drain();
  ASSERT_EQ(c->role(), Role::Waiting);
  ASSERT_TRUE(c->elector->status().leader) << "c heard of no leader";
  EXPECT_EQ(c->elector->status().leader->instanceId, "x");
}

TEST_F(ElectorTest, ACreateWhoseReplyWasLostIsAdoptedByItsOwnerNotMadeTwice) {
  makeTree();
  auto a = std::make_unique<Member>(zk, io, "a");
  a->keeper->connect();
  drain();
  a->keeper->dropNextReply(FakeKeeper::Op::Create, kMembers + "/");
  a->elector->join();
  drain();
  ASSERT_EQ(members().size(), 1u) << "the server made the member; only the reply went";
  EXPECT_NE(a->role(), Role::Leader);

  a->keeper->loseLink();
  a->keeper->reconnect();
  drain();
  EXPECT_EQ(a->role(), Role::Leader);
  EXPECT_EQ(members(), (std::vector<std::string>{"m-0000000000"})) << "adopted, not made again";
  EXPECT_EQ(a->seq(), 0);
}

TEST_F(ElectorTest, ALeaderWhoseActiveIsDeletedBySomeoneElseStepsDownAndTakesItAgain) {
  auto a = standing("a");
  ASSERT_EQ(zk.remove(kActive), ZkError::Ok);
  drain();
  ASSERT_EQ(a->events.size(), 3u);
  EXPECT_EQ(a->events[1].kind, Kind::Lost);
  EXPECT_EQ(a->events[1].reason, LossReason::Drift);
  EXPECT_EQ(a->events[2].kind, Kind::Acquired);
  EXPECT_EQ(a->role(), Role::Leader);
  EXPECT_EQ(active()->instanceId, "a");
}

TEST_F(ElectorTest, ALeaderWhoseActiveIsOverwrittenByAnotherIdentityStepsDownAndStaysDown) {
  auto a = standing("a");
  ASSERT_EQ(zk.set(kActive, toJson(ActiveInfo{7, "intruder", 99, 0, "", ""})), ZkError::Ok);
  drain();
  ASSERT_EQ(a->events.size(), 2u);
  EXPECT_EQ(a->events[1].kind, Kind::Lost);
  EXPECT_EQ(a->events[1].reason, LossReason::Drift);
  EXPECT_NE(a->role(), Role::Leader);
  EXPECT_EQ(a->elector->check().verdict, GateDecision::Verdict::Drifted);
  EXPECT_EQ(active()->instanceId, "intruder") << "someone else's record is not ours to undo";
}

TEST_F(ElectorTest, SessionExpiryWhileLeadingReportsItAndTheNextSessionStandsAgain) {
  auto a = standing("a");
  a->keeper->expire();
  drain();
  ASSERT_EQ(a->events.size(), 2u);
  EXPECT_EQ(a->events[1].kind, Kind::Lost);
  EXPECT_EQ(a->events[1].reason, LossReason::SessionExpired);
  EXPECT_EQ(a->events[1].token, 0);
  EXPECT_FALSE(a->elector->check().allowed());

  a->keeper->connect();
  drain();
  ASSERT_EQ(a->role(), Role::Leader);
  EXPECT_GT(a->events.back().token, 0) << "a new member, a larger token";
  EXPECT_EQ(members().size(), 1u);
}

TEST_F(ElectorTest, ASameSessionReconnectKeepsTheMemberAndLeadsOnItAgain) {
  auto a = standing("a");
  a->keeper->loseLink();
  drain();
  EXPECT_EQ(a->events.back().reason, LossReason::Suspended);
  EXPECT_EQ(a->elector->check().verdict, GateDecision::Verdict::Suspended);

  a->keeper->reconnect();
  drain();
  ASSERT_EQ(a->role(), Role::Leader);
  EXPECT_EQ(a->events.back().kind, Kind::Acquired);
  EXPECT_EQ(a->events.back().token, 0) << "the same member, the same token";
  EXPECT_EQ(members(), (std::vector<std::string>{"m-0000000000"}));
  EXPECT_TRUE(a->elector->check().allowed());
}

TEST_F(ElectorTest, ASameSessionReconnectFindsTheMemberGoneAndStandsOnANewOne) {
  auto a = standing("a");
  a->keeper->loseLink();
  drain();
  ASSERT_EQ(zk.remove(kMembers + "/m-0000000000"), ZkError::Ok);  // by hand, while away
  a->keeper->reconnect();
  drain();
  ASSERT_EQ(a->role(), Role::Leader);
  ASSERT_EQ(members().size(), 1u);
  EXPECT_NE(members()[0], "m-0000000000");
  EXPECT_EQ(a->events.back().token, a->seq());
  EXPECT_GT(a->seq(), 0);
  EXPECT_EQ(active()->seq, a->seq()) << "`active` names the member that exists";
}

TEST_F(ElectorTest, ResignHandsOverWithARecordAndStandsAgainAtTheBack) {
  auto a = standing("a");
  auto b = standing("b");
  a->elector->resign(LossReason::Resigned);
  drain();
  ASSERT_EQ(b->role(), Role::Leader);
  const LeadershipEvent& acquired = b->events.back();
  ASSERT_TRUE(acquired.previous);
  EXPECT_EQ(acquired.previous->instanceId, "a");
  EXPECT_FALSE(acquired.previousExpired) << "a clean hand-over: no lock-delay";
  EXPECT_EQ(a->events.back().kind, Kind::Lost);
  EXPECT_EQ(a->events.back().reason, LossReason::Resigned);
  EXPECT_EQ(a->role(), Role::Waiting);
  EXPECT_GT(a->seq(), b->seq());
  EXPECT_NE(zk.find(kHandover)->data.find("resigned"), std::string::npos);
}

TEST_F(ElectorTest, AResignWhoseDeletesFailWithTheLinkIsRetriedOnTheReconnect) {
  auto a = standing("a");
  auto b = standing("b");
  a->elector->resign(LossReason::Resigned);
  a->keeper->loseLink();  // before the hand-over goes out: it and its deletes fail
  drain();
  ASSERT_NE(zk.find(kActive), nullptr);
  EXPECT_NE(b->role(), Role::Leader);

  a->keeper->reconnect();
  drain();
  EXPECT_EQ(b->role(), Role::Leader) << "a's member and `active` deleted after all";
  EXPECT_EQ(a->role(), Role::Waiting);
  EXPECT_EQ(members().size(), 2u);
}

TEST_F(ElectorTest, StopHandsBackTheReleaseOperationsOnlyWhenLeading) {
  auto a = standing("a");
  auto b = standing("b");
  std::optional<std::vector<MultiOp>> fromLeader, fromWaiter;
  a->elector->stop(true, [&](std::vector<MultiOp> ops) { fromLeader = std::move(ops); });
  b->elector->stop(true, [&](std::vector<MultiOp> ops) { fromWaiter = std::move(ops); });
  drain();
  ASSERT_TRUE(fromLeader && fromWaiter);
  EXPECT_TRUE(fromWaiter->empty());
  ASSERT_EQ(fromLeader->size(), 3u);  // the record, then the member, then `active`
  EXPECT_EQ((*fromLeader)[0].path, kHandover);
  EXPECT_EQ((*fromLeader)[1].path, kMembers + "/m-0000000000");
  EXPECT_EQ((*fromLeader)[2].path, kActive);
  EXPECT_EQ(a->events.back().reason, LossReason::Stopped);

  // Sent as the group sends them, they free the account in one transaction.
  ZkError err = ZkError::Other;
  a->keeper->multiOn(io.get_executor(), *fromLeader,
                     [&](ZkError e, std::vector<MultiResult>) { err = e; });
  drain();
  EXPECT_EQ(err, ZkError::Ok);
  EXPECT_FALSE(active());
}

// The C client is connected (the keeper is usable) when a join runs, but the session's first
// Connected event reaches the elector only after the join's member was made: that event is old
// news for a member of the very same session. Forgetting the member would leave it behind as
// this session's own orphan, ahead of every member registered after it.
TEST_F(ElectorTest, AFirstConnectedThatArrivesAfterTheJoinRegisteredKeepsThatMember) {
  makeTree();
  auto a = std::make_unique<Member>(zk, io, "a");
  std::vector<SessionEvent> late;
  auto deliver = std::move(a->keeper->onEvent);
  a->keeper->onEvent = [&late](const SessionEvent& e) { late.push_back(e); };
  a->keeper->connect();
  a->elector->join();
  drain();
  ASSERT_EQ(members().size(), 1u) << "the join registered on the connected session";
  ASSERT_EQ(late.size(), 1u);
  a->keeper->onEvent = std::move(deliver);
  a->keeper->onEvent(late.front());
  drain();
  EXPECT_EQ(members().size(), 1u) << "no second member of the same session";
  ASSERT_EQ(a->role(), Role::Leader);

  // A resign stands again at the back: with an orphan of its own ahead, it would never lead again.
  a->elector->resign(LossReason::Resigned);
  drain();
  EXPECT_EQ(members().size(), 1u);
  EXPECT_EQ(a->role(), Role::Leader);
  EXPECT_EQ(active()->sessionId, a->keeper->sessionId());
}

}  // namespace
}  // namespace zkagent::election::fake
