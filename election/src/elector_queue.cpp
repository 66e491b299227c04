// Elector: evaluation of the member queue: list it, watch only the predecessor, follow `active`.
#include <algorithm>

#include "elector.hpp"
#include "elector_support.hpp"

namespace zkagent::election::detail {

namespace {

// How long a candidate behind a predecessor waits before reading `active` again after it changed.
constexpr std::chrono::milliseconds kLeaderRefreshDelay{100};

}  // namespace

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
  if (memberName_.empty() || !keeper_.usable()) return;
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
  keeper_.childrenOn(
      strand_, members_, nullptr, nullptr,
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
        auto own = std::find_if(queue.begin(), queue.end(),
                                [&](const auto& q) { return q.second == self->memberName_; });
        if (own == queue.end()) {
          self->evaluating_ = false;
          self->dirty_ = false;
          return self->feed(Event::MemberMissing);
        }
        if (own == queue.begin()) {
          // The last leader we saw may be stopping (its stop writes no record): its
          // session's mark says so while it lasts.
          const auto& last = self->lastLeaderSeen_;
          const bool peer = last && last->sessionId != self->keeper_.sessionId();
          return self->acquire(epoch, std::nullopt, peer ? last->sessionId : 0);
        }
        // Watch only the predecessor: no herd when the leader goes (seed 001 §3.2).
        const std::string predecessor = std::prev(own)->second;
        const bool predecessorIsHead = std::prev(own) == queue.begin();
        self->keeper_.existsOn(
            self->strand_, self->memberPath(predecessor), self.get(),
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
      keeper_.usable()) {
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

Keeper::Watch Elector::activeWatch() {
  return [weak = weak_from_this()] {
    if (auto s = weak.lock()) s->onActiveChanged();
  };
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
    onChange = activeWatch();
  }
  keeper_.getOn(strand_, active_, watch ? &active_ : nullptr, std::move(onChange),
                [self = shared_from_this(), epoch](ZkError err, std::string data, NodeStat) {
                  if (epoch != self->epoch_) return;
                  if (err == ZkError::Ok) {
                    self->noteLeader(parseActive(data));
                  } else if (err == ZkError::NoNode) {
                    // No leader yet (the head is still creating `active`): watch until it appears,
                    // behind the head too, so every candidate ends up knowing who leads (the
                    // agent's balance counts leaders from what its candidates saw). Created
                    // between the read and the watch, the node is read now: its watch would fire
                    // only when it changes, which a settled leader's node may never do.
                    self->noteLeader(std::nullopt);
                    self->keeper_.existsOn(
                        self->strand_, self->active_, &self->active_, self->activeWatch(),
                        [self, epoch](ZkError e, std::optional<NodeStat> stat) {
                          if (e == ZkError::Ok && stat && epoch == self->epoch_) {
                            self->watchActive(epoch);
                          }
                        });
                  }
                });
}

void Elector::noteLeader(std::optional<ActiveInfo> leader) {
  if (leader) lastLeaderSeen_ = leader;
  std::lock_guard lock(gateMu_);
  status_.leader = std::move(leader);
}
}  // namespace zkagent::election::detail
