// Elector: release: the operations that hand an account over, resign, and deletes retried until
// the node is gone.
#include <nlohmann/json.hpp>

#include "elector.hpp"

namespace zkagent::election::detail {

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
  ops.push_back({MultiOp::Kind::Remove, memberPath(memberName_), "", -1});
  ops.push_back({MultiOp::Kind::Remove, active_, "", activeVersion_});
  return ops;
}

// Gate first (closed by the role change already), then one multi writing the handover record and
// deleting our member and `active`, so the successor's watch fires at once and nothing can
// half-succeed.
void Elector::releaseLeadership(LossReason reason, bool standAgain, std::function<void()> done) {
  reportLoss(reason);
  auto ops = releaseOps(reason);
  forgetMember();
  keeper_.multiOn(strand_, ops,
                  [self = shared_from_this(), ops, standAgain, done = std::move(done)](
                      ZkError err, const std::vector<MultiResult>&) {
                    if (err != ZkError::Ok) {
                      // Partly gone already, the record's node deleted, or the reply lost: delete
                      // each until gone (CURATOR-202), never leave a node that blocks the queue.
                      const auto& [record, member, active] = std::tie(ops[0], ops[1], ops[2]);
                      self->keeper_.setOn(self->strand_, record.path, record.data, -1,
                                          [](ZkError, NodeStat) {});
                      self->removeUntilGone(member.path, member.version);
                      self->removeUntilGone(active.path, active.version);
                    }
                    if (standAgain && self->standing_) self->registerMember();
                    done();
                  });
}

void Elector::removeUntilGone(std::string path, int32_t version) {
  const int64_t session = keeper_.sessionId();
  keeper_.removeOn(strand_, path, version,
                   [self = shared_from_this(), path, version, session](ZkError err) {
                     if (retryable(err) && session == self->keeper_.sessionId()) {
                       self->pendingRemovals_.push_back({path, version});
                     }
                   });
}

void Elector::retryRemovals() {
  auto pending = std::move(pendingRemovals_);
  pendingRemovals_.clear();
  for (auto& [path, version] : pending) removeUntilGone(path, version);
}
}  // namespace zkagent::election::detail
