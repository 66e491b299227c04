// The election state machine as a table: (state, event) -> (state, action).
// The Elector feeds it every event and performs the action it names; nothing else changes roles.
#pragma once

#include <array>
#include <optional>

#include "zkagent/election.hpp"

namespace zkagent::election::detail {

enum class Event {
  Registered,       // own member node created (or reused after a lost reply)
  Elected,          // we are the smallest member and `active` holds our record
  MustWait,         // a predecessor exists, or `active` holds someone else's record
  QueueChanged,     // predecessor or `active` deleted: look again
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
  Suspend,            // report Lost(suspended) if leading; gate closed by the session flag
  Forget,  // report Lost(session_expired) if leading; member node is gone with the session
  Halt,    // report Lost(stopped) if leading
};

struct Transition {
  std::optional<Role> from;  // nullopt: any state not listed before
  Event event;
  Role to;
  Action action;
};

// Read top to bottom: the first row whose state and event match wins.
inline constexpr std::array kTransitions = {
    Transition{Role::Init, Event::NewSession, Role::Init, Action::Register},
    Transition{Role::Init, Event::Registered, Role::Candidate, Action::Evaluate},
    Transition{Role::Candidate, Event::Elected, Role::Leader, Action::AnnounceLeader},
    Transition{Role::Candidate, Event::MustWait, Role::Waiting, Action::None},
    Transition{Role::Candidate, Event::QueueChanged, Role::Candidate, Action::Evaluate},
    Transition{Role::Candidate, Event::MemberMissing, Role::Init, Action::Register},
    Transition{Role::Waiting, Event::QueueChanged, Role::Candidate, Action::Evaluate},
    Transition{Role::Waiting, Event::Elected, Role::Leader, Action::AnnounceLeader},
    Transition{Role::Waiting, Event::MustWait, Role::Waiting, Action::None},
    Transition{Role::Waiting, Event::MemberMissing, Role::Init, Action::Register},
    Transition{Role::Leader, Event::QueueChanged, Role::Leader, Action::Evaluate},
    Transition{Role::Leader, Event::Elected, Role::Leader, Action::None},
    Transition{Role::Leader, Event::Drift, Role::Candidate, Action::StepDown},
    Transition{Role::Leader, Event::MustWait, Role::Waiting, Action::StepDown},
    Transition{Role::Leader, Event::MemberMissing, Role::Init, Action::StepDownRegister},
    Transition{Role::Leader, Event::Resign, Role::Init, Action::ResignAndRegister},
    Transition{Role::Leader, Event::Withdraw, Role::Init, Action::ResignAndLeave},
    Transition{Role::Suspend, Event::ReconnectedSame, Role::Candidate, Action::VerifyMember},
    Transition{Role::Suspend, Event::NewSession, Role::Init, Action::Register},
    Transition{Role::Stopped, Event::Stop, Role::Stopped, Action::None},
    Transition{std::nullopt, Event::Disconnected, Role::Suspend, Action::Suspend},
    Transition{std::nullopt, Event::Expired, Role::Suspend, Action::Forget},
    Transition{std::nullopt, Event::Stop, Role::Stopped, Action::Halt},
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
