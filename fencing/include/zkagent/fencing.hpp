// Fencing for the downstream of an elected leader: refuse what a replaced leader still sends.
//
// A leader elected through ZooKeeper can be paused or partitioned and keep sending after a
// successor took over. Every operation therefore carries a fencing token: the leader's
// sequence number (the seq of its members node, written into the account's `active` node).
// The TokenValidator here is what a downstream gateway uses to make such an old leader
// harmless:
//
//   * per account it keeps the highest token it has accepted, the high-water mark (HWM);
//     an operation is accepted iff token >= HWM, and acceptance raises the HWM;
//   * when the caller knows the account's current `active` node (a watched ZooKeeper cache),
//     it also requires token == active seq (and the holder's instance and session): a paused
//     old leader is refused as soon as a successor exists, and a forged future token is refused;
//   * without that view, the instance and session that wrote under the HWM's token hold it: at
//     token == HWM nobody else passes (a token is readable by anyone who can read ZooKeeper);
//   * if ZooKeeper's active seq is below the HWM (the members node was recreated and its
//     counter restarted), the account fails closed until an operator resets its HWM;
//   * an operation retried with the same opId gets the first answer and is not applied twice;
//   * a write that has no opId (a presence lease) is decided by the same rule through admit():
//     accepted, it raises the HWM like an operation, logging only a raise or a new holder;
//   * with a data directory, every accepted operation, fence and reset is in an fsynced
//     append-only log before the call returns (concurrent callers share one fsync).
//
// This library knows neither ZooKeeper nor HTTP: the gateway passes what its ZooKeeper cache
// says as an ActiveView and maps Decisions to HTTP answers (toJson gives the response body).
// docs/fencing.md describes the on-disk format, recovery, compaction and the guarantees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zkagent::fencing {

// ---------------------------------------------------------------------------------------------
// Wire form

// Who sends: the account, the leader's seq as token, and which instance/session holds it.
struct FencingToken {
  std::string account;
  std::uint64_t token = 0;
  std::string instanceId;
  std::int64_t sessionId = 0;  // ZooKeeper session ids are signed 64-bit
  bool operator==(const FencingToken&) const = default;
};

// One operation as the agent forwards it (the body of the gateway's POST /v1/ops):
// {"account","token","instanceId","sessionId","opId","payload"}. The payload is any JSON value
// (optional, null when absent); it is kept as compact JSON text.
struct Operation {
  FencingToken fencing;
  std::string opId;
  std::string payload = "null";
  bool operator==(const Operation&) const = default;
};

// Inputs larger than this are refused by the parser; a gateway answers 413 before parsing.
inline constexpr std::size_t kMaxOperationBytes = 64 * 1024;

// Thrown for every malformed input; the message names the field and what is expected.
class BadRequest : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Throws BadRequest "<field>: <problem>", the shape of every bad-body message the gateway sends.
[[noreturn]] void failField(std::string_view field, std::string_view problem);

// Throws BadRequest naming field 'account' and the account-id rule (zkagent/naming.hpp).
void requireValidAccountId(std::string_view account);

// Parsing checks everything validateOperation checks; unknown fields are ignored.
Operation parseOperation(std::string_view json);        // throws BadRequest
FencingToken parseFencingToken(std::string_view json);  // throws BadRequest
// A sessionId as the wire carries it (a JSON integer that fits int64_t); nullopt otherwise.
inline constexpr const char* kSessionIdRule = "must be a 64-bit signed integer";
std::optional<std::int64_t> sessionIdFrom(const nlohmann::json& value);
// Valid account id and instanceId (see validateOperation). Throws BadRequest.
void validateFencingToken(const FencingToken& token);
// For operations built in code: valid account id, opId and instanceId of 1 to 128 printable
// ASCII characters without spaces, payload within kMaxOperationBytes. Throws BadRequest.
void validateOperation(const Operation& operation);
nlohmann::json toJson(const FencingToken& token);
nlohmann::json toJson(const Operation& operation);

// ---------------------------------------------------------------------------------------------
// Decisions

// What the caller's ZooKeeper cache says about the account's `active` node right now.
struct ActiveView {
  enum class State : std::uint8_t {
    unknown,  // no trustworthy cache (not configured, or ZooKeeper unreachable): HWM only
    absent,   // no active node: nobody leads, every operation is refused
    present,  // active node with this seq: only that token is accepted
  };
  State state = State::unknown;
  std::uint64_t seq = 0;
  // Who holds it, when known: then an operation must also come from that instance and session
  // (a token is readable by anyone who can read ZooKeeper; the holder's session is not forgeable
  // by an agent whose certificate names another instance). Empty: the seq alone decides.
  std::string instanceId{};
  std::int64_t sessionId = 0;
  // Read from a watched cache rather than after a ZooKeeper `sync`: a server behind the quorum's
  // leader may serve it late, so it may only lag. It decides every operation, but never fences an
  // account: a cached seq below the HWM is refused with `confirmFirst` (Decision) instead, and the
  // caller decides again on a view read after a sync.
  bool cached = false;

  static ActiveView unknown() { return {}; }
  static ActiveView absent() { return {State::absent, 0}; }
  static ActiveView present(std::uint64_t activeSeq) { return {State::present, activeSeq}; }
  static ActiveView heldBy(std::uint64_t activeSeq, std::string instance, std::int64_t session) {
    return {State::present, activeSeq, std::move(instance), session};
  }
};

enum class Verdict : std::uint8_t {
  accepted,
  stale_token,         // token < HWM
  not_current_leader,  // token != seq of the current active node (or no active node)
  account_fenced,      // account fails closed (ZooKeeper's active seq fell below the HWM)
};
std::string_view reasonCode(Verdict verdict);  // "accepted", "stale_token", ...

