// TokenValidator: serialises the rules under one mutex and, with a data directory, hands each
// event to a committer thread that writes and fdatasyncs whatever queued up meanwhile (group
// commit). Callers wait until the log covers every record up to the one their answer depends on.
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "journal.hpp"
#include "rules.hpp"

namespace zkagent::fencing {

struct TokenValidator::Impl {
  explicit Impl(ValidatorOptions validatorOptions);
  ~Impl();

  // Queues `event` (already applied) and waits until it and every earlier record are durable.
  // Without an event it still waits for earlier records: no answer reveals undurable state.
  void logAndWait(std::unique_lock<std::mutex>& lock, const std::optional<detail::Event>& event);
  void queue(const detail::Event& event);
  void waitDurable(std::unique_lock<std::mutex>& lock);
  void throwIfFailed() const;
  void fail(std::string error);
  void commitLoop();
  void openJournal(RecoveryReport& into);

  const ValidatorOptions options;
  mutable std::mutex mutex;
  std::condition_variable workReady;  // committer: records queued, compaction asked, stopping
  std::condition_variable progress;   // submitters: durable LSN or compactions advanced, failure
  detail::Rules rules;
  RecoveryReport report;
  // Null in memory-only mode, and while a recovery could not open it again (failure is set).
  std::unique_ptr<detail::Journal> journal;
  std::deque<std::string> queued;  // encoded records not yet handed to the committer
  std::uint64_t appendedLsn = 0;   // records ever queued
  std::uint64_t durableLsn = 0;    // records known to be on disk
  std::uint64_t compactionsRequested = 0;
  std::uint64_t compactionsDone = 0;
  CommitStats stats;
  std::string failure;  // first storage error; from then on everything is refused
  // Storage failures so far: a wait that began before one never succeeds, even if the validator
  // recovered meanwhile (its record was cut from the log).
  std::uint64_t failures = 0;
  bool compactionFailed = false;  // only a restart recovers from a half-done rotation
  bool stopping = false;
  std::thread committer;
};

TokenValidator::Impl::Impl(ValidatorOptions validatorOptions)
    : options(std::move(validatorOptions)), rules(options.rememberedOpsPerAccount) {
  if (options.dataDir.empty()) return;
  openJournal(report);
  committer = std::thread([this] { commitLoop(); });
}

// Loads the state on disk into `rules` (which must be empty) and opens the log for appending.
void TokenValidator::Impl::openJournal(RecoveryReport& into) {
  journal = std::make_unique<detail::Journal>(
      options.dataDir,
      [this](detail::AccountSnapshot&& account) { rules.restore(std::move(account)); },
      [this](detail::Event&& event) { rules.apply(event); }, into);
  if (into.truncatedBytes > 0) {
    spdlog::warn("fencing log recovery cut a torn tail dir={} bytes={} reason={}",
                 options.dataDir.string(), into.truncatedBytes, into.truncationReason);
  }
  spdlog::info("fencing store opened dir={} snapshotAccounts={} replayedRecords={}",
               options.dataDir.string(), into.snapshotAccounts, into.replayedRecords);
}

void TokenValidator::Impl::fail(std::string error) {
  spdlog::error("fencing store failed, refusing every operation until it recovers dir={} error={}",
                options.dataDir.string(), error);
  failure = std::move(error);
  ++failures;
  progress.notify_all();
}

TokenValidator::Impl::~Impl() {
  if (!committer.joinable()) return;
  {
    const std::lock_guard lock(mutex);
    stopping = true;
  }
  workReady.notify_one();
  committer.join();
}

void TokenValidator::Impl::throwIfFailed() const {
  if (!failure.empty()) throw StorageError("fencing store failed earlier: " + failure);
}

void TokenValidator::Impl::logAndWait(std::unique_lock<std::mutex>& lock,
                                      const std::optional<detail::Event>& event) {
  if (event) queue(*event);
  waitDurable(lock);
}

void TokenValidator::Impl::queue(const detail::Event& event) {
  if (!journal) return;
  queued.push_back(detail::encodeEvent(event));
  ++appendedLsn;
  workReady.notify_one();
}

void TokenValidator::Impl::waitDurable(std::unique_lock<std::mutex>& lock) {
  if (!journal) return;
  const std::uint64_t needed = appendedLsn;
  const std::uint64_t failuresBefore = failures;
  progress.wait(lock, [&] { return durableLsn >= needed || failures != failuresBefore; });
  if (failures != failuresBefore) {
    throw StorageError("fencing store failed: " + (failure.empty() ? "recovered since" : failure));
  }
}

namespace {

void warnIfFenced(const std::optional<detail::Event>& event) {
  if (!event || !std::holds_alternative<detail::AccountFenced>(*event)) return;
  const auto& fenced = std::get<detail::AccountFenced>(*event);
  spdlog::warn("account fenced account={} activeSeq={} hwm={} reason=hwm_ahead_of_zookeeper",
               fenced.account, fenced.activeSeq, fenced.hwm);
}

}  // namespace

void TokenValidator::Impl::commitLoop() {
  std::unique_lock lock(mutex);
  for (;;) {
    workReady.wait(lock, [&] {
      return stopping || !queued.empty() || compactionsRequested > compactionsDone;
    });
    const std::uint64_t compactionsServed = compactionsRequested;
    const bool compactNow =
        compactionsServed > compactionsDone ||
        (options.compactAfterLogBytes > 0 && journal->logBytes() >= options.compactAfterLogBytes);
    if (queued.empty() && !compactNow) return;  // stopping, nothing left to write
    // A compaction takes everything queued so that its snapshot matches the log exactly.
    const bool takeAll = options.commitMode == CommitMode::group || compactNow;
    const std::size_t count = takeAll ? queued.size() : 1;
    std::string batch;
    for (std::size_t i = 0; i < count; ++i) {
      batch += queued.front();
      queued.pop_front();
    }
    const std::uint64_t batchLsn = appendedLsn - queued.size();
    std::vector<detail::AccountSnapshot> state;
    if (compactNow) state = rules.snapshot();

    lock.unlock();
    std::string error;
    bool rotating = false;
    try {
      if (!batch.empty()) journal->appendDurably(batch);
      rotating = compactNow;
      if (compactNow) journal->rotate(state);
    } catch (const std::exception& exception) {
      error = exception.what();
    }
    lock.lock();

    if (!error.empty()) {
      compactionFailed = rotating;
      fail(std::move(error));
      return;
    }
    if (!batch.empty()) {
      stats.recordsWritten += count;
      ++stats.syncs;
    }
    durableLsn = batchLsn;
    if (compactNow) {
      compactionsDone = compactionsServed;
      ++stats.compactions;
    }
    progress.notify_all();
  }
}

TokenValidator::TokenValidator(ValidatorOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

TokenValidator::~TokenValidator() = default;

Decision TokenValidator::submit(const Operation& operation, const ActiveView& active) {
  validateOperation(operation);
  std::unique_lock lock(impl_->mutex);
  impl_->throwIfFailed();
  detail::Outcome outcome = impl_->rules.submit(operation, active);
  impl_->logAndWait(lock, outcome.event);
  lock.unlock();
  warnIfFenced(outcome.event);
  return std::move(outcome.decision);
}

std::vector<Decision> TokenValidator::admit(std::span<const FencedWrite> writes) {
  for (const FencedWrite& write : writes) validateFencingToken(write.fencing);
  std::vector<detail::Outcome> outcomes;
  outcomes.reserve(writes.size());
  std::unique_lock lock(impl_->mutex);
  impl_->throwIfFailed();
  // Every record of the batch is queued before the one wait: they share the committer's fsync.
  for (const FencedWrite& write : writes) {
    outcomes.push_back(impl_->rules.admit(write.fencing, write.active));
    if (outcomes.back().event) impl_->queue(*outcomes.back().event);
  }
  impl_->waitDurable(lock);
  lock.unlock();
  std::vector<Decision> decisions;
  decisions.reserve(outcomes.size());
  for (detail::Outcome& outcome : outcomes) {
    warnIfFenced(outcome.event);
    decisions.push_back(std::move(outcome.decision));
  }
  return decisions;
}

AccountStatus TokenValidator::resetHighWaterMark(std::string_view account, std::uint64_t hwm,
                                                 std::string_view actor, std::string_view reason) {
  requireValidAccountId(account);
  if (actor.empty()) throw BadRequest("a HWM reset must name the operator (actor)");
  std::unique_lock lock(impl_->mutex);
  impl_->throwIfFailed();
  const std::uint64_t previousHwm = impl_->rules.status(account).value_or(AccountStatus{}).hwm;
  impl_->logAndWait(lock, impl_->rules.reset(account, hwm, actor, reason));
  const AccountStatus after = *impl_->rules.status(account);
  lock.unlock();
  spdlog::warn("hwm reset account={} previousHwm={} hwm={} actor={} reason={}", account,
               previousHwm, hwm, actor, reason);
  return after;
}

std::optional<AccountStatus> TokenValidator::status(std::string_view account) const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->rules.status(account);
}

std::vector<std::string> TokenValidator::fencedAccounts() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->rules.fencedAccounts();
}

