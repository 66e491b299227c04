// The fencing rules and the per-account state they work on. Not thread-safe and no I/O: the
// TokenValidator serialises calls and logs the events these rules produce.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>
#include <zkagent/fencing.hpp>

namespace zkagent::fencing::detail {

// Events: everything that changes durable state. Each is one log record.
struct AcceptedOp {
  Operation operation;
  std::uint64_t hwm = 0;  // the HWM after acceptance, answered to retries
};
// A write without an opId (a presence lease) accepted above the HWM, or the first one at an HWM
// whose holder is unknown: the HWM and who holds it.
struct HwmRaised {
  std::string account;
  std::uint64_t hwm = 0;
  std::string instanceId;
  std::int64_t sessionId = 0;
};
struct AccountFenced {
  std::string account;
  std::uint64_t activeSeq = 0;
  std::uint64_t hwm = 0;
  std::int64_t unixMillis = 0;
};
struct HwmReset {
  std::string account;
  std::uint64_t hwm = 0;
  std::string actor;
  std::string reason;
  std::int64_t unixMillis = 0;
};
using Event = std::variant<AcceptedOp, AccountFenced, HwmReset, HwmRaised>;

// One account's durable state, as a snapshot stores it. recentOps is oldest first.
struct AccountSnapshot {
  std::string account;
  std::uint64_t hwm = 0;
  std::uint64_t accepted = 0;
  bool fenced = false;
  std::uint64_t fencedAtActiveSeq = 0;
  std::vector<std::pair<std::string, std::uint64_t>> recentOps;  // opId -> answered HWM
  std::string holderInstance;  // who holds the HWM; empty: unknown (after a reset)
  std::int64_t holderSession = 0;
};

struct Outcome {
  Decision decision;
  std::optional<Event> event;  // already applied; the caller must log it before answering
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const {
    return std::hash<std::string_view>{}(text);
  }
};

class Rules {
 public:
  explicit Rules(std::size_t rememberedOpsPerAccount);

  Outcome submit(const Operation& operation, const ActiveView& active);
  // A write with no opId, by the same rule as an operation; the event, if any, is a HwmRaised.
  Outcome admit(const FencingToken& fencing, const ActiveView& active);
  // Operator reset: sets the HWM and lifts a fence. Returns the applied event to log.
  HwmReset reset(std::string_view account, std::uint64_t hwm, std::string_view actor,
                 std::string_view reason);
  void apply(const Event& event);  // also used to replay the log
  void restore(AccountSnapshot snapshot);

  std::optional<AccountStatus> status(std::string_view account) const;
  std::vector<std::string> fencedAccounts() const;
  std::vector<AccountSnapshot> snapshot() const;

 private:
  // The last N accepted opIds in acceptance order (FIFO rather than LRU so that replaying the
  // log rebuilds exactly the same window).
  struct RecentOps {
    std::unordered_map<std::string, std::uint64_t, StringHash, std::equal_to<>> hwmByOpId;
    std::deque<std::string> order;
  };
  // Who wrote under the HWM's token: at token == HWM only that instance and session pass.
  struct Holder {
    std::string instanceId;  // empty: unknown, the first accepted write claims it
    std::int64_t sessionId = 0;
  };
  struct Account {
    AccountStatus status;
    RecentOps recent;
    Holder holder;
  };
  // The fencing rule, for operations and lease writes alike: a rejection (which may fence the
  // account, the only state it changes), or nullopt when `fencing` may write.
  std::optional<Outcome> refusal(const FencingToken& fencing, const ActiveView& active,
                                 Account* account);
  static void raise(Account& account, std::uint64_t hwm, const std::string& instanceId,
                    std::int64_t sessionId);
  void remember(RecentOps& recent, const std::string& opId, std::uint64_t hwm) const;

  std::size_t rememberedOps_;
  std::unordered_map<std::string, Account, StringHash, std::equal_to<>> accounts_;
};

}  // namespace zkagent::fencing::detail
