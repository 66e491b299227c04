// The election state machine as a table: (state, event) -> (state, action).
// The Elector feeds it every event and performs the action it names; nothing else changes roles,
// and no action looks at the role it came from: a role that needs another action has its own row.
#pragma once

#include <array>
#include <optional>

#include "zkagent/election.hpp"

namespace zkagent::election::detail {

enum class Event {
  Join,             // stand as a candidate
  Registered,       // own member node created (or adopted after a lost reply)
  Elected,          // we are the smallest member and `active` holds our record
  MustWait,         // a predecessor exists, or `active` holds someone else's record
  Drift,            // own member gone, `active` gone or not ours while leading
  MemberMissing,    // own member node is gone (session moved on, or deleted by hand)
  Disconnected,     // link to ZooKeeper lost, session may still live
  ReconnectedSame,  // link back on the same session
  Expired,          // session gone (server said so, or our local deadline passed)
  NewSession,       // connected on a fresh session
  Resign,           // operator: hand over and stand again at the back of the queue
  Withdraw,         // stop standing (drain, not schedulable)
  Stop,             // process stops
};

enum class Action {
  None,
  Register,           // create the ephemeral-sequential member node
  Evaluate,           // list members, watch predecessor / take `active`
  VerifyMember,       // same session again: check own member node still exists, then Evaluate
  AnnounceLeader,     // report Acquired
  StepDown,           // report Lost(reason), then Evaluate
  StepDownRegister,   // report Lost(reason), then Register
  ResignAndRegister,  // close gate, delete active+member in one multi, register again
  ResignAndLeave,     // close gate, delete active+member in one multi
  Leave,              // delete own member node (not leading)
  ReportLoss,         // report Lost(reason); the gate is closed already (session flag, role)
  StepDownForget,     // report Lost(session_expired), then Forget
  Forget,             // forget the member node: it is gone with the session
};

struct Transition {
  std::optional<Role> from;  // nullopt: any state not listed before
  Event event;
  Role to;
  Action action;
};

// Read top to bottom: the first row whose state and event match wins.
inline constexpr std::array kTransitions = {
    // Standing and registering.
    Transition{Role::Init, Event::Join, Role::Init, Action::Register},
    Transition{Role::Init, Event::NewSession, Role::Init, Action::Register},
    Transition{Role::Init, Event::ReconnectedSame, Role::Init, Action::VerifyMember},
    Transition{Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
    // Adopted by ephemeralOwner after a reconnect (a create whose reply was lost).
    Transition{Role::Candidate, Event::Registered, Role::Candidate, Action::Evaluate},
    // Evaluating the queue.
    Transition{Role::Candidate, Event::Elected, Role::Leader, Action::AnnounceLeader},
    Transition{Role::Candidate, Event::MustWait, Role::Waiting, Action::None},
    Transition{Role::Candidate, Event::MemberMissing, Role::Init, Action::Register},
    Transition{Role::Waiting, Event::Elected, Role::Leader, Action::AnnounceLeader},
    Transition{Role::Waiting, Event::MustWait, Role::Waiting, Action::None},
    Transition{Role::Waiting, Event::MemberMissing, Role::Init, Action::Register},
    // Leading.
    Transition{Role::Leader, Event::Drift, Role::Candidate, Action::StepDown},
    Transition{Role::Leader, Event::MustWait, Role::Waiting, Action::StepDown},
    Transition{Role::Leader, Event::MemberMissing, Role::Init, Action::StepDownRegister},
    Transition{Role::Leader, Event::Resign, Role::Init, Action::ResignAndRegister},
    Transition{Role::Leader, Event::Withdraw, Role::Init, Action::ResignAndLeave},
    Transition{Role::Leader, Event::Disconnected, Role::Suspend, Action::ReportLoss},
    Transition{Role::Leader, Event::Expired, Role::Suspend, Action::StepDownForget},
    Transition{Role::Leader, Event::Stop, Role::Stopped, Action::ReportLoss},
    // The session.
    Transition{Role::Suspend, Event::ReconnectedSame, Role::Candidate, Action::VerifyMember},
    Transition{Role::Suspend, Event::NewSession, Role::Init, Action::Register},
    Transition{std::nullopt, Event::Disconnected, Role::Suspend, Action::None},
    Transition{std::nullopt, Event::Expired, Role::Suspend, Action::Forget},
    Transition{std::nullopt, Event::Stop, Role::Stopped, Action::None},
    Transition{std::nullopt, Event::Withdraw, Role::Init, Action::Leave},
};

// The row that applies, or nullopt when the event means nothing in that state (ignored).
constexpr std::optional<Transition> transition(Role from, Event event) {
  for (const auto& t : kTransitions) {
    if ((!t.from || *t.from == from) && t.event == event) return t;
  }
  return std::nullopt;
}

}  // namespace zkagent::election::detail
