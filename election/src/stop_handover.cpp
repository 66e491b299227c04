#include "stop_handover.hpp"

#include <boost/asio/post.hpp>

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

// Bytes of operations per multi: far below the server's 1 MiB request limit (jute.maxbuffer),
// large enough that a thousand accounts go in a handful of requests.
constexpr size_t kReleaseBatchBytes = 16 * 1024;

// Request bytes of one account's hand-over operations (+ header and version per operation).
size_t releaseBytes(const std::vector<MultiOp>& ops) {
  size_t size = 0;
  for (const auto& op : ops) size += op.path.size() + op.data.size() + 32;
  return size;
}

}  // namespace

StopHandover::StopHandover(asio::io_context& io, std::shared_ptr<Keeper> keeper, size_t electors,
                           std::function<void()> closeSession)
    : keeper_(std::move(keeper)),
      strand_(asio::make_strand(io)),
      deadline_(strand_),
      closeSession_(std::move(closeSession)),
      unanswered_(electors),
      batch_(kReleaseBatchBytes) {}

std::shared_ptr<StopHandover> StopHandover::start(asio::io_context& io,
                                                  std::shared_ptr<Keeper> keeper, size_t electors,
                                                  std::chrono::milliseconds deadline,
                                                  std::function<void()> closeSession) {
  auto self =
      std::make_shared<StopHandover>(io, std::move(keeper), electors, std::move(closeSession));
  self->deadline_.expires_after(deadline);
  self->deadline_.async_wait([self](boost::system::error_code ec) {
    if (!ec) self->closeIf(true);
  });
  if (electors == 0) asio::post(self->strand_, [self] { self->closeIf(false); });
  return self;
}

void StopHandover::collect(std::vector<MultiOp> ops) {
  std::vector<Batch> ready;
  {
    std::lock_guard lock(mu_);
    if (!ops.empty()) {
      const size_t size = releaseBytes(ops);
      if (auto full = batch_.add(std::move(ops), size)) ready.push_back(std::move(*full));
    }
    if (--unanswered_ == 0 && !batch_.empty()) ready.push_back(batch_.take());
    inFlight_ += ready.size();
  }
  for (auto& batch : ready) send(std::move(batch));
  closeIf(false);
}

void StopHandover::send(Batch batch) {
  std::vector<MultiOp> flat;
  for (auto& ops : batch) flat.insert(flat.end(), ops.begin(), ops.end());
  keeper_->multiOn(strand_, std::move(flat),
                   [self = shared_from_this(), batch = std::move(batch)](
                       ZkError err, const std::vector<MultiResult>&) {
                     bool retry = false;
                     {
                       std::lock_guard lock(self->mu_);
                       retry = err != ZkError::Ok && !retryable(err) && !self->closed_;
                       if (retry) self->inFlight_ += batch.size();
                     }
                     if (retry) {
                       // One account's node was not as expected: hand the others over one multi
                       // each; the close removes whatever is left.
                       for (auto& ops : batch) {
                         self->keeper_->multiOn(self->strand_, ops,
                                                [self](ZkError, const std::vector<MultiResult>&) {
                                                  self->answered();
                                                });
                       }
                     }
                     self->answered();
                   });
}

void StopHandover::answered() {
  {
    std::lock_guard lock(mu_);
    --inFlight_;
  }
  closeIf(false);
}

void StopHandover::closeIf(bool force) {
  {
    std::lock_guard lock(mu_);
    const bool allAnswered = unanswered_ == 0 && inFlight_ == 0;
    if (closed_ || !(allAnswered || force)) return;
    closed_ = true;
  }
  // The timer belongs to the strand (it may be firing there right now).
  asio::post(strand_, [self = shared_from_this()] { self->deadline_.cancel(); });
  closeSession_();
}

}  // namespace zkagent::election::detail
