// Election against a real ZooKeeper server, contenders in this process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "contender.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/znode.hpp"
#include "zktest/zookeeper_server.hpp"

namespace zktest {
namespace {

using el::GateDecision;
using el::LossReason;
using Verdict = el::GateDecision::Verdict;

using ElectionTest = SharedZooKeeperTest;

TEST_F(ElectionTest, FirstCandidateLeadsAndSecondWaits) {
  Contender a(hosts(), root, "host-a");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  Contender b(hosts(), root, "host-b");
  b.join("acct");
  ASSERT_TRUE(eventually(
      [&] {
        for (auto& s : b.group().status()) {
          if (s.role == el::Role::Waiting && s.leader && s.leader->instanceId == "host-a")
            return true;
        }
        return false;
      },
      10s))
      << "b should wait and know a leads";
  GateDecision refused = b.check("acct");
  EXPECT_EQ(refused.verdict, Verdict::NotLeader);
  ASSERT_TRUE(refused.leader);
  EXPECT_EQ(refused.leader->instanceId, "host-a");
  EXPECT_EQ(refused.leader->endpoint, "inproc://host-a");
  // The active node carries the identity triple (seq, instance, session).
  auto active = a.get(root + "/acct/active");
  ASSERT_TRUE(active);
  auto parsed = el::parseActive(*active);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->instanceId, "host-a");
  EXPECT_EQ(parsed->sessionId, a.group().sessionId());
  EXPECT_EQ(parsed->seq, a.check("acct").token);
}

TEST_F(ElectionTest, ResignHandsOverAndResignerStandsAgainAtTheBack) {
  Contender a(hosts(), root, "host-a");
  Contender b(hosts(), root, "host-b");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));
  const int64_t oldToken = a.check("acct").token;
  a.group().resign("acct");
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 5s));
  EXPECT_FALSE(a.leads("acct"));
  EXPECT_EQ(a.lastLoss("acct"), LossReason::Resigned);
  EXPECT_GT(b.check("acct").token, oldToken);
  // a is a candidate again, behind b: two member nodes, none orphaned.
  ASSERT_TRUE(eventually([&] { return a.children(root + "/acct/members").size() == 2; }, 5s));
  auto last = b.events().back();
  ASSERT_EQ(last.kind, el::LeadershipEvent::Kind::Acquired);
  ASSERT_TRUE(last.previous);
  EXPECT_EQ(last.previous->instanceId, "host-a");
  EXPECT_FALSE(last.previousExpired) << "a clean resign is not an expiry (no lock-delay)";
}

TEST_F(ElectionTest, GracefulStopHandsOverWithoutWaitingForTheSessionTimeout) {
  auto a = std::make_unique<Contender>(hosts(), root, "host-a", 20000ms);
  Contender b(hosts(), root, "host-b");
  a->join("acct");
  ASSERT_TRUE(eventually([&] { return a->leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));
  a->stop();
  // a's session timeout is 20 s: anything within 5 s proves the hand-over did not wait for it.
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 5s));
  EXPECT_EQ(a->lastLoss("acct"), LossReason::Stopped);
  EXPECT_FALSE(a->leads("acct"));
}

// A stopping group says when its accounts are with their successors, before its session closes
// (the agent sends its devices on at that moment): by then none of its `active` nodes is left and
// its session is still open; `done` follows once the session is closed.
TEST_F(ElectionTest, StopSaysWhenTheAccountsAreHandedOverBeforeItClosesTheSession) {
  constexpr int kAccounts = 20;
  Contender a(hosts(), root, "host-a", 20000ms);
  Contender b(hosts(), root, "host-b");
  for (int i = 0; i < kAccounts; ++i) a.join("acct" + std::to_string(i));
  ASSERT_TRUE(eventually([&] { return a.leadingCount() == kAccounts; }, 10s));
  for (int i = 0; i < kAccounts; ++i) b.join("acct" + std::to_string(i));
  ASSERT_TRUE(eventually(
      [&] {
        auto all = b.group().status();
        return all.size() == kAccounts &&
               std::all_of(all.begin(), all.end(), [](const auto& s) { return s.seq >= 0; });
      },
      10s));

  std::mutex mu;
  std::vector<std::string> order;
  int activesOfA = -1;
  el::SessionState sessionAtHandover = el::SessionState::Closed;
  std::promise<void> stopped;
  a.group().stop(
      [&] {
        std::lock_guard lock(mu);
        order.push_back("done");
        stopped.set_value();
      },
      [&] {
        int left = 0;  // read on b's session (its own io thread)
        for (int i = 0; i < kAccounts; ++i) {
          const auto active = b.get(root + "/acct" + std::to_string(i) + "/active");
          if (active && active->find("\"host-a\"") != std::string::npos) ++left;
        }
        std::lock_guard lock(mu);
        activesOfA = left;
        sessionAtHandover = a.group().sessionState();
        order.push_back("handedOver");
      });
  ASSERT_EQ(stopped.get_future().wait_for(10s), std::future_status::ready);
  a.abandon();
  std::lock_guard lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"handedOver", "done"}));
  EXPECT_EQ(activesOfA, 0) << "handedOver ran before the hand-over was done";
  EXPECT_EQ(sessionAtHandover, el::SessionState::Connected) << "the session was closed already";
  EXPECT_TRUE(eventually([&] { return b.leadingCount() == kAccounts; }, 5s));
}

