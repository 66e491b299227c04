// Elector: construction, the public entry points, the state machine (feed/perform), reporting
// and the gate. Registration, the queue, takeover, handover inference and release live in
// elector_*.cpp beside this file.
#include "elector.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "elector_support.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

// The `last transition reason` operators see in the status.
std::string_view eventName(Event event) {
  switch (event) {
    case Event::Join:
      return "joined";
    case Event::Registered:
      return "registered";
    case Event::Elected:
      return "elected";
    case Event::MustWait:
      return "waiting";
    case Event::Drift:
      return "drift";
    case Event::MemberMissing:
      return "member_missing";
    case Event::Disconnected:
      return "suspended";
    case Event::ReconnectedSame:
      return "reconnected";
    case Event::Expired:
      return "session_expired";
    case Event::NewSession:
      return "new_session";
    case Event::Resign:
      return "resigned";
    case Event::Withdraw:
      return "withdrawn";
    case Event::Stop:
      return "stopped";
  }
  return "unknown";
}

}  // namespace

Elector::Elector(asio::io_context& io, std::shared_ptr<const ElectorContext> ctx,
                 std::string account)
    : strand_(asio::make_strand(io)),
      retryTimer_(strand_),
      leaderRefresh_(strand_),
      ctx_(std::move(ctx)),
      keeper_(*ctx_->keeper),
      account_(std::move(account)),
      base_(naming::accountPath(ctx_->options.root, account_)),
      members_(naming::membersPath(ctx_->options.root, account_)),
      active_(naming::activePath(ctx_->options.root, account_)),
      handover_(naming::handoverPath(ctx_->options.root, account_)) {
  status_.account = account_;
  status_.since = std::chrono::system_clock::now();
}

// ---- public entry points (post onto the strand) ----------------------------------------------

void Elector::join() {
  asio::post(strand_, [self = shared_from_this()] {
    self->standing_ = true;
    {
      std::lock_guard lock(self->gateMu_);
      self->status_.standing = true;
    }
    self->feed(Event::Join);
  });
}

void Elector::withdraw() {
  asio::post(strand_, [self = shared_from_this()] {
    {
      std::lock_guard lock(self->gateMu_);
      self->status_.standing = false;
    }
    self->feed(Event::Withdraw, LossReason::Resigned);
    self->standing_ = false;
  });
}

void Elector::resign(LossReason reason) {
  asio::post(strand_, [self = shared_from_this(), reason] { self->feed(Event::Resign, reason); });
}

void Elector::jumpQueue(int64_t receiverSeq, const std::vector<int64_t>& aheadSeqs,
                        std::function<void(ZkError)> done) {
  auto pathOfSeq = [this](int64_t seq) { return memberPath(memberName(seq)); };
  std::vector<MultiOp> ops{{MultiOp::Kind::Check, pathOfSeq(receiverSeq), "", -1}};
  for (int64_t seq : aheadSeqs) ops.push_back({MultiOp::Kind::Remove, pathOfSeq(seq), "", -1});
  keeper_.multiOn(
      strand_, std::move(ops),
      [done = std::move(done)](ZkError err, const std::vector<MultiResult>&) { done(err); });
}

void Elector::sessionChanged(const SessionEvent& event) {
  asio::post(strand_, [self = shared_from_this(), event] {
    if (!self->standing_) return;
    switch (event.state) {
      case SessionState::Connected:
        if (event.newSession && self->memberOf(event.sessionId)) {
          // A join ran while the client was connected, before this event reached us: its member
          // is of this very session. Forgetting it would leave it as our own orphan, ahead of
          // every member we register after it.
          break;
        }
        if (event.newSession) {
          self->forgetMember();  // it went with the old session
          self->pendingRemovals_.clear();
          {
            std::lock_guard lock(self->gateMu_);
            self->gateDrifted_ = false;
          }
          self->feed(Event::NewSession);
        } else {
          self->retryRemovals();
          self->feed(Event::ReconnectedSame);
        }
        break;
      case SessionState::Suspended:
        self->feed(Event::Disconnected, LossReason::Suspended);
        break;
      case SessionState::Expired:
        self->feed(Event::Expired, LossReason::SessionExpired);
        break;
      case SessionState::Connecting:
      case SessionState::Closed:
        break;
    }
  });
}

