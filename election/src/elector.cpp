#include "elector.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

int64_t unixMillis() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const int64_t kProcessStartMs = unixMillis();

// How long a candidate behind a predecessor waits before reading `active` again after it changed.
constexpr std::chrono::milliseconds kLeaderRefreshDelay{100};

// Members are "m-" + the sequence number ZooKeeper appends (ten digits, zero-padded).
constexpr std::string_view kMemberPrefix = "m-";

// "m-0000000007" -> 7; -1 for names that are not ours to order (foreign clutter is ignored).
int64_t seqOf(std::string_view name) {
  if (name.size() <= kMemberPrefix.size() || !name.starts_with(kMemberPrefix)) return -1;
  int64_t seq = 0;
  for (char c : name.substr(kMemberPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    seq = seq * 10 + (c - '0');
  }
  return seq;
}

// 7 -> "m-0000000007": the name ZooKeeper gave the member with that sequence number.
std::string memberName(int64_t seq) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(seq));
  return std::string(kMemberPrefix) + digits;
}

// The `last transition reason` operators see in the status.
std::string_view eventName(Event event) {
  switch (event) {
    case Event::Registered:
      return "registered";
    case Event::Elected:
      return "elected";
    case Event::MustWait:
      return "waiting";
    case Event::QueueChanged:
      return "queue_changed";
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

std::string baseName(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// Joins N asynchronous answers into one callback.
template <typename T>
struct Gather {
  size_t pending;
  std::vector<T> items;
  std::function<void(std::vector<T>)> done;
  void add(std::optional<T> item) {
    if (item) items.push_back(std::move(*item));
    if (--pending == 0) done(std::move(items));
  }
};

}  // namespace

Elector::Elector(asio::io_context& io, std::shared_ptr<const ElectorContext> ctx,
                 std::string account)
    : strand_(asio::make_strand(io)),
      retryTimer_(strand_),
      leaderRefresh_(strand_),
      ctx_(std::move(ctx)),
      zk_(*ctx_->session),
      account_(std::move(account)),
      base_(ctx_->options.root + "/" + account_),
      members_(base_ + "/members"),
      active_(base_ + "/active"),
      handover_(base_ + "/handover") {
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
    if (self->role_ == Role::Init && self->memberName_.empty()) self->registerMember();
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
  auto memberPath = [this](int64_t seq) { return members_ + "/" + memberName(seq); };
  std::vector<MultiOp> ops{{MultiOp::Kind::Check, memberPath(receiverSeq), "", -1}};
  for (int64_t seq : aheadSeqs) ops.push_back({MultiOp::Kind::Remove, memberPath(seq), "", -1});
  zk_.multiOn(strand_, std::move(ops),
              [done = std::move(done)](ZkError err, const std::vector<ZkSession::MultiResult>&) {
                done(err);
              });
}

void Elector::sessionChanged(const SessionEvent& event) {
  asio::post(strand_, [self = shared_from_this(), event] {
    if (!self->standing_) return;
    switch (event.state) {
      case SessionState::Connected:
        if (event.newSession) {
          ++self->epoch_;
          self->memberName_.clear();
          self->seq_ = -1;
          self->createInFlight_ = false;
          self->pendingRemovals_.clear();
          {
            std::lock_guard lock(self->gateMu_);
            self->gateDrifted_ = false;
          }
          self->feed(Event::NewSession);
        } else {
          self->retryRemovals();
          if (self->role_ == Role::Suspend) {
            self->feed(Event::ReconnectedSame);
          } else {
            self->verifyMember();
          }
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
    if (leading && self->zk_.usable()) ops = self->releaseOps(LossReason::Stopped, withRecord);
    ++self->epoch_;  // nothing of ours runs any more: replies and watches still on the way drop
    self->memberName_.clear();
    self->seq_ = -1;
    self->activeVersion_ = -1;
    done(std::move(ops));
  });
}

// The handover record (when wanted), then our member node, then `active`, as one atomic multi.
// The member goes before `active` so the successor hears of its predecessor first and creates
// `active` at once; the `active` event that follows finds that create in flight and costs nothing.
std::vector<MultiOp> Elector::releaseOps(LossReason reason, bool withRecord) const {
  std::vector<MultiOp> ops;
  if (withRecord) {
    ops.push_back({MultiOp::Kind::Set, handover_,
                   nlohmann::json{{"seq", seq_},
                                  {"instanceId", ctx_->options.instanceId},
                                  {"reason", std::string(toString(reason))}}
                       .dump(),
                   -1});
  }
  ops.push_back({MultiOp::Kind::Remove, members_ + "/" + memberName_, "", -1});
  ops.push_back({MultiOp::Kind::Remove, active_, "", activeVersion_});
  return ops;
}

// ---- the state machine -----------------------------------------------------------------------

void Elector::feed(Event event, LossReason reason) {
  auto step = transition(role_, event);
  if (!step) return;  // the event means nothing in this state
  const Role before = role_;
  const bool losing = before == Role::Leader && step->to != Role::Leader;
  setRole(step->to, std::string(losing ? toString(reason) : eventName(event)));
  perform(step->action, before, reason);
}

void Elector::perform(Action action, Role before, LossReason reason) {
  switch (action) {
    case Action::None:
      break;
    case Action::Register:
      memberName_.clear();  // gone from ZooKeeper (or from an old session): stand afresh
      seq_ = -1;
      registerMember();
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
      memberName_.clear();
      seq_ = -1;
      registerMember();
      break;
    case Action::ResignAndRegister:
      releaseLeadership(reason, true, [] {});
      break;
    case Action::ResignAndLeave:
      releaseLeadership(LossReason::Resigned, false, [] {});
      break;
    case Action::Leave:
      ++epoch_;
      if (activeVersion_ >= 0) removeOwnActive();  // held without leading yet
      if (!memberName_.empty()) removeUntilGone(members_ + "/" + memberName_, -1);
      memberName_.clear();
      seq_ = -1;
      break;
    case Action::Suspend:
      if (before == Role::Leader) reportLoss(LossReason::Suspended);
      break;
    case Action::Forget:
      if (before == Role::Leader) reportLoss(LossReason::SessionExpired);
      ++epoch_;
      memberName_.clear();
      seq_ = -1;
      createInFlight_ = false;
      break;
    case Action::Halt:
      if (before == Role::Leader) reportLoss(LossReason::Stopped);
      break;
  }
}

// ---- registration ----------------------------------------------------------------------------

void Elector::registerMember() {
  if (!standing_ || !zk_.usable() || !memberName_.empty()) return;
  if (createInFlight_ && createEpoch_ == epoch_) return;
  createInFlight_ = true;
  createEpoch_ = epoch_;
  replyLost_ = false;
  const uint64_t epoch = epoch_;
  const int64_t session = zk_.sessionId();
  zk_.createOn(strand_, members_ + "/" + std::string(kMemberPrefix), memberRecord(),
               NodeKind::EphemeralSequential,
               [self = shared_from_this(), epoch, session](ZkError err, std::string path) {
                 self->onCreated(epoch, session, err, std::move(path));
               });
}

void Elector::onCreated(uint64_t epoch, int64_t session, ZkError err, std::string path) {
  if (epoch != epoch_) {
    // Withdrawn meanwhile, or the session changed: a node we still own must not block the queue.
    if (err == ZkError::Ok && session == zk_.sessionId()) removeUntilGone(path, -1);
    return;
  }
  createInFlight_ = false;
  switch (err) {
    case ZkError::Ok:
      onRegistered(path);
      break;
    case ZkError::NoNode:  // first candidate ever, or the tree was deleted (CURATOR-724)
      createTree(epoch);
      break;
    case ZkError::ConnectionLoss:
      // The server may have created the node and lost only the reply (kazoo #732): on reconnect,
      // adopt it by ephemeralOwner instead of creating a second one.
      replyLost_ = true;
      break;
    default:
      break;  // expired or closing: the next session registers again
  }
}

std::string Elector::memberRecord() const {
  return toJson(MemberInfo{ctx_->options.instanceId, static_cast<int64_t>(::getpid()),
                           kProcessStartMs, ctx_->options.endpoint, -1,
                           ctx_->options.deviceEndpoint});
}

void Elector::onRegistered(const std::string& path) {
  memberName_ = baseName(path);
  seq_ = seqOf(memberName_);
  {
    std::lock_guard lock(gateMu_);
    status_.seq = seq_;
  }
  feed(Event::Registered);
}

// The account's tree is missing. The root is shared by every account (ensured once per session);
// the account's own levels and our member node go in one multi: one request and one transaction
// instead of one each, and since the members node is new in it, our member is first in the queue
// and the handover record is empty (the evaluation that follows needs to read neither).
void Elector::createTree(uint64_t epoch) {
  createInFlight_ = true;
  createEpoch_ = epoch;
  zk_.ensurePathOn(strand_, ctx_->options.root, [](ZkError) {});
  std::vector<MultiOp> ops{{MultiOp::Kind::Create, base_, "", -1},
                           {MultiOp::Kind::Create, handover_, "", -1},
                           {MultiOp::Kind::Create, members_, "", -1},
                           {MultiOp::Kind::Create, members_ + "/" + std::string(kMemberPrefix),
                            memberRecord(), -1, NodeKind::EphemeralSequential}};
  const int64_t session = zk_.sessionId();
  zk_.multiOn(strand_, std::move(ops),
              [self = shared_from_this(), epoch, session](
                  ZkError err, std::vector<ZkSession::MultiResult> results) {
                const std::string member = results.empty() ? "" : results.back().path;
                if (epoch != self->epoch_) {
                  if (err == ZkError::Ok && session == self->zk_.sessionId()) {
                    self->removeUntilGone(member, -1);
                  }
                  return;
                }
                self->createInFlight_ = false;
                switch (err) {
                  case ZkError::Ok:
                    self->freshQueueMember_ = baseName(member);
                    return self->onRegistered(member);
                  case ZkError::ConnectionLoss:
                    self->replyLost_ = true;  // as in onCreated: adopt on reconnect
                    return;
                  case ZkError::SessionExpired:
                  case ZkError::Closing:
                    return;
                  default:
                    return self->repairTree(epoch);  // partly there, or the root is missing
                }
              });
}

// Creates each missing level on its own, then registers; retried shortly while that fails (the
// tree deleted again under us, or the root refused).
void Elector::repairTree(uint64_t epoch) {
  zk_.forgetPath(handover_);  // whichever level is missing, this session's memory of it is wrong
  zk_.forgetPath(members_);
  zk_.ensurePathOn(strand_, handover_, [self = shared_from_this(), epoch](ZkError) {
    self->zk_.ensurePathOn(self->strand_, self->members_, [self, epoch](ZkError err) {
      if (epoch != self->epoch_) return;
      if (err == ZkError::Ok) return self->registerMember();
      self->retryTimer_.expires_after(std::chrono::milliseconds(100));
      self->retryTimer_.async_wait([self, epoch](boost::system::error_code ec) {
        if (!ec && epoch == self->epoch_) self->registerMember();
      });
    });
  });
}

// Finds the member node our session created but never heard back about; keeps the lowest, deletes
// any other, or registers afresh when there is none.
void Elector::adoptOrRegister() {
  const uint64_t epoch = epoch_;
  zk_.childrenOn(
      strand_, members_, nullptr, nullptr,
      [self = shared_from_this(), epoch](ZkError err, std::vector<std::string> names) {
        if (epoch != self->epoch_ || err != ZkError::Ok) {
          if (err == ZkError::NoNode) {
            self->replyLost_ = false;
            self->registerMember();
          }
          return;
        }
        using Owned = std::pair<int64_t, std::string>;
        auto gather = std::make_shared<Gather<Owned>>();
        gather->pending = names.size() + 1;
        gather->done = [self, epoch](std::vector<Owned> owned) {
          if (epoch != self->epoch_) return;
          self->replyLost_ = false;
          std::sort(owned.begin(), owned.end());
          for (size_t i = 1; i < owned.size(); ++i) {
            self->removeUntilGone(self->members_ + "/" + owned[i].second, -1);
          }
          if (owned.empty()) {
            self->registerMember();
            return;
          }
          self->memberName_ = owned.front().second;
          self->seq_ = owned.front().first;
          {
            std::lock_guard lock(self->gateMu_);
            self->status_.seq = self->seq_;
          }
          if (self->role_ == Role::Init) {
            self->feed(Event::Registered);
          } else {
            self->requestEvaluate();
          }
        };
        const int64_t session = self->zk_.sessionId();
        for (auto& name : names) {
          self->zk_.existsOn(self->strand_, self->members_ + "/" + name, nullptr, nullptr,
                             [gather, name, session](ZkError, std::optional<NodeStat> stat) {
                               if (stat && stat->ephemeralOwner == session && seqOf(name) >= 0) {
                                 gather->add(Owned{seqOf(name), name});
                               } else {
                                 gather->add(std::nullopt);
                               }
                             });
        }
        gather->add(std::nullopt);  // the +1 above: completes even when there are no children
      });
}

void Elector::verifyMember() {
  if (!standing_) return;
  if (memberName_.empty()) {
    if (replyLost_) {
      adoptOrRegister();
    } else {
      registerMember();
    }
    return;
  }
  const uint64_t epoch = epoch_;
  zk_.existsOn(strand_, members_ + "/" + memberName_, nullptr, nullptr,
               [self = shared_from_this(), epoch](ZkError err, std::optional<NodeStat> stat) {
                 if (epoch != self->epoch_ || err != ZkError::Ok) return;
                 if (stat && stat->ephemeralOwner == self->zk_.sessionId()) {
                   self->requestEvaluate();
                 } else {
                   // An `active` this session still holds would block our new member forever.
                   self->removeOwnActive();
                   self->feed(Event::MemberMissing);
                 }
               });
}

// Deletes `active` if this session owns it (whatever its record says). Sent before anything the
// caller sends next, so the server applies it first.
void Elector::removeOwnActive() {
  activeVersion_ = -1;
  zk_.existsOn(strand_, active_, nullptr, nullptr,
               [self = shared_from_this()](ZkError err, std::optional<NodeStat> stat) {
                 if (err == ZkError::Ok && stat && stat->ephemeralOwner == self->zk_.sessionId())
                   self->removeUntilGone(self->active_, stat->version);
               });
}

// ---- evaluation ------------------------------------------------------------------------------

void Elector::requestEvaluate(Change change) {
  if (evaluating_) {
    const bool seenAnyway = (change == Change::Members && listingPending_) ||
                            (change == Change::Active && activePending_);
    if (!seenAnyway) dirty_ = true;
    return;
  }
  evaluate();
}

void Elector::finishEvaluate() {
  evaluating_ = false;
  listingPending_ = activePending_ = false;
  if (dirty_) {
    dirty_ = false;
    evaluate();
  }
}

void Elector::evaluate() {
  if (memberName_.empty() || !zk_.usable()) return;
  evaluating_ = true;
  dirty_ = false;
  listingPending_ = activePending_ = true;
  predecessor_.clear();
  predecessorIsHead_ = false;
  const uint64_t epoch = epoch_;
  if (freshQueueMember_ == memberName_) {
    // Our member came in the same transaction as its members node: nobody is ahead of us, and
    // the handover record was created empty with it.
    freshQueueMember_.clear();
    listingPending_ = false;
    return acquire(epoch, std::string());
  }
  zk_.childrenOn(strand_, members_, nullptr, nullptr,
                 [self = shared_from_this(), epoch](ZkError err, std::vector<std::string> names) {
                   self->listingPending_ = false;
                   if (epoch != self->epoch_) return self->finishEvaluate();
                   if (err == ZkError::NoNode) {  // the members node itself was deleted
                     self->evaluating_ = false;
                     self->dirty_ = false;
                     return self->feed(Event::MemberMissing);
                   }
                   if (err != ZkError::Ok) return self->finishEvaluate();  // reconnect re-verifies
                   std::vector<std::pair<int64_t, std::string>> queue;
                   for (auto& n : names) {
                     if (int64_t s = seqOf(n); s >= 0) queue.emplace_back(s, n);
                   }
                   std::sort(queue.begin(), queue.end());
                   auto own = std::find_if(queue.begin(), queue.end(), [&](const auto& q) {
                     return q.second == self->memberName_;
                   });
                   if (own == queue.end()) {
                     self->evaluating_ = false;
                     self->dirty_ = false;
                     return self->feed(Event::MemberMissing);
                   }
                   if (own == queue.begin()) {
                     // The last leader we saw may be stopping (its stop writes no record): its
                     // session's mark says so while it lasts.
                     const auto& last = self->lastLeaderSeen_;
                     const bool peer = last && last->sessionId != self->zk_.sessionId();
                     return self->acquire(epoch, std::nullopt, peer ? last->sessionId : 0);
                   }
                   // Watch only the predecessor: no herd when the leader goes (seed 001 §3.2).
                   const std::string predecessor = std::prev(own)->second;
                   const bool predecessorIsHead = std::prev(own) == queue.begin();
                   self->zk_.existsOn(
                       self->strand_, self->members_ + "/" + predecessor, self.get(),
                       [weak = self->weak_from_this()] {
                         if (auto s = weak.lock()) s->onPredecessorGone();
                       },
                       [self, epoch, predecessor, predecessorIsHead](ZkError e2,
                                                                     std::optional<NodeStat> stat) {
                         if (epoch != self->epoch_) return self->finishEvaluate();
                         if (e2 == ZkError::Ok && !stat) {
                           self->dirty_ = true;  // gone already: look again
                         } else if (e2 == ZkError::Ok) {
                           self->predecessor_ = predecessor;
                           self->predecessorIsHead_ = predecessorIsHead;
                           self->predecessorSession_ = stat->ephemeralOwner;
                           // We take over from it next: learn how it leaves as it happens.
                           if (predecessorIsHead) self->ctx_->marks->follow(stat->ephemeralOwner);
                           self->feed(Event::MustWait, LossReason::Drift);
                           self->watchActive(epoch);
                         }
                         self->finishEvaluate();
                       });
                 });
}

// The member we waited behind is gone. When it was first in the queue we are first now (sequence
// numbers only grow, so nobody can have queued ahead of us since): take `active` without listing
// the queue again. That saves a round trip and a request per account on every handover.
void Elector::onPredecessorGone() {
  if (!evaluating_ && role_ == Role::Waiting && predecessorIsHead_ && !memberName_.empty() &&
      zk_.usable()) {
    // The head was the leader we last saw: its session's stop mark can tell a clean stop.
    const bool headLed = lastLeaderSeen_ && lastLeaderSeen_->sessionId == predecessorSession_ &&
                         lastLeaderSeen_->seq == seqOf(predecessor_);
    predecessor_.clear();
    predecessorIsHead_ = false;
    evaluating_ = true;
    dirty_ = false;
    listingPending_ = false;
    activePending_ = true;
    return acquire(epoch_, std::nullopt, headLed ? predecessorSession_ : 0);
  }
  requestEvaluate(Change::Members);
}

// Behind a predecessor `active` is not ours to take, whatever happens to it; only the leader named
// in our status is out of date. Read it again a little later, by when the successor has most
// likely taken it, instead of re-listing the queue (a thousand accounts failing over at once
// would otherwise cost a thousand listings nobody needs).
void Elector::onActiveChanged() {
  if (!evaluating_ && role_ == Role::Waiting && !predecessor_.empty()) return refreshLeaderSoon();
  requestEvaluate(Change::Active);
}

void Elector::refreshLeaderSoon() {
  leaderRefresh_.expires_after(kLeaderRefreshDelay);
  leaderRefresh_.async_wait(
      [self = shared_from_this(), epoch = epoch_](boost::system::error_code ec) {
        if (ec || epoch != self->epoch_ || self->evaluating_ || self->role_ != Role::Waiting ||
            self->predecessor_.empty()) {
          return;  // an evaluation since has read `active` (or will)
        }
        self->watchActive(epoch);
      });
}

// Non-leaders read `active` so refusals name the current leader, and watch it to stay current. The
// candidate right behind the head reads it without a watch: the head is the leader, and when it
// goes that candidate hears it from its predecessor watch and leads itself; a watch there would
// only double the notifications the server sends when a thousand accounts fail over at once.
void Elector::watchActive(uint64_t epoch) {
  const bool watch = !predecessorIsHead_;
  Session::Watch onChange;
  if (watch) {
    onChange = [weak = weak_from_this()] {
      if (auto s = weak.lock()) s->onActiveChanged();
    };
  }
  zk_.getOn(strand_, active_, watch ? &active_ : nullptr, std::move(onChange),
            [self = shared_from_this(), epoch, watch](ZkError err, std::string data, NodeStat) {
              if (epoch != self->epoch_) return;
              if (err == ZkError::Ok) {
                self->noteLeader(parseActive(data));
              } else if (err == ZkError::NoNode) {
                // No leader yet (the head is still creating `active`): watch until it appears,
                // behind the head too, so every candidate ends up knowing who leads (the agent's
                // balance counts leaders from what its candidates saw).
                self->noteLeader(std::nullopt);
                self->zk_.existsOn(
                    self->strand_, self->active_, &self->active_,
                    [weak = self->weak_from_this()] {
                      if (auto s = weak.lock()) s->onActiveChanged();
                    },
                    [](ZkError, std::optional<NodeStat>) {});
              }
            });
}

void Elector::noteLeader(std::optional<ActiveInfo> leader) {
  if (leader) lastLeaderSeen_ = leader;
  std::lock_guard lock(gateMu_);
  status_.leader = std::move(leader);
}

// We are the smallest member: `active` is ours to hold. The create (batched with other accounts'
// creates into one multi) and the read of the predecessor's handover record go out together. A
// node this session just created is ours by construction, so leadership is announced on those two
// answers; the exists that arms the watch on `active` follows the create's answer (sent before
// it, it could arrive first) and only checks nobody touched the node in between. NodeExists sends
// us to confirm(), which tells our own node (a lost reply, a reconnect) from someone else's.
void Elector::acquire(uint64_t epoch, std::optional<std::string> knownHandover,
                      int64_t departingSession) {
  struct Pending {
    std::optional<ZkError> created;
    std::optional<std::string> handover;  // "" when missing
  };
  auto pending = std::make_shared<Pending>();
  pending->handover = std::move(knownHandover);
  const bool aboutToLead = role_ != Role::Leader;
  const uint64_t linkAtCreate = zk_.linkEpoch();
  auto settle = [self = shared_from_this(), epoch, pending, aboutToLead, linkAtCreate] {
    if (!pending->created || (aboutToLead && !pending->handover)) return;
    const ZkError err = *pending->created;
    if (epoch != self->epoch_) {
      // We stopped standing (or re-registered) while the create was out: the node it made is
      // nobody's leadership, and only this session could ever delete it. Only a node this
      // session owns is touched (after an expiry it is gone already, and a successor's is not
      // ours).
      if (err == ZkError::Ok) self->removeOwnActive();
      return self->finishEvaluate();
    }
    if (err == ZkError::NodeExists) return self->confirm(epoch);
    if (err == ZkError::NoNode) {  // our member node (the create's guard) is gone
      self->evaluating_ = false;
      self->dirty_ = false;
      return self->feed(Event::MemberMissing);
    }
    if (err != ZkError::Ok)
      return self->finishEvaluate();  // connection trouble: reconnect re-verifies
    if (self->role_ == Role::Leader) {
      // Seed 001 signal two: `active` was gone while we led. Step down, then take it again.
      self->feed(Event::Drift, LossReason::Drift);
    }
    self->activeVersion_ = 0;
    self->prepareAnnouncement(pending->handover ? &*pending->handover : nullptr, linkAtCreate);
    self->feed(Event::Elected);
    self->finishEvaluate();
  };
  // Nobody watches their own member node (a leader's watch on it would cost the server a
  // notification per account on every stop): `active` is only created while it still exists, in
  // the same multi, so a candidate whose member was deleted while it waited never leads on it.
  zk_.createBatchedOn(
      strand_, active_, toJson(ownRecord()), NodeKind::Ephemeral,
      [self = shared_from_this(), epoch, pending, settle](ZkError err, std::string) {
        self->activePending_ = false;
        pending->created = err;
        if (err == ZkError::Ok) {
          // The watch only guards against someone else touching our node: it waits until the
          // takeovers still queued have gone out.
          self->zk_.whenCreatesIdle(self->strand_, [self, epoch] { self->armActiveWatch(epoch); });
        }
        settle();
      },
      members_ + "/" + memberName_);
  if (!aboutToLead || pending->handover) return;
  auto readRecord = [self = shared_from_this(), pending, settle] {
    self->zk_.getOn(self->strand_, self->handover_, nullptr, nullptr,
                    [pending, settle](ZkError err, std::string data, NodeStat) {
                      pending->handover = err == ZkError::Ok ? std::move(data) : std::string();
                      settle();
                    });
  };
  if (departingSession == 0 || !lastLeaderSeen_) return readRecord();
  // What a stopping leader's record says; its session's mark says it stopped.
  std::string stopped = nlohmann::json{{"seq", lastLeaderSeen_->seq},
                                       {"instanceId", lastLeaderSeen_->instanceId},
                                       {"reason", std::string(toString(LossReason::Stopped))}}
                            .dump();
  using Departure = SessionMarks::Departure;
  ctx_->marks->departure(
      departingSession, strand_,
      [pending, settle, readRecord, stopped = std::move(stopped)](Departure how) mutable {
        switch (how) {
          case Departure::Stopped:
            pending->handover = std::move(stopped);
            break;
          case Departure::Ended:
            pending->handover = std::string();  // it left no record: its session ended
            break;
          case Departure::Unknown:
            return readRecord();  // resigned, drifted, or not followed: the record says
        }
        settle();
      });
}

// Watches the `active` node we just created; if anyone touched it before the watch was in place
// (version moved, owner changed, node gone), evaluate again at once.
void Elector::armActiveWatch(uint64_t epoch) {
  zk_.existsOn(
      strand_, active_, &active_,
      [weak = weak_from_this()] {
        if (auto s = weak.lock()) s->onActiveChanged();
      },
      [self = shared_from_this(), epoch](ZkError err, std::optional<NodeStat> stat) {
        if (epoch != self->epoch_ || err != ZkError::Ok) return;
        if (!stat || stat->version != 0 || stat->ephemeralOwner != self->zk_.sessionId()) {
          self->requestEvaluate(Change::Active);
        }
      });
}

// Reads `active` back (arming its watch) and, when about to lead, the predecessor's handover
// record in the same breath; leads only on a node this session owns (CURATOR-696).
void Elector::confirm(uint64_t epoch) {
  struct Reads {
    ZkError activeErr = ZkError::Other;
    std::string active, handover;
    NodeStat activeStat;
    bool handoverRead = false;
    int pending = 0;
  };
  auto reads = std::make_shared<Reads>();
  const bool aboutToLead = role_ != Role::Leader;
  reads->pending = aboutToLead ? 2 : 1;
  const uint64_t linkAtRead = zk_.linkEpoch();
  activePending_ = true;
  auto settle = [self = shared_from_this(), epoch, reads, linkAtRead] {
    if (--reads->pending > 0) return;
    if (epoch != self->epoch_) return self->finishEvaluate();
    if (reads->activeErr == ZkError::NoNode) {
      self->dirty_ = true;  // deleted between our create and read: start over
      return self->finishEvaluate();
    }
    if (reads->activeErr != ZkError::Ok) return self->finishEvaluate();
    auto active = parseActive(reads->active);
    if (active && self->isOwnRecord(*active) &&
        reads->activeStat.ephemeralOwner == self->zk_.sessionId()) {
      self->activeVersion_ = reads->activeStat.version;
      if (self->role_ != Role::Leader) {
        self->prepareAnnouncement(reads->handoverRead ? &reads->handover : nullptr, linkAtRead);
        self->feed(Event::Elected);
      }
      return self->finishEvaluate();
    }
    if (active && active->instanceId == self->ctx_->options.instanceId &&
        reads->activeStat.ephemeralOwner == self->zk_.sessionId()) {
      // This session holds `active` under an older member of ours (a withdraw or re-registration
      // crossed a create in flight). Nobody else may delete it, so it would block the account
      // until the session ends: delete it (version-checked); the watch just armed on `active`
      // brings us back to take it under the current member. A record naming someone else stays:
      // that is drift for an operator to look at, not ours to undo.
      self->removeUntilGone(self->active_, reads->activeStat.version);
    } else {
      self->noteLeader(active);
    }
    self->feed(self->role_ == Role::Leader ? Event::Drift : Event::MustWait, LossReason::Drift);
    self->finishEvaluate();
  };
  zk_.getOn(
      strand_, active_, &active_,
      [weak = weak_from_this()] {
        if (auto s = weak.lock()) s->onActiveChanged();
      },
      [self = shared_from_this(), reads, settle](ZkError err, std::string data, NodeStat stat) {
        self->activePending_ = false;
        reads->activeErr = err;
        reads->active = std::move(data);
        reads->activeStat = stat;
        settle();
      });
  if (aboutToLead) {
    zk_.getOn(strand_, handover_, nullptr, nullptr,
              [reads, settle](ZkError err, std::string data, NodeStat) {
                reads->handoverRead = err == ZkError::Ok;
                reads->handover = std::move(data);
                settle();
              });
  }
}

// What the leadership log line and event say about the predecessor: its handover record tells a
// clean resign or stop from a lost session (and so whether the agent applies its lock-delay).
void Elector::prepareAnnouncement(const std::string* handover, uint64_t linkAtRead) {
  pendingLink_ = linkAtRead;
  pendingPrevious_ = lastLeaderSeen_;
  auto& prev = pendingPrevious_;
  auto j = handover ? nlohmann::json::parse(*handover, nullptr, false) : nlohmann::json();
  std::optional<ActiveInfo> handedOver;
  if (j.is_object() && j.value("seq", int64_t{-1}) >= 0) {
    handedOver =
        ActiveInfo{j.value("seq", int64_t{-1}), j.value("instanceId", std::string()), 0, 0, "", ""};
  }
  if (prev && prev->seq == seq_ && prev->instanceId == ctx_->options.instanceId) {
    pendingHandoverReason_ = "drift";  // we lost it ourselves and took it back
  } else if (handedOver && (!prev || prev->seq < handedOver->seq)) {
    // We never saw the last leader, but it left its record on the way out.
    prev = handedOver;
    pendingHandoverReason_ = j.value("reason", std::string("resigned"));
  } else if (!prev) {
    pendingHandoverReason_ = "elected";
  } else if (handedOver && handedOver->seq == prev->seq &&
             handedOver->instanceId == prev->instanceId) {
    pendingHandoverReason_ = j.value("reason", std::string("resigned"));
  } else {
    pendingHandoverReason_ = "session_expired";  // it left without a word: its session ended
  }
}

// ---- leaving ---------------------------------------------------------------------------------

// Gate first (closed by the role change already), then one multi writing the handover record and
// deleting our member and `active`, so the successor's watch fires at once and nothing can
// half-succeed.
void Elector::releaseLeadership(LossReason reason, bool standAgain, std::function<void()> done) {
  reportLoss(reason);
  auto ops = releaseOps(reason);
  ++epoch_;
  memberName_.clear();
  seq_ = -1;
  activeVersion_ = -1;
  zk_.multiOn(strand_, ops,
              [self = shared_from_this(), ops, standAgain, done = std::move(done)](
                  ZkError err, const std::vector<ZkSession::MultiResult>&) {
                if (err != ZkError::Ok) {
                  // Partly gone already, the record's node deleted, or the reply lost: delete
                  // each until gone (CURATOR-202), never leave a node that blocks the queue.
                  const auto& [record, member, active] = std::tie(ops[0], ops[1], ops[2]);
                  self->zk_.set(record.path, record.data, -1, [](ZkError, NodeStat) {});
                  self->removeUntilGone(member.path, member.version);
                  self->removeUntilGone(active.path, active.version);
                }
                if (standAgain && self->standing_) self->registerMember();
                done();
              });
}

void Elector::removeUntilGone(std::string path, int32_t version) {
  const int64_t session = zk_.sessionId();
  zk_.removeOn(strand_, path, version,
               [self = shared_from_this(), path, version, session](ZkError err) {
                 if (err == ZkError::ConnectionLoss && session == self->zk_.sessionId()) {
                   self->pendingRemovals_.push_back({path, version});
                 }
               });
}

void Elector::retryRemovals() {
  auto pending = std::move(pendingRemovals_);
  pendingRemovals_.clear();
  for (auto& [path, version] : pending) removeUntilGone(path, version);
}

// ---- reporting -------------------------------------------------------------------------------

void Elector::announce() {
  const ActiveInfo mine = ownRecord();
  {
    std::lock_guard lock(gateMu_);
    gateToken_ = seq_;
    gateLinkEpoch_ = pendingLink_;
    gateSession_ = zk_.sessionId();
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
  return ActiveInfo{seq_,         ctx_->options.instanceId, zk_.sessionId(),
                    unixMillis(), ctx_->options.endpoint,   ctx_->options.deviceEndpoint};
}

bool Elector::isOwnRecord(const ActiveInfo& a) const {
  return a.seq == seq_ && a.instanceId == ctx_->options.instanceId &&
         a.sessionId == zk_.sessionId();
}

// ---- gate and queries ------------------------------------------------------------------------

GateDecision Elector::check() const {
  std::lock_guard lock(gateMu_);
  GateDecision d{GateDecision::Verdict::NotLeader, -1, zk_.sessionId(), status_.leader};
  if (!zk_.usable()) {
    d.verdict = GateDecision::Verdict::Suspended;
  } else if (gateToken_ >= 0 && gateLinkEpoch_ == zk_.linkEpoch() &&
             gateSession_ == zk_.sessionId()) {
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
    self->zk_.syncOn(self->strand_, self->active_,
                     [self, epoch, fast, done = std::move(done)](ZkError err) mutable {
                       if (err != ZkError::Ok) {
                         fast.verdict = GateDecision::Verdict::Suspended;
                         return done(fast);
                       }
                       self->zk_.getOn(
                           self->strand_, self->active_, nullptr, nullptr,
                           [self, epoch, fast, done = std::move(done)](ZkError e2, std::string data,
                                                                       NodeStat stat) mutable {
                             auto active = e2 == ZkError::Ok ? parseActive(data) : std::nullopt;
                             const bool mine = active && self->isOwnRecord(*active) &&
                                               stat.ephemeralOwner == self->zk_.sessionId() &&
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
  zk_.childrenOn(
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
          self->zk_.getOn(self->strand_, self->members_ + "/" + name, nullptr, nullptr,
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