// ~ElectionGroup without stop() closes the session, so the server drops its nodes at once rather
// than at expiry. The group under test also waits right behind another session's leader, so it
// follows that session's mark with a watch: a watch must not keep the session alive.
TEST_F(ElectionTest, DestroyingALeadingGroupWithoutStopFreesItsAccountsForASuccessorAtOnce) {
  constexpr auto kSessionTimeout = 20000ms;
  Contender x(hosts(), root, "host-x");
  x.join("followed");
  ASSERT_TRUE(eventually([&] { return x.leads("followed"); }, 10s));
  auto a = std::make_unique<Contender>(hosts(), root, "host-a", kSessionTimeout);
  a->join("acct");
  ASSERT_TRUE(eventually([&] { return a->leads("acct"); }, 10s));
  a->join("followed");
  ASSERT_TRUE(eventually(
      [&] {
        return sharedZooKeeper().fourLetter("wchp").find(root + "/@sessions/") != std::string::npos;
      },
      10s))
      << "a should watch x's session mark";
  Contender b(hosts(), root, "host-b");
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));

  a->abandon();
  // Expiry would take the session timeout; a closed session frees the account in a round trip.
  EXPECT_TRUE(eventually([&] { return b.leads("acct"); }, kSessionTimeout / 4))
      << "the abandoned session was not closed";
  EXPECT_TRUE(x.leads("followed"));
}

TEST_F(ElectionTest, ActiveDeletedByHandIsReacquired) {
  Contender a(hosts(), root, "host-a");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t token = a.check("acct").token;
  ASSERT_EQ(a.remove(root + "/acct/active"), el::ZkError::Ok);
  ASSERT_TRUE(eventually([&] { return a.acquisitions("acct") == 2 && a.leads("acct"); }, 5s));
  EXPECT_EQ(a.lastLoss("acct"), LossReason::Drift);
  EXPECT_EQ(a.check("acct").token, token) << "same member node, same token";
}

// A withdraw or re-registration that crosses a create of `active` in flight leaves this session
// holding `active` under a member that no longer exists. Only this session can delete it; waiting
// on it would leave the account leaderless until the session ends (found by the chaos run).
TEST_F(ElectionTest, ActiveThisSessionHoldsUnderAnOldMemberIsReplacedNotWaitedOn) {
  Contender a(hosts(), root, "host-a");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t first = a.check("acct").token;
  a.group().withdraw("acct");
  ASSERT_TRUE(eventually([&] { return !a.get(root + "/acct/active"); }, 5s));
  el::ActiveInfo stale;
  stale.seq = first;
  stale.instanceId = "host-a";
  stale.sessionId = a.group().sessionId();
  ASSERT_EQ(a.createEphemeral(root + "/acct/active", el::toJson(stale)), el::ZkError::Ok);

  a.join("acct");  // a new member, behind nobody
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 5s))
      << "an active node of this session under an old member must not block the account";
  EXPECT_GT(a.check("acct").token, first);
  const auto record = el::parseActive(a.get(root + "/acct/active").value_or(""));
  ASSERT_TRUE(record);
  EXPECT_EQ(record->seq, a.check("acct").token);
}

TEST_F(ElectionTest, ActiveOverwrittenByAnotherIdentityMakesLeaderStepDown) {
  Contender a(hosts(), root, "host-a");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  el::ActiveInfo forged;
  forged.seq = a.check("acct").token;
  forged.instanceId = "intruder";
  forged.sessionId = 42;
  ASSERT_EQ(a.set(root + "/acct/active", el::toJson(forged)), el::ZkError::Ok);
  ASSERT_TRUE(eventually([&] { return !a.leads("acct"); }, 5s));
  EXPECT_EQ(a.lastLoss("acct"), LossReason::Drift);
  EXPECT_EQ(a.check("acct").verdict, Verdict::Drifted);
}

