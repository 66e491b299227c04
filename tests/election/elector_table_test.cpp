// The transition table as the real Elector drives it: every row is taken by some sequence of
// ZooKeeper events (no row is dead), and sequences of events produce the actions they must.
#include <algorithm>
#include <set>

#include "elector_fixture.hpp"
#include "elector_support.hpp"

namespace zkagent::election::fake {
namespace {

using detail::Action;
using detail::Event;
using detail::kTransitions;
using detail::memberName;
using detail::Transition;

struct Step {
  Role from;
  Event event;
  Role to;
  Action action;
  bool operator==(const Step&) const = default;
};

std::vector<Step> steps(const Member& m) {
  std::vector<Step> out;
  for (const auto& [from, row] : m.transitions)
    out.push_back({from, row.event, row.to, row.action});
  return out;
}

// The index of `row` in the table.
size_t indexOf(const Transition& row) {
  for (size_t i = 0; i < kTransitions.size(); ++i) {
    const auto& t = kTransitions[i];
    if (t.from == row.from && t.event == row.event && t.to == row.to && t.action == row.action) {
      return i;
    }
  }
  return kTransitions.size();
}

class ElectorTableTest : public ElectorTest {
 protected:
  Member* leaderOf(const std::vector<Member*>& all) {
    for (Member* m : all) {
      if (m->role() == Role::Leader) return m;
    }
    return nullptr;
  }
};

TEST_F(ElectorTableTest, EveryRowOfTheTableIsTakenBySomeSequenceOfEvents) {
  // a joins before its session exists, b and c once connected.
  auto a = std::make_unique<Member>(zk, io, "a");
  a->elector->join();
  drain();
  a->keeper->connect();
  drain();
  auto b = standing("b");
  auto c = standing("c");
  ASSERT_EQ(a->role(), Role::Leader);
  ASSERT_EQ(c->role(), Role::Waiting);

  // b's member deleted by hand: c waits behind a now; b learns it when a resigns.
  ASSERT_EQ(zk.remove(kMembers + "/" + memberName(b->seq())), ZkError::Ok);
  drain();
  a->elector->resign(LossReason::Resigned);
  drain();
  ASSERT_EQ(c->role(), Role::Leader);

  // `active` deleted by hand; then a crafted member ahead of the leader; then its own member.
  ASSERT_EQ(zk.remove(kActive), ZkError::Ok);
  drain();
  ASSERT_EQ(zk.create(kMembers + "/" + memberName(0)), ZkError::Ok);
  ASSERT_EQ(zk.remove(kActive), ZkError::Ok);
  drain();
  ASSERT_EQ(c->role(), Role::Waiting);
  ASSERT_EQ(zk.remove(kMembers + "/" + memberName(0)), ZkError::Ok);
  drain();
  ASSERT_EQ(c->role(), Role::Leader);
  ASSERT_EQ(zk.remove(kMembers + "/" + memberName(c->seq())), ZkError::Ok);
  ASSERT_EQ(zk.remove(kActive), ZkError::Ok);
  drain();

  // The link of the leader drops and comes back; then again with its member deleted meanwhile.
  std::vector<Member*> all{a.get(), b.get(), c.get()};
  Member* leader = leaderOf(all);
  ASSERT_NE(leader, nullptr);
  leader->keeper->loseLink();
  leader->keeper->reconnect();
  drain();
  ASSERT_EQ(leader->role(), Role::Leader);
  leader->keeper->loseLink();
  ASSERT_EQ(zk.remove(kMembers + "/" + memberName(leader->seq())), ZkError::Ok);
  leader->keeper->reconnect();
  drain();

  // d's create reply is lost; e joins while its link is down.
  auto d = std::make_unique<Member>(zk, io, "d");
  d->keeper->connect();
  drain();
  d->keeper->dropNextReply(FakeKeeper::Op::Create, kMembers + "/");
  d->elector->join();
  drain();
  d->keeper->loseLink();
  d->keeper->reconnect();
  drain();
  auto e = std::make_unique<Member>(zk, io, "e");
  e->keeper->connect();
  e->keeper->loseLink();
  e->elector->join();
  e->keeper->reconnect();
  drain();
  all = {a.get(), b.get(), c.get(), d.get(), e.get()};

  // Expiry of a follower, then of the leader; withdraw and stop of both kinds.
  Member* follower =
      *std::find_if(all.begin(), all.end(), [](Member* m) { return m->role() == Role::Waiting; });
  follower->keeper->expire();
  follower->keeper->connect();
  drain();
  leader = leaderOf(all);
  ASSERT_NE(leader, nullptr);
  leader->keeper->expire();
  leader->keeper->connect();
  drain();
  for (Event last : {Event::Withdraw, Event::Stop}) {
    leader = leaderOf(all);
    ASSERT_NE(leader, nullptr);
    follower =
        *std::find_if(all.begin(), all.end(), [](Member* m) { return m->role() == Role::Waiting; });
    for (Member* m : {leader, follower}) {
      if (last == Event::Withdraw) {
        m->elector->withdraw();
      } else {
        m->elector->stop(true, [](std::vector<MultiOp>) {});
      }
      drain();
    }
  }

  std::set<size_t> taken;
  for (Member* m : all) {
    for (const auto& [from, row] : m->transitions) taken.insert(indexOf(row));
  }
  for (size_t i = 0; i < kTransitions.size(); ++i) {
    const auto& row = kTransitions[i];
    EXPECT_TRUE(taken.contains(i))
        << "row " << i << " never taken: " << (row.from ? toString(*row.from) : "any")
        << " + event " << static_cast<int>(row.event) << " -> " << toString(row.to);
  }
}

TEST_F(ElectorTableTest, ExpiryWhileLeadingStepsDownForgetsAndRegistersOnTheNextSession) {
  auto a = standing("a");
  a->transitions.clear();
  a->keeper->expire();
  a->keeper->connect();
  drain();
  EXPECT_EQ(steps(*a), (std::vector<Step>{
                           {Role::Leader, Event::Expired, Role::Suspend, Action::StepDownForget},
                           {Role::Suspend, Event::NewSession, Role::Init, Action::Register},
                           {Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
                           {Role::Candidate, Event::Elected, Role::Leader, Action::AnnounceLeader},
                       }));
}

TEST_F(ElectorTableTest, ALinkLossOfAFollowerReportsNothingAndItsReconnectVerifiesTheMember) {
  auto a = standing("a");
  auto b = standing("b");
  b->transitions.clear();
  b->keeper->loseLink();
  b->keeper->reconnect();
  drain();
  EXPECT_EQ(steps(*b),
            (std::vector<Step>{
                {Role::Waiting, Event::Disconnected, Role::Suspend, Action::None},
                {Role::Suspend, Event::ReconnectedSame, Role::Candidate, Action::VerifyMember},
                {Role::Candidate, Event::MustWait, Role::Waiting, Action::None},
            }));
  EXPECT_EQ(b->events.size(), 0u) << "a follower has no leadership to lose";
}

TEST_F(ElectorTableTest, AJoinWhileTheLinkIsDownRegistersOnTheReconnect) {
  auto a = std::make_unique<Member>(zk, io, "a");
  a->keeper->connect();
  a->keeper->loseLink();
  a->elector->join();
  drain();
  EXPECT_TRUE(members().empty());
  a->keeper->reconnect();
  drain();
  EXPECT_EQ(steps(*a), (std::vector<Step>{
                           {Role::Init, Event::Join, Role::Init, Action::Register},
                           {Role::Init, Event::ReconnectedSame, Role::Init, Action::VerifyMember},
                           {Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
                           {Role::Candidate, Event::Elected, Role::Leader, Action::AnnounceLeader},
                       }));
}

TEST_F(ElectorTableTest, ResignHandsOverAndTheResignerQueuesAgain) {
  auto a = standing("a");
  auto b = standing("b");
  a->transitions.clear();
  a->elector->resign(LossReason::Resigned);
  drain();
  EXPECT_EQ(steps(*a), (std::vector<Step>{
                           {Role::Leader, Event::Resign, Role::Init, Action::ResignAndRegister},
                           {Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
                           {Role::Candidate, Event::MustWait, Role::Waiting, Action::None},
                       }));
}

}  // namespace
}  // namespace zkagent::election::fake
