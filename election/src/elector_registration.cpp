// Elector: registration (the member node, the account's tree) and adoption of a member whose
// create reply was lost; verifying the member after a same-session reconnect.
#include <unistd.h>

#include <algorithm>

#include "elector.hpp"
#include "elector_support.hpp"

namespace zkagent::election::detail {

namespace {

const int64_t kProcessStartMs = unixMillis();

std::string baseName(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

void Elector::registerMember() {
  if (!standing_ || !keeper_.usable() || !memberName_.empty()) return;
  if (createInFlight_ && createEpoch_ == epoch_) return;
  createInFlight_ = true;
  createEpoch_ = epoch_;
  replyLost_ = false;
  const uint64_t epoch = epoch_;
  const int64_t session = keeper_.sessionId();
  memberSession_ = session;
  keeper_.createOn(strand_, memberPath(kMemberPrefix), memberRecord(),
                   NodeKind::EphemeralSequential,
                   [self = shared_from_this(), epoch, session](ZkError err, std::string path) {
                     self->onCreated(epoch, session, err, std::move(path));
                   });
}

void Elector::registerAfresh() {
  memberName_.clear();
  seq_ = -1;
  registerMember();
}

void Elector::onCreated(uint64_t epoch, int64_t session, ZkError err, std::string path) {
  if (epoch != epoch_) {
    // Withdrawn meanwhile, or the session changed: a node we still own must not block the queue.
    if (err == ZkError::Ok && session == keeper_.sessionId()) removeUntilGone(path, -1);
    return;
  }
  createInFlight_ = false;
  if (err == ZkError::Ok) return onRegistered(path);
  // First candidate ever, or the tree was deleted (CURATOR-724).
  if (err == ZkError::NoNode) return createTree(epoch);
  // The server may have created the node and lost only the reply (kazoo #732): on reconnect, adopt
  // it by ephemeralOwner instead of creating a second one. Expired or closing: the next session
  // registers again.
  replyLost_ = retryable(err);
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
  keeper_.ensurePathOn(strand_, ctx_->options.root, [](ZkError) {});
  std::vector<MultiOp> ops{{MultiOp::Kind::Create, base_, "", -1},
                           {MultiOp::Kind::Create, handover_, "", -1},
                           {MultiOp::Kind::Create, members_, "", -1},
                           {MultiOp::Kind::Create, memberPath(kMemberPrefix), memberRecord(), -1,
                            NodeKind::EphemeralSequential}};
  const int64_t session = keeper_.sessionId();
  memberSession_ = session;
  keeper_.multiOn(
      strand_, std::move(ops),
      [self = shared_from_this(), epoch, session](ZkError err, std::vector<MultiResult> results) {
        const std::string member = results.empty() ? "" : results.back().path;
        if (epoch != self->epoch_) {
          if (err == ZkError::Ok && session == self->keeper_.sessionId()) {
            self->removeUntilGone(member, -1);
          }
          return;
        }
        self->createInFlight_ = false;
        if (err == ZkError::Ok) {
          self->freshQueueMember_ = baseName(member);
          return self->onRegistered(member);
        }
        self->replyLost_ = retryable(err);            // as in onCreated: adopt on reconnect
        if (!linkLost(err)) self->repairTree(epoch);  // partly there, or the root is missing
      });
}

// Creates each missing level on its own, then registers; retried shortly while that fails (the
// tree deleted again under us, or the root refused).
void Elector::repairTree(uint64_t epoch) {
  keeper_.forgetPath(
      handover_);  // whichever level is missing, this session's memory of it is wrong
  keeper_.forgetPath(members_);
  keeper_.ensurePathOn(strand_, handover_, [self = shared_from_this(), epoch](ZkError) {
    self->keeper_.ensurePathOn(self->strand_, self->members_, [self, epoch](ZkError err) {
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
  keeper_.childrenOn(
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
            self->removeUntilGone(self->memberPath(owned[i].second), -1);
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
          self->feed(Event::Registered);
        };
        const int64_t session = self->keeper_.sessionId();
        for (auto& name : names) {
          self->keeper_.existsOn(
              self->strand_, self->memberPath(name), nullptr, nullptr,
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
  keeper_.existsOn(strand_, memberPath(memberName_), nullptr, nullptr,
                   [self = shared_from_this(), epoch](ZkError err, std::optional<NodeStat> stat) {
                     if (epoch != self->epoch_ || err != ZkError::Ok) return;
                     if (stat && stat->ephemeralOwner == self->keeper_.sessionId()) {
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
  keeper_.existsOn(
      strand_, active_, nullptr, nullptr,
      [self = shared_from_this()](ZkError err, std::optional<NodeStat> stat) {
        if (err == ZkError::Ok && stat && stat->ephemeralOwner == self->keeper_.sessionId())
          self->removeUntilGone(self->active_, stat->version);
      });
}
}  // namespace zkagent::election::detail