// The strict gate asks ZooKeeper rather than the in-memory state: while the leader has not yet
// processed the watch event for an overwritten `active` (its io thread is held), the fast gate
// still allows, and the strict check, once it runs, reads the intruder's record and refuses.
TEST_F(ElectionTest, StrictGateConfirmsWithZooKeeperAndCatchesDriftTheWatchHasNotSeenYet) {
  Contender a(hosts(), root, "host-a");
  Contender intruder(hosts(), root, "intruder");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  auto confirmed = a.checkStrict("acct");
  EXPECT_TRUE(confirmed.allowed());
  EXPECT_EQ(confirmed.token, a.check("acct").token);
  EXPECT_EQ(a.checkStrict("unknown-acct").verdict, Verdict::UnknownAccount);

  auto release = a.holdIo();
  el::ActiveInfo forged;
  forged.seq = a.check("acct").token;
  forged.instanceId = "intruder";
  forged.sessionId = intruder.group().sessionId();
  ASSERT_EQ(intruder.set(root + "/acct/active", el::toJson(forged)), el::ZkError::Ok);
  EXPECT_TRUE(a.leads("acct")) << "the watch event cannot have been processed yet";
  auto strict = std::make_shared<std::promise<GateDecision>>();
  a.group().checkStrict("acct", [strict](GateDecision d) { strict->set_value(std::move(d)); });
  release();

  auto answer = strict->get_future();
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready);
  const GateDecision d = answer.get();
  EXPECT_EQ(d.verdict, Verdict::Drifted);
  EXPECT_EQ(d.token, -1);
  ASSERT_TRUE(d.leader);
  EXPECT_EQ(d.leader->instanceId, "intruder");
  EXPECT_TRUE(eventually([&] { return a.check("acct").verdict == Verdict::Drifted; }, 5s));
}

// Nobody watches their own member node (on a stop, a leader's watch on it would cost the server a
// notification per account). A deleted member is seen on the next evaluation, on a reconnect, and
// through the session's events; and a candidate never takes `active` on a member that is gone.
TEST_F(ElectionTest, LeaderWhoseMemberNodeWasDeletedStepsDownOnItsNextEvaluation) {
  Contender a(hosts(), root, "host-a");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t token = a.check("acct").token;
  auto members = a.children(root + "/acct/members");
  ASSERT_EQ(members.size(), 1u);
  ASSERT_EQ(a.remove(root + "/acct/members/" + members[0]), el::ZkError::Ok);
  // `active` touched: the evaluation that follows lists the queue and misses our member.
  ASSERT_EQ(a.remove(root + "/acct/active"), el::ZkError::Ok);
  ASSERT_TRUE(eventually([&] { return a.leads("acct") && a.check("acct").token > token; }, 5s));
  EXPECT_EQ(a.lastLoss("acct"), LossReason::Drift);
  EXPECT_EQ(a.children(root + "/acct/members").size(), 1u);
}

// The leader's link is cut (`cut`: closed, so the client reconnects at once on the same session;
// blackholed, so the session expires) and its member node deleted meanwhile; once the link is
// back it stands again with a new member and leads on it.
void expectStandsAgainAfterMemberDeletedWhileCut(const std::string& root, TcpProxy::Mode cut,
                                                 milliseconds sessionTimeout, bool sameSession) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", sessionTimeout);
  Contender other(sharedZooKeeper().connectString(), root, "other");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t token = a.check("acct").token;
  const int64_t session = a.group().sessionId();
  auto members = other.children(root + "/acct/members");
  ASSERT_EQ(members.size(), 1u);
  proxy.setMode(cut);
  ASSERT_TRUE(eventually([&] { return a.check("acct").verdict == Verdict::Suspended; }, 10s));
  // NoNode: the server expired the session first, which deleted the member anyway.
  const el::ZkError removed = other.remove(root + "/acct/members/" + members[0]);
  EXPECT_TRUE(removed == el::ZkError::Ok || (!sameSession && removed == el::ZkError::NoNode));
  if (!sameSession) {
    // Blackholed: the link comes back only once the server has expired the session (its
    // ephemeral `active` is gone). Sooner, and a client that reconnects at once (seen under TSan)
    // resumes the same session, which is the other case.
    ASSERT_TRUE(eventually(
        [&] {
          return zktest::readZNode(sharedZooKeeper().connectString(), root + "/acct/active")
                     .state == zktest::ZNode::State::absent;
        },
        sessionTimeout + 10s))
        << "the server never expired the blackholed session";
  }
  proxy.setMode(TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually(
      [&] {
        return (a.group().sessionId() == session) == sameSession && a.leads("acct") &&
               a.check("acct").token > token;
      },
      15s))
      << "role " << el::toString(a.group().status().at(0).role) << " seq "
      << a.group().status().at(0).seq << "; gate " << el::toString(a.check("acct").verdict)
      << " token " << a.check("acct").token << " (before " << token << "); session 0x" << std::hex
      << a.group().sessionId() << " (before 0x" << session << ")" << std::dec << "; state "
      << static_cast<int>(a.group().sessionState());
  EXPECT_EQ(other.children(root + "/acct/members").size(), 1u);
}