void TokenValidator::compact() {
  if (impl_->options.dataDir.empty()) return;
  std::unique_lock lock(impl_->mutex);
  impl_->throwIfFailed();
  const std::uint64_t ticket = ++impl_->compactionsRequested;
  impl_->workReady.notify_one();
  const std::uint64_t failuresBefore = impl_->failures;
  impl_->progress.wait(
      lock, [&] { return impl_->compactionsDone >= ticket || impl_->failures != failuresBefore; });
  if (impl_->compactionsDone < ticket)
    throw StorageError("fencing store failed: " + impl_->failure);
}

bool TokenValidator::recoverStorage() {
  std::unique_lock lock(impl_->mutex);
  Impl& impl = *impl_;
  if (impl.failure.empty()) return true;
  if (impl.compactionFailed) return false;
  // The committer stopped at the failure; every waiter has been told, and new calls are refused.
  if (impl.committer.joinable()) impl.committer.join();
  try {
    if (impl.journal) {  // null when an earlier attempt cut the log but could not open it again
      impl.journal->truncateToDurable();
      impl.journal.reset();  // closes the log and unlocks the directory, to be opened again now
    }
    impl.rules = detail::Rules(impl.options.rememberedOpsPerAccount);
    RecoveryReport reopened;
    impl.openJournal(reopened);
  } catch (const std::exception& error) {
    spdlog::warn("fencing store still failing dir={} error={}", impl.options.dataDir.string(),
                 error.what());
    return false;
  }
  // The records queued or written since the last durable one were refused to their callers and
  // are not on disk: the state was reloaded without them.
  impl.queued.clear();
  impl.durableLsn = impl.appendedLsn;
  impl.compactionsDone = impl.compactionsRequested;
  impl.failure.clear();
  impl.committer = std::thread([&impl] { impl.commitLoop(); });
  spdlog::warn("fencing store recovered dir={}", impl.options.dataDir.string());
  return true;
}

const RecoveryReport& TokenValidator::recovery() const { return impl_->report; }

CommitStats TokenValidator::commitStats() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace zkagent::fencing
