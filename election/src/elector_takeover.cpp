// Elector: takeover: create `active` (batched, guarded by our member) and read the predecessor's
// handover, or confirm an `active` that already exists is ours.
#include <nlohmann/json.hpp>

#include "elector.hpp"

namespace zkagent::election::detail {

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
  const uint64_t linkAtCreate = keeper_.linkEpoch();
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
  keeper_.createBatchedOn(
      strand_, active_, toJson(ownRecord()), NodeKind::Ephemeral,
      [self = shared_from_this(), epoch, pending, settle](ZkError err, std::string) {
        self->activePending_ = false;
        pending->created = err;
        if (err == ZkError::Ok) {
          // The watch only guards against someone else touching our node: it waits until the
          // takeovers still queued have gone out.
          self->keeper_.whenCreatesIdle(self->strand_,
                                        [self, epoch] { self->armActiveWatch(epoch); });
        }
        settle();
      },
      memberPath(memberName_));
  if (!aboutToLead || pending->handover) return;
  auto readRecord = [self = shared_from_this(), pending, settle] {
    self->keeper_.getOn(self->strand_, self->handover_, nullptr, nullptr,
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
  keeper_.existsOn(
      strand_, active_, &active_, activeWatch(),
      [self = shared_from_this(), epoch](ZkError err, std::optional<NodeStat> stat) {
        if (epoch != self->epoch_ || err != ZkError::Ok) return;
        if (!stat || stat->version != 0 || stat->ephemeralOwner != self->keeper_.sessionId()) {
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
  const uint64_t linkAtRead = keeper_.linkEpoch();
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
        reads->activeStat.ephemeralOwner == self->keeper_.sessionId()) {
      self->activeVersion_ = reads->activeStat.version;
      if (self->role_ != Role::Leader) {
        self->prepareAnnouncement(reads->handoverRead ? &reads->handover : nullptr, linkAtRead);
        self->feed(Event::Elected);
      }
      return self->finishEvaluate();
    }
    if (active && active->instanceId == self->ctx_->options.instanceId &&
        reads->activeStat.ephemeralOwner == self->keeper_.sessionId()) {
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
  keeper_.getOn(
      strand_, active_, &active_, activeWatch(),
      [self = shared_from_this(), reads, settle](ZkError err, std::string data, NodeStat stat) {
        self->activePending_ = false;
        reads->activeErr = err;
        reads->active = std::move(data);
        reads->activeStat = stat;
        settle();
      });
  if (aboutToLead) {
    keeper_.getOn(strand_, handover_, nullptr, nullptr,
                  [reads, settle](ZkError err, std::string data, NodeStat) {
                    reads->handoverRead = err == ZkError::Ok;
                    reads->handover = std::move(data);
                    settle();
                  });
  }
}
}  // namespace zkagent::election::detail