TEST_F(ElectionTest, LeaderWhoseMemberNodeWentDuringALinkDropStepsDownOnReconnect) {
  expectStandsAgainAfterMemberDeletedWhileCut(root, TcpProxy::Mode::close, 6000ms, true);
}

TEST_F(ElectionTest, LeaderWhoseMemberNodeWasDeletedStandsAgainOnItsNextSession) {
  expectStandsAgainAfterMemberDeletedWhileCut(root, TcpProxy::Mode::blackhole, 2000ms, false);
}

TEST_F(ElectionTest, CandidateWhoseMemberNodeWasDeletedNeverLeadsOnIt) {
  Contender a(hosts(), root, "host-a");
  Contender b(hosts(), root, "host-b");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).role == el::Role::Waiting; }, 10s));
  const int64_t deleted = b.group().status().at(0).seq;
  char name[32];
  std::snprintf(name, sizeof name, "m-%010lld", static_cast<long long>(deleted));
  ASSERT_EQ(b.remove(root + "/acct/members/" + name), el::ZkError::Ok);
  a.group().withdraw("acct");  // b's predecessor goes: b's takeover must find its member missing
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 10s));
  EXPECT_GT(b.check("acct").token, deleted) << "led on a member node that no longer exists";
  auto active = el::parseActive(b.get(root + "/acct/active").value_or(""));
  ASSERT_TRUE(active);
  EXPECT_EQ(active->seq, b.check("acct").token);
  EXPECT_EQ(b.children(root + "/acct/members").size(), 1u);
}

TEST_F(ElectionTest, BlackholedLinkSuspendsTheGateBeforeTheSessionExpires) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", 4000ms);
  Contender b(hosts(), root, "host-b", 4000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));
  proxy.setMode(TcpProxy::Mode::blackhole);
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return a.check("acct").verdict == Verdict::Suspended; }, 10s));
  const auto suspendedAfter = std::chrono::steady_clock::now() - cut;
  // The gate closed on ZooKeeper's thread; the LOST event follows from the account's strand.
  EXPECT_TRUE(eventually([&] { return a.lastLoss("acct") == LossReason::Suspended; }, 5s));
  // Suspended before the server could have expired the session and let b in.
  EXPECT_FALSE(b.leads("acct"));
  EXPECT_LT(suspendedAfter, a.group().negotiatedTimeout() + 0ms);
  // After expiry b leads; a never had its gate open meanwhile.
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 15s));
  EXPECT_FALSE(a.leads("acct"));
  proxy.setMode(TcpProxy::Mode::pass);
  // a comes back on a new session as a candidate behind b.
  ASSERT_TRUE(eventually(
      [&] {
        auto s = a.group().status().at(0);
        return s.role == el::Role::Waiting &&
               a.group().sessionState() == el::SessionState::Connected;
      },
      15s));
  EXPECT_TRUE(b.leads("acct"));
  EXPECT_FALSE(a.leads("acct"));
}

TEST_F(ElectionTest, ShortOutageOnTheSameSessionKeepsLeadership) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", 6000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t token = a.check("acct").token;
  const int64_t session = a.group().sessionId();
  proxy.setMode(TcpProxy::Mode::close);
  ASSERT_TRUE(eventually([&] { return a.check("acct").verdict == Verdict::Suspended; }, 5s));
  proxy.setMode(TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  EXPECT_EQ(a.group().sessionId(), session);
  EXPECT_EQ(a.check("acct").token, token);
  EXPECT_EQ(a.children(root + "/acct/members").size(), 1u) << "no duplicate candidate";
}

