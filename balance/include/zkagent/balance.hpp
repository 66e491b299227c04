// The balance rule (docs/agent.md "Balance"): who gives how many of the things it leads to whom,
// for agents leading accounts and gateways owning shards alike. Pure and deterministic, so every
// member that sees the same counts computes the same plan and executes only its own row.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zkagent::balance {

struct BalanceTransfer {
  std::string from, to;
  size_t count = 0;
};

struct BalancePlan {
  size_t accounts = 0;                   // K: accounts led by the agents counted
  size_t agents = 0;                     // M: schedulable agents
  double share = 0;                      // K / M
  size_t threshold = 0;                  // max(1, tolerance * share), rounded down
  std::map<std::string, size_t> target;  // integer targets, summing to K
  bool imbalanced = false;               // an agent's count is outside share +- threshold
  size_t excess = 0;                     // sum of (count - target) over agents above target
  // Excess to deficit, givers and receivers each in id order (north-west corner): executing any
  // part of it and planning again from the new counts gives the rest of the same plan, so two
  // givers never both fill one receiver.
  std::vector<BalanceTransfer> transfers;
};

// `leading`: every schedulable agent with the number of balanced accounts it leads (0 included);
// `unplaced`: balanced accounts with no leader seen yet. They count in K (so an agent whose view
// misses some leaders still computes the same targets; its own count is always exact) but belong
// to nobody. Transfers are planned when the counts are imbalanced, or when `continuing` (a giver
// that started for this membership goes on down to its target, so the band is not a stopping
// point that needs another round later).
BalancePlan planBalance(const std::map<std::string, size_t>& leading, size_t unplaced,
                        double tolerance, bool continuing);

// What `self` gives, by receiver (empty when it gives nothing).
std::map<std::string, size_t> rowOf(const BalancePlan& plan, const std::string& self);

// ---- Carrying a row out: one handover per account or shard (queue jump, then a resign).

// Where a handover's receiver stands in the giver's queue: its member seq, and the members
// queued between the giver and it, which step back first (ElectionGroup::jumpQueue).
struct QueueJump {
  std::string to;
  int64_t receiverSeq = -1;
  std::vector<int64_t> ahead;
};

// The first member of `queue` (sorted by seq, with `instanceId` and `seq`; the giver `self`
// skipped) that `receives` accepts. nullopt when none does, or when a member `jumpable` refuses
// stands before it: only electors of our own kind are stepped back.
template <class Member, class Receives, class Jumpable>
std::optional<QueueJump> jumpTo(const std::vector<Member>& queue, std::string_view self,
                                Receives&& receives, Jumpable&& jumpable) {
  QueueJump jump;
  for (const Member& member : queue) {
    if (member.instanceId == self) continue;
    if (receives(member.instanceId)) {
      jump.to = member.instanceId;
      jump.receiverSeq = member.seq;
      return jump;
    }
    if (!jumpable(member.instanceId)) return std::nullopt;
    jump.ahead.push_back(member.seq);
  }
  return std::nullopt;
}

// A move counts for its receiver until the giver sees the new leader; still leading after
// kMoveTimeout it has failed, and one not seen landing after kMoveForgotten is forgotten (the
// account or shard is unplaced until its leader is seen). While not seen, the giver reads
// `active` itself every kLandingRead: its own candidate, at the back now, may see it late.
inline constexpr std::chrono::milliseconds kMoveTimeout{5000};
inline constexpr std::chrono::milliseconds kMoveForgotten{30000};
inline constexpr std::chrono::milliseconds kLandingRead{200};

enum class MoveState { InFlight, Landed, Over };
// `leading`: the giver still leads it; `leader`: the leader the giver sees, if any.
MoveState moveState(bool leading, const std::optional<std::string>& leader, std::string_view self,
                    std::chrono::steady_clock::duration age);

}  // namespace zkagent::balance