void Elector::stop(bool withRecord, std::function<void(std::vector<MultiOp>)> done) {
  asio::post(strand_, [self = shared_from_this(), withRecord, done = std::move(done)]() mutable {
    self->standing_ = false;
    const bool leading = self->role_ == Role::Leader;
    self->feed(Event::Stop, LossReason::Stopped);  // LOST stopped; the gate is closed
    // Only a led account is handed over explicitly: its successor starts before the session is
    // closed, and knows this was clean (from our session mark, else the record), so it skips its
    // lock-delay. The member nodes of the others go with the session close.
    std::vector<MultiOp> ops;
    if (leading && self->keeper_.usable()) ops = self->releaseOps(LossReason::Stopped, withRecord);
    self->forgetMember();  // nothing of ours runs any more
    done(std::move(ops));
  });
}

// ---- the state machine -----------------------------------------------------------------------

void Elector::feed(Event event, LossReason reason) {
  auto step = transition(role_, event);
  if (!step) return;  // the event means nothing in this state
  const Role before = role_;
  const bool losing = before == Role::Leader && step->to != Role::Leader;
  setRole(step->to, std::string(losing ? toString(reason) : eventName(event)));
  if (ctx_->onTransition) ctx_->onTransition(before, *step);
  perform(step->action, reason);
}

// Forgets our member node and our place in the queue: replies and watches still on their way for
// it drop (they carry the old epoch).
bool Elector::memberOf(int64_t session) const {
  const bool member =
      !memberName_.empty() || (createInFlight_ && createEpoch_ == epoch_) || replyLost_;
  return member && session != 0 && memberSession_ == session;
}

void Elector::forgetMember() {
  ++epoch_;
  memberSession_ = 0;
  memberName_.clear();
  seq_ = -1;
  createInFlight_ = false;
  activeVersion_ = -1;
  predecessor_.clear();
  predecessorIsHead_ = false;
}

void Elector::perform(Action action, LossReason reason) {
  switch (action) {
    case Action::None:
      break;
    case Action::Register:
      registerAfresh();
      break;
    case Action::Evaluate:
      requestEvaluate();
      break;
    case Action::VerifyMember:
      verifyMember();
      break;
    case Action::AnnounceLeader:
      announce();
      break;
    case Action::StepDown:
      reportLoss(reason);
      requestEvaluate();
      break;
    case Action::StepDownRegister:
      reportLoss(reason);
      // Our member node is gone; an `active` node of ours would block everyone else.
      if (activeVersion_ >= 0) removeUntilGone(active_, activeVersion_);
      registerAfresh();
      break;
    case Action::ResignAndRegister:
      releaseLeadership(reason, true, [] {});
      break;
    case Action::ResignAndLeave:
      releaseLeadership(LossReason::Resigned, false, [] {});
      break;
    case Action::Leave:
      if (activeVersion_ >= 0) removeOwnActive();  // held without leading yet
      if (!memberName_.empty()) removeUntilGone(memberPath(memberName_), -1);
      forgetMember();
      break;
    case Action::ReportLoss:
      reportLoss(reason);
      break;
    case Action::StepDownForget:
      reportLoss(reason);
      forgetMember();
      break;
    case Action::Forget:
      forgetMember();
      break;
  }
}

// ---- reporting -------------------------------------------------------------------------------

void Elector::announce() {
  const ActiveInfo mine = ownRecord();
  {
    std::lock_guard lock(gateMu_);
    gateToken_ = seq_;
    gateLinkEpoch_ = pendingLink_;
    gateSession_ = keeper_.sessionId();
    gateDrifted_ = false;
    status_.leader = mine;
  }
  lastLeaderSeen_ = mine;
  const auto& prev = pendingPrevious_;
  spdlog::info(
      "leader changed account={} oldSeq={} oldInstance={} newSeq={} newInstance={} reason={}",
      account_, prev ? prev->seq : -1, prev ? prev->instanceId : "none", seq_,
      ctx_->options.instanceId, pendingHandoverReason_);
  if (ctx_->onLeadership) {
    LeadershipEvent ev{LeadershipEvent::Kind::Acquired,
                       account_,
                       seq_,
                       {},
                       prev,
                       prev.has_value() && pendingHandoverReason_ == "session_expired",
                       std::chrono::system_clock::now()};
    ctx_->onLeadership(ev);
  }
}

void Elector::reportLoss(LossReason reason) {
  int64_t token = -1;
  {
    std::lock_guard lock(gateMu_);
    token = gateToken_;
    gateToken_ = -1;
    if (status_.leader && isOwnRecord(*status_.leader)) status_.leader.reset();
  }
  if (token < 0) return;  // already reported (a stop or resign that follows a suspension)
  {
    std::lock_guard lock(gateMu_);
    gateDrifted_ = reason == LossReason::Drift;
  }
  spdlog::warn("leadership lost account={} seq={} instance={} reason={}", account_, token,
               ctx_->options.instanceId, toString(reason));
  if (ctx_->onLeadership) {
    LeadershipEvent ev{
        LeadershipEvent::Kind::Lost,     account_, token, reason, std::nullopt, false,
        std::chrono::system_clock::now()};
    ctx_->onLeadership(ev);
  }
}