TEST_F(ElectionTest, TokensStrictlyIncreaseAcrossLeaders) {
  std::vector<int64_t> tokens;
  for (int round = 0; round < 4; ++round) {
    Contender c(hosts(), root, "host-" + std::to_string(round));
    c.join("acct");
    ASSERT_TRUE(eventually([&] { return c.leads("acct"); }, 10s));
    tokens.push_back(c.check("acct").token);
  }
  for (size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]);
}

TEST_F(ElectionTest, ThousandAccountsOnOneSessionAllFailOverOnStop) {
  constexpr int kAccounts = 1000;
  auto a = std::make_unique<Contender>(hosts(), root, "host-a", 20000ms);
  Contender b(hosts(), root, "host-b", 20000ms);
  for (int i = 0; i < kAccounts; ++i) a->join("acct-" + std::to_string(i));

  ASSERT_TRUE(eventually([&] { return a->leadingCount() == kAccounts; }, 60s)) << a->leadingCount();
  for (int i = 0; i < kAccounts; ++i) b.join("acct-" + std::to_string(i));
  ASSERT_TRUE(eventually(
      [&] {
        int registered = 0;
        for (auto& s : b.group().status()) registered += s.seq >= 0;
        return registered == kAccounts;
      },
      60s));
  a->stop();
  ASSERT_TRUE(eventually([&] { return b.leadingCount() == kAccounts; }, 15s)) << b.leadingCount();
  EXPECT_EQ(a->leadingCount(), 0);
}

// An operator deletes `subtree` of a led account (children first, as deleteall does): the missing
// levels are created again and the account is led again, settled on one member node and `active`.
// The elector may re-create nodes while the removal runs; it is retried until the subtree was gone
// once, and a retry may take a node just re-created, which the elector then notices and replaces.
// `nudge` (when given) runs after the removal: what makes the leader look again when the removal
// touched nothing it watches.
void expectLedAgainAfterRemoving(const std::string& hosts, const std::string& root,
                                 const std::string& subtree,
                                 const std::function<void(Contender&)>& nudge = {},
                                 const std::string& leaderHosts = {}) {
  Contender a(leaderHosts.empty() ? hosts : leaderHosts, root, "host-a", 6000ms);
  Contender admin(hosts, root + "-admin", "admin");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  ASSERT_TRUE(eventually([&] { return admin.removeTree(root + subtree); }, 10s));
  if (nudge) nudge(a);
  ASSERT_TRUE(eventually(
      [&] {
        return a.acquisitions("acct") >= 2 && a.leads("acct") &&
               admin.children(root + "/acct/members").size() == 1 &&
               admin.get(root + "/acct/active").has_value();
      },
      10s))
      << "role " << el::toString(a.group().status().at(0).role) << " seq "
      << a.group().status().at(0).seq << " reason " << a.group().status().at(0).lastReason
      << " members " << admin.children(root + "/acct/members").size() << " active "
      << admin.get(root + "/acct/active").value_or("none");
}

TEST_F(ElectionTest, DeletedElectionTreeIsRecreatedAndALeaderElectedAgain) {
  expectLedAgainAfterRemoving(hosts(), root, "/acct");
}

// The account's node stays: the session created the members path itself, so it must not trust
// its memory of it. The leader does not watch its own member, so it learns of the removal when it
// next looks: here, on reconnecting after a link drop.
TEST_F(ElectionTest, DeletedMembersNodeAloneIsRecreatedAndLedAgain) {
  TcpProxy proxy(sharedZooKeeper().port());
  expectLedAgainAfterRemoving(
      hosts(), root, "/acct/members",
      [&](Contender& a) {
        proxy.setMode(TcpProxy::Mode::close);
        ASSERT_TRUE(eventually([&] { return !a.leads("acct"); }, 5s));
        proxy.setMode(TcpProxy::Mode::pass);
      },
      proxy.connectString());
}

TEST_F(ElectionTest, GateRefusesUnknownAccountsAndJoinRejectsBadIds) {
  Contender a(hosts(), root, "host-a");
  EXPECT_EQ(a.check("never-joined").verdict, Verdict::UnknownAccount);
  EXPECT_THROW(a.join("../etc"), std::invalid_argument);
  EXPECT_THROW(a.join(""), std::invalid_argument);
  EXPECT_FALSE(a.get(root).has_value()) << "nothing written for rejected ids";
}

}  // namespace
}  // namespace zktest