struct Decision {
  Verdict verdict = Verdict::accepted;
  std::uint64_t hwm = 0;  // the account's HWM after this decision
  bool replayed = false;  // answer of an earlier operation with the same opId
  std::string detail;     // human-readable why, for logs and error bodies; a fence's detail
                          // starts with "hwm_ahead_of_zookeeper"
  // A refusal that is final for this token: a newer leader exists (the HWM or the active seq is
  // above it), another holder holds it, or the account is fenced. False for a view that may only
  // lag (no active node seen yet, an active seq below the token): the writer may try again.
  bool superseded = false;
  // Refused only because a cached view (ActiveView::cached) showed a seq below the HWM, which
  // would have fenced the account: nothing was applied; decide again on a confirmed view.
  bool confirmFirst = false;

  bool accepted() const { return verdict == Verdict::accepted; }
};

// {"accepted":true,"hwm":N} or {"accepted":false,"reason":"stale_token","hwm":N,"detail":...}
nlohmann::json toJson(const Decision& decision);

// One write without an opId to decide (admit): who writes, and what ZooKeeper says now.
struct FencedWrite {
  FencingToken fencing;
  ActiveView active = ActiveView::unknown();
};

struct AccountStatus {
  std::uint64_t hwm = 0;
  std::uint64_t accepted = 0;  // operations, since the account was first seen (durable)
  std::uint64_t rejected = 0;  // operations and writes, since this process started (not logged)
  bool fenced = false;
  std::uint64_t fencedAtActiveSeq = 0;  // the active seq that was found below the HWM
};

// ---------------------------------------------------------------------------------------------
// The validator

enum class CommitMode : std::uint8_t {
  group,          // concurrent submitters share one write + fdatasync (the default)
  per_operation,  // one fdatasync per record: the benchmark baseline
};

struct ValidatorOptions {
  std::filesystem::path dataDir;  // empty: memory only, nothing survives the process
  CommitMode commitMode = CommitMode::group;
  std::size_t rememberedOpsPerAccount = 1024;        // opIds kept for retries (last N accepted)
  std::uint64_t compactAfterLogBytes = 64ULL << 20;  // compact beyond this log size; 0: never
};

// What start-up found on disk.
struct RecoveryReport {
  std::uint64_t snapshotAccounts = 0;
  std::uint64_t replayedRecords = 0;
  std::uint64_t truncatedBytes = 0;  // torn or corrupt tail cut off the log
  std::string truncationReason;      // empty when nothing was cut
};

// Counters of the log since start-up (for metrics): recordsWritten / syncs is the group-commit
// batch size.
struct CommitStats {
  std::uint64_t recordsWritten = 0;
  std::uint64_t syncs = 0;
  std::uint64_t compactions = 0;
};

// The disk failed (write/fsync error, or the data directory is unusable). After a write error
// the validator refuses everything until recoverStorage() (or a restart) brings it back.
class StorageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thread-safe. Opening a data directory recovers its state and takes an exclusive lock on it
// (a second validator on the same directory throws StorageError). Writes to spdlog's default
// logger: a warning when an account gets fenced, a HWM is reset or a torn log tail is cut, an
// error when the disk fails.
class TokenValidator {
 public:
  explicit TokenValidator(ValidatorOptions options = {});
  ~TokenValidator();  // flushes what is in flight
  TokenValidator(const TokenValidator&) = delete;
  TokenValidator& operator=(const TokenValidator&) = delete;

  // Decides and, for accepted operations, logs before returning. Every answer only reflects
  // state that is on disk. Throws BadRequest for an invalid operation, StorageError on I/O.
  Decision submit(const Operation& operation, const ActiveView& active = ActiveView::unknown());

  // Decides writes that carry a fencing token but no opId (presence leases), one Decision each in
  // order, by submit's rule without the opId replay. An accepted token above the HWM raises it
  // (or, at an HWM whose holder is unknown, claims it): one log record, and every record of the
  // call shares one commit. A write by the holder at the HWM logs nothing. Throws BadRequest for
  // an invalid token (nothing decided), StorageError on I/O.
  std::vector<Decision> admit(std::span<const FencedWrite> writes);

  // Operator action: sets the account's HWM (lower or higher) and lifts a fence; logged
  // durably with who and why. Returns the status after the reset.
  AccountStatus resetHighWaterMark(std::string_view account, std::uint64_t hwm,
                                   std::string_view actor, std::string_view reason);

  std::optional<AccountStatus> status(std::string_view account) const;
  std::vector<std::string> fencedAccounts() const;

  // Writes a snapshot and starts a new log now (it also happens by itself past
  // compactAfterLogBytes). No-op in memory-only mode.
  void compact();

  // After a storage failure (a full disk, a failed fsync): cuts the log back to what was last made
  // durable, reloads the state from disk (the decisions refused with StorageError are not in it)
  // and resumes. True when working (at once if nothing failed); false while the disk still
  // refuses, or after a failed compaction, which only a restart recovers from.
  bool recoverStorage();

  const RecoveryReport& recovery() const;
  CommitStats commitStats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Reading the log (operators, tests): accepted operations still in the log of dataDir, in
// order, excluding those already folded into a snapshot. Read-only; stops at a torn tail.
// Throws StorageError if dataDir is missing or its snapshot is corrupt.
struct LoggedOperation {
  Operation operation;
  std::uint64_t hwm = 0;  // the HWM answered
};
std::vector<LoggedOperation> readLoggedOperations(const std::filesystem::path& dataDir);

}  // namespace zkagent::fencing