void Elector::setRole(Role role, std::string reason) {
  if (role == role_ && reason.empty()) return;
  role_ = role;
  std::lock_guard lock(gateMu_);
  if (status_.role != role) status_.since = std::chrono::system_clock::now();
  status_.role = role;
  if (!reason.empty()) status_.lastReason = std::move(reason);
  status_.seq = seq_;
}

ActiveInfo Elector::ownRecord() const {
  return ActiveInfo{seq_,         ctx_->options.instanceId, keeper_.sessionId(),
                    unixMillis(), ctx_->options.endpoint,   ctx_->options.deviceEndpoint};
}

bool Elector::isOwnRecord(const ActiveInfo& a) const {
  return a.seq == seq_ && a.instanceId == ctx_->options.instanceId &&
         a.sessionId == keeper_.sessionId();
}

// ---- gate and queries ------------------------------------------------------------------------

GateDecision Elector::check() const {
  std::lock_guard lock(gateMu_);
  GateDecision d{GateDecision::Verdict::NotLeader, -1, keeper_.sessionId(), status_.leader};
  if (!keeper_.usable() || !keeper_.heardRecently()) {
    d.verdict = GateDecision::Verdict::Suspended;
  } else if (gateToken_ >= 0 && gateLinkEpoch_ == keeper_.linkEpoch() &&
             gateSession_ == keeper_.sessionId()) {
    d.verdict = GateDecision::Verdict::Allowed;
    d.token = gateToken_;
  } else if (gateDrifted_) {
    d.verdict = GateDecision::Verdict::Drifted;
  }
  return d;
}

void Elector::checkStrict(std::function<void(GateDecision)> done) {
  asio::post(strand_, [self = shared_from_this(), done = std::move(done)]() mutable {
    GateDecision fast = self->check();
    if (!fast.allowed()) return done(fast);
    const uint64_t epoch = self->epoch_;
    self->keeper_.syncOn(self->strand_, self->active_,
                         [self, epoch, fast, done = std::move(done)](ZkError err) mutable {
                           if (err != ZkError::Ok) {
                             fast.verdict = GateDecision::Verdict::Suspended;
                             return done(fast);
                           }
                           self->keeper_.getOn(
                               self->strand_, self->active_, nullptr, nullptr,
                               [self, epoch, fast, done = std::move(done)](
                                   ZkError e2, std::string data, NodeStat stat) mutable {
                                 auto active = e2 == ZkError::Ok ? parseActive(data) : std::nullopt;
                                 const bool mine =
                                     active && self->isOwnRecord(*active) &&
                                     stat.ephemeralOwner == self->keeper_.sessionId() &&
                                     active->seq == fast.token;
                                 if (mine) return done(self->check());
                                 if (e2 == ZkError::Ok || e2 == ZkError::NoNode) {
                                   fast.verdict = GateDecision::Verdict::Drifted;
                                   fast.token = -1;
                                   fast.leader = active;
                                   if (epoch == self->epoch_ && self->role_ == Role::Leader) {
                                     self->feed(Event::Drift, LossReason::Drift);
                                   }
                                 } else {
                                   fast.verdict = GateDecision::Verdict::Suspended;
                                   fast.token = -1;
                                 }
                                 done(fast);
                               });
                         });
  });
}

void Elector::members(std::function<void(ZkError, std::vector<MemberInfo>)> done) {
  keeper_.childrenOn(
      strand_, members_, nullptr, nullptr,
      [self = shared_from_this(), done = std::move(done)](ZkError err,
                                                          std::vector<std::string> names) mutable {
        if (err != ZkError::Ok) return done(err, {});
        auto gather = std::make_shared<Gather<MemberInfo>>();
        gather->pending = names.size() + 1;
        gather->done = [done = std::move(done)](std::vector<MemberInfo> all) {
          std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
          done(ZkError::Ok, std::move(all));
        };
        for (auto& name : names) {
          self->keeper_.getOn(self->strand_, self->memberPath(name), nullptr, nullptr,
                              [gather, name](ZkError e2, std::string data, NodeStat) {
                                auto m = e2 == ZkError::Ok ? parseMember(data) : std::nullopt;
                                if (m) m->seq = seqOf(name);
                                gather->add(m && m->seq >= 0 ? m : std::nullopt);
                              });
        }
        gather->add(std::nullopt);
      });
}

AccountStatus Elector::status() const {
  std::lock_guard lock(gateMu_);
  return status_;
}
}  // namespace zkagent::election::detail
