#include "zkagent/balance.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zkagent::balance {

BalancePlan planBalance(const std::map<std::string, size_t>& leading, size_t unplaced,
                        double tolerance, bool continuing) {
  BalancePlan plan;
  plan.agents = leading.size();
  if (plan.agents == 0) return plan;
  plan.accounts = unplaced;
  for (const auto& [agent, count] : leading) plan.accounts += count;
  plan.share = static_cast<double>(plan.accounts) / static_cast<double>(plan.agents);
  plan.threshold = std::max<size_t>(1, static_cast<size_t>(std::floor(tolerance * plan.share)));

  // The remainder goes to the agents leading most (ties by id): fewest moves.
  std::vector<std::pair<std::string, size_t>> byLoad(leading.begin(), leading.end());
  std::stable_sort(byLoad.begin(), byLoad.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t base = plan.accounts / plan.agents;
  size_t remainder = plan.accounts % plan.agents;
  for (const auto& [agent, count] : byLoad) {
    plan.target[agent] = base + (remainder > 0 ? 1 : 0);
    if (remainder > 0) --remainder;
  }

  std::vector<std::pair<std::string, size_t>> givers, receivers;  // id order (map order)
  for (const auto& [agent, count] : leading) {
    const size_t target = plan.target[agent];
    if (std::fabs(static_cast<double>(count) - plan.share) > static_cast<double>(plan.threshold))
      plan.imbalanced = true;
    if (count > target) {
      givers.emplace_back(agent, count - target);
      plan.excess += count - target;
    } else if (count < target) {
      receivers.emplace_back(agent, target - count);
    }
  }
  if (!plan.imbalanced && !continuing) return plan;
  size_t r = 0;
  for (auto& [giver, surplus] : givers) {
    while (surplus > 0 && r < receivers.size()) {
      auto& [receiver, deficit] = receivers[r];
      const size_t n = std::min(surplus, deficit);
      plan.transfers.push_back({giver, receiver, n});
      surplus -= n;
      deficit -= n;
      if (deficit == 0) ++r;
    }
  }
  return plan;
}

std::map<std::string, size_t> rowOf(const BalancePlan& plan, const std::string& self) {
  std::map<std::string, size_t> row;
  for (const auto& t : plan.transfers) {
    if (t.from == self) row[t.to] += t.count;
  }
  return row;
}

MoveState moveState(bool leading, const std::optional<std::string>& leader, std::string_view self,
                    std::chrono::steady_clock::duration age) {
  if (!leading && leader && *leader != self) return MoveState::Landed;
  if ((leading && age > kMoveTimeout) || age > kMoveForgotten) return MoveState::Over;
  return MoveState::InFlight;
}

}  // namespace zkagent::balance
