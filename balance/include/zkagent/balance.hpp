// The balance rule (docs/agent.md "Balance"): who gives how many of the things it leads to whom,
// for agents leading accounts and gateways owning shards alike. Pure and deterministic, so every
// member that sees the same counts computes the same plan and executes only its own row.
#pragma once

#include <cstddef>
#include <map>
#include <string>
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

}  // namespace zkagent::balance
