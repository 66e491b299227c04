// ZkSession: the create batcher: creates issued while earlier ones are being answered go out
// together in multis.
#include <boost/asio/post.hpp>

#include "multi_batches.hpp"
#include "zk_session.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

// Bytes of creates per multi: far below the server's 1 MiB request limit (jute.maxbuffer).
constexpr size_t kCreateBatchBytes = 64 * 1024;

}  // namespace

void ZkSession::createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                                std::function<void(ZkError, std::string)> done, std::string guard) {
  bool flushNow = false;
  {
    std::lock_guard lock(mu_);
    pendingCreates_.push_back(
        {std::move(ex), std::move(path), std::move(data), kind, std::move(done), std::move(guard)});
    flushNow = !flushPosted_ && createsInFlight_ == 0;
    flushPosted_ = flushPosted_ || flushNow;
  }
  if (flushNow) asio::post(strand_, [self = shared_from_this()] { self->flushCreates(); });
}

void ZkSession::whenCreatesIdle(Executor ex, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (flushPosted_ || createsInFlight_ > 0 || !pendingCreates_.empty()) {
      afterCreates_.emplace_back(std::move(ex), std::move(fn));
      return;
    }
  }
  asio::post(ex, std::move(fn));
}

// Nagle's rule: the first create goes out at once; those that arrive while batches are being
// answered wait for the next answer and go out together (in as many multis as their size needs,
// all pipelined), however they trickle in. When nothing is pending or in flight, the work deferred
// by whenCreatesIdle goes.
void ZkSession::flushCreates() {
  std::vector<std::vector<PendingCreate>> batches;
  std::vector<std::pair<Executor, std::function<void()>>> idle;
  {
    std::lock_guard lock(mu_);
    flushPosted_ = false;
    MultiBatches<PendingCreate> packer(kCreateBatchBytes);
    for (auto& c : pendingCreates_) {
      // + header, ACL, flags; a guard's check is its path and a header
      const size_t bytes =
          c.path.size() + c.data.size() + 64 + (c.guard.empty() ? 0 : c.guard.size() + 16);
      if (auto full = packer.add(std::move(c), bytes)) batches.push_back(std::move(*full));
    }
    if (!packer.empty()) batches.push_back(packer.take());
    pendingCreates_.clear();
    createsInFlight_ += batches.size();
    if (createsInFlight_ == 0) idle.swap(afterCreates_);
  }
  for (auto& [ex, fn] : idle) asio::post(ex, std::move(fn));
  for (auto& batch : batches) sendCreateBatch(std::move(batch));
}

// A batch was answered (on the session strand): send what accumulated meanwhile, or, when
// nothing is left anywhere, release the deferred work.
void ZkSession::createBatchAnswered() {
  {
    std::lock_guard lock(mu_);
    --createsInFlight_;
    if (pendingCreates_.empty() && createsInFlight_ > 0) return;
  }
  flushCreates();
}

// Answers each create on its own executor, then flushes the next batch (on the session strand).
void ZkSession::sendCreateBatch(std::vector<PendingCreate> creates) {
  if (creates.size() == 1) return sendCreateAlone(std::move(creates.front()), true);
  std::vector<MultiOp> ops;
  std::vector<size_t> createAt;  // index of each create's own op (its guard's check is before it)
  ops.reserve(2 * creates.size());
  createAt.reserve(creates.size());
  for (auto& c : creates) {
    if (!c.guard.empty()) ops.push_back({MultiOp::Kind::Check, c.guard, "", -1});
    createAt.push_back(ops.size());
    ops.push_back({MultiOp::Kind::Create, c.path, c.data, -1, c.kind});
  }
  const size_t opCount = ops.size();
  multiOn(strand_, std::move(ops),
          [self = shared_from_this(), creates = std::move(creates), createAt = std::move(createAt),
           opCount](ZkError err, std::vector<MultiResult> results) mutable {
            // No per-operation results when the client refused the multi outright (handle closed).
            const bool perOperation = results.size() == opCount;
            for (size_t i = 0; i < creates.size(); ++i) {
              auto& one = creates[i];
              const size_t at = createAt[i];
              // The create's own failure, unless its guard is what failed.
              std::optional<ZkError> failure;
              if (perOperation) failure = results[at].failure;
              if (perOperation && !one.guard.empty() && results[at - 1].failure) {
                failure = results[at - 1].failure;
              }
              const bool rolledBack =
                  err != ZkError::Ok && !linkLost(err) && perOperation && !failure;
              if (!rolledBack) {
                // Created, the link's fate, or this create is the one that failed.
                const ZkError mine =
                    err == ZkError::Ok || linkLost(err) || !perOperation ? err : *failure;
                std::string path = perOperation ? std::move(results[at].path) : std::string();
                asio::post(one.executor, [done = std::move(one.done), mine,
                                          path = std::move(path)] { done(mine, path); });
              } else {
                // Rolled back because another create failed: send it again on its own.
                self->sendCreateAlone(std::move(one), false);
              }
            }
            self->createBatchAnswered();
          });
}

void ZkSession::sendCreateAlone(PendingCreate c, bool ofBatch) {
  auto answer = [self = shared_from_this(), ex = std::move(c.executor), done = std::move(c.done),
                 ofBatch](ZkError err, std::string path) mutable {
    asio::post(ex, [done = std::move(done), err, path = std::move(path)] { done(err, path); });
    if (ofBatch) self->createBatchAnswered();
  };
  if (c.guard.empty()) {
    return createOn(strand_, std::move(c.path), std::move(c.data), c.kind, std::move(answer));
  }
  multiOn(strand_,
          {{MultiOp::Kind::Check, std::move(c.guard), "", -1},
           {MultiOp::Kind::Create, std::move(c.path), std::move(c.data), -1, c.kind}},
          [answer = std::move(answer)](ZkError err, std::vector<MultiResult> results) mutable {
            if (err == ZkError::Ok || results.size() != 2) {
              return answer(err, results.size() == 2 ? std::move(results[1].path) : "");
            }
            // The guard's failure (NoNode) wins; else the create's own error.
            const ZkError failure = results[0].failure.value_or(results[1].failure.value_or(err));
            answer(linkLost(err) ? err : failure, "");
          });
}

}  // namespace zkagent::election::detail
