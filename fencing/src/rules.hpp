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
using Event = std::variant<AcceptedOp, AccountFenced, HwmReset>;

// One account's durable state, as a snapshot stores it. recentOps is oldest first.
struct AccountSnapshot {
  std::string account;
  std::uint64_t hwm = 0;
  std::uint64_t accepted = 0;
  bool fenced = false;
  std::uint64_t fencedAtActiveSeq = 0;
  std::vector<std::pair<std::string, std::uint64_t>> recentOps;  // opId -> answered HWM
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
  struct Account {
    AccountStatus status;
    RecentOps recent;
  };
  void remember(RecentOps& recent, const std::string& opId, std::uint64_t hwm) const;

  std::size_t rememberedOps_;
  std::unordered_map<std::string, Account, StringHash, std::equal_to<>> accounts_;
};

}  // namespace zkagent::fencing::detail
