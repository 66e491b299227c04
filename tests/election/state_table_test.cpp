// The election's transition table (docs/election.md), checked row by row as a table.
#include "state_table.hpp"

#include <gtest/gtest.h>

namespace zkagent::election::detail {
namespace {

struct Row {
  Role from;
  Event event;
  std::optional<Role> to;  // nullopt: the event is ignored in that state
  Action action;
};

class TransitionTableTest : public ::testing::TestWithParam<Row> {};

TEST_P(TransitionTableTest, MapsStateAndEventToStateAndAction) {
  const Row& row = GetParam();
  auto t = transition(row.from, row.event);
  if (!row.to) {
    EXPECT_FALSE(t.has_value()) << "expected the event to be ignored in " << toString(row.from);
    return;
  }
  ASSERT_TRUE(t.has_value()) << "no transition from " << toString(row.from);
  EXPECT_EQ(t->to, *row.to) << toString(t->to) << " instead of " << toString(*row.to);
  EXPECT_EQ(t->action, row.action);
}

INSTANTIATE_TEST_SUITE_P(
    Seed001, TransitionTableTest,
    ::testing::Values(
        // Registration and election.
        Row{Role::Init, Event::Join, Role::Init, Action::Register},
        Row{Role::Init, Event::NewSession, Role::Init, Action::Register},
        Row{Role::Candidate, Event::Registered, Role::Candidate, Action::Evaluate},
        Row{Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
        Row{Role::Candidate, Event::Elected, Role::Leader, Action::AnnounceLeader},
        Row{Role::Candidate, Event::MustWait, Role::Waiting, Action::None},
        Row{Role::Waiting, Event::Elected, Role::Leader, Action::AnnounceLeader},
        // Drift while leading: step down at once.
        Row{Role::Leader, Event::Drift, Role::Candidate, Action::StepDown},
        Row{Role::Leader, Event::MustWait, Role::Waiting, Action::StepDown},
        Row{Role::Leader, Event::MemberMissing, Role::Init, Action::StepDownRegister},
        Row{Role::Candidate, Event::MemberMissing, Role::Init, Action::Register},
        // Connection loss suspends every state; same-session reconnect verifies the member.
        // Only a leader has a loss to report.
        Row{Role::Leader, Event::Disconnected, Role::Suspend, Action::ReportLoss},
        Row{Role::Waiting, Event::Disconnected, Role::Suspend, Action::None},
        Row{Role::Candidate, Event::Disconnected, Role::Suspend, Action::None},
        Row{Role::Suspend, Event::ReconnectedSame, Role::Candidate, Action::VerifyMember},
        Row{Role::Init, Event::ReconnectedSame, Role::Init, Action::VerifyMember},
        Row{Role::Suspend, Event::Expired, Role::Suspend, Action::Forget},
        Row{Role::Suspend, Event::NewSession, Role::Init, Action::Register},
        Row{Role::Leader, Event::Expired, Role::Suspend, Action::StepDownForget},
        // Operator actions.
        Row{Role::Leader, Event::Resign, Role::Init, Action::ResignAndRegister},
        Row{Role::Leader, Event::Withdraw, Role::Init, Action::ResignAndLeave},
        Row{Role::Waiting, Event::Withdraw, Role::Init, Action::Leave},
        Row{Role::Leader, Event::Stop, Role::Stopped, Action::ReportLoss},
        Row{Role::Waiting, Event::Stop, Role::Stopped, Action::None},
        // Events that mean nothing in a state are ignored, not guessed at.
        Row{Role::Waiting, Event::Resign, std::nullopt, Action::None},
        Row{Role::Init, Event::Elected, std::nullopt, Action::None},
        Row{Role::Suspend, Event::Elected, std::nullopt, Action::None},
        Row{Role::Leader, Event::Elected, std::nullopt, Action::None},
        Row{Role::Leader, Event::Join, std::nullopt, Action::None},
        Row{Role::Stopped, Event::Registered, std::nullopt, Action::None}));

TEST(TransitionTable, EveryStateSuspendsOnDisconnect) {
  for (Role r : {Role::Init, Role::Candidate, Role::Waiting, Role::Leader, Role::Suspend}) {
    auto t = transition(r, Event::Disconnected);
    ASSERT_TRUE(t.has_value()) << toString(r);
    EXPECT_EQ(t->to, Role::Suspend) << toString(r);
  }
}

constexpr std::array kRoles = {Role::Init,   Role::Candidate, Role::Waiting,
                               Role::Leader, Role::Suspend,   Role::Stopped};

// A row is reachable when it is the first match for its event in some state it names; a row that
// an earlier one shadows everywhere is dead.
TEST(TransitionTable, EveryRowIsTheOneThatAppliesInSomeState) {
  for (const auto& row : kTransitions) {
    bool applies = false;
    for (Role r : kRoles) {
      if (row.from && *row.from != r) continue;
      auto t = transition(r, row.event);
      applies = applies || (t && t->from == row.from && t->to == row.to && t->action == row.action);
    }
    EXPECT_TRUE(applies) << "shadowed row for event " << static_cast<int>(row.event) << " to "
                         << toString(row.to);
  }
}

TEST(TransitionTable, OnlyCandidatesAndWaitersBecomeLeader) {
  for (Role r : {Role::Init, Role::Suspend, Role::Stopped}) {
    auto t = transition(r, Event::Elected);
    EXPECT_FALSE(t.has_value()) << toString(r) << " must not jump to LEADER";
  }
}

}  // namespace
}  // namespace zkagent::election::detail
