// The agent's balance pass (docs/agent.md, "Balance"): after every placement pass, count who
// leads each account, plan with the schedulable agents once membership has settled (balance/
// holds the pure plan), and hand this agent's share of the plan over: queue jump, then a resign
// with reason rebalance, a few moves at a time. Runs on the control strand.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent_impl.hpp"

namespace zkagent::agent {

namespace {
// Member lists read at once for choosing what to give, beyond the moves that can start.
constexpr size_t kSpareLookups = 8;
}  // namespace

// Only schedulable agents count: the same rule that lets an agent lead at all.
std::vector<std::string> Agent::Impl::schedulableAgents(Clock::time_point now,
                                                        bool selfSchedulable) {
  std::vector<std::string> agents;
  for (auto it = balance.standing.begin(); it != balance.standing.end();) {
    const auto& id = *it;
    if (id == config.instanceId) {
      ++it;
    } else if (!schedulingBlocks(tracker.judge(id, now, config.health.ttl)).empty()) {
      it = balance.standing.erase(it);  // back in once seen standing again
    } else {
      agents.push_back(*it++);
    }
  }
  if (selfSchedulable) agents.push_back(config.instanceId);
  std::sort(agents.begin(), agents.end());
  return agents;
}

// Control strand, after every placement pass. Counts who leads each account (as last seen),
// plans with every other agent's counts the same way, and starts this agent's own row of the plan.
void Agent::Impl::rebalance(
    const std::map<std::string, election::AccountStatus, std::less<>>& status,
    Clock::time_point now, bool selfSchedulable) {
  std::vector<detail::BalanceMove> picks;
  std::vector<std::string> lookups, landingReads;
  std::optional<std::string> probe;
  {
    std::lock_guard lock(mu);
    auto& b = balance;
    for (const auto& [account, s] : status) {
      if (s.role == Role::Leader) {
        b.lastLeader[account] = config.instanceId;
      } else if (s.leader) {
        b.lastLeader[account] = s.leader->instanceId;
        b.standing.insert(s.leader->instanceId);
      } else if (auto last = b.lastLeader.find(account);
                 last != b.lastLeader.end() && last->second == config.instanceId) {
        b.lastLeader.erase(last);  // our own leadership is known exactly: gone is gone
      }
    }
    // A move has landed once another leader is seen. Until then it counts for its receiver (also
    // after our resign, while our candidate has not read the new `active`): counting it as
    // unplaced would let the plan give the receiver more. Still leading after the timeout: failed.
    for (auto it = b.inFlight.begin(); it != b.inFlight.end();) {
      auto& move = it->second;
      auto st = status.find(it->first);
      const bool leading = st != status.end() && st->second.role == Role::Leader;
      std::optional<std::string> leader = move.seenLeader;
      if (st != status.end() && st->second.leader) leader = st->second.leader->instanceId;
      const auto state =
          balance::moveState(leading, leader, config.instanceId, now - move.startedAt);
      if (state == balance::MoveState::Landed) b.lastLeader[it->first] = *leader;
      if (state == balance::MoveState::InFlight && !leading && !move.reading &&
          now - move.readAt > balance::kLandingRead) {
        move.reading = true;
        move.readAt = now;
        landingReads.push_back(it->first);
      }
      it = state != balance::MoveState::InFlight ? b.inFlight.erase(it) : ++it;
    }
    m.balanceInFlight.set(static_cast<double>(b.inFlight.size()));
    if (!config.balance.enabled) return;
    auto members = schedulableAgents(now, selfSchedulable);
    if (members != b.membership) {
      b.membership = std::move(members);
      b.membershipSince = now;
      b.giving = false;
    }
    b.counts.clear();
    b.unplaced = 0;
    for (const auto& id : b.membership) b.counts[id] = 0;
    for (const auto& account : config.accounts) {
      if (pinnedTo(account)) continue;
      auto move = b.inFlight.find(account);
      auto last = b.lastLeader.find(account);
      const std::string* leader = move != b.inFlight.end()     ? &move->second.to
                                  : last != b.lastLeader.end() ? &last->second
                                                               : nullptr;
      if (!leader) {
        ++b.unplaced;
      } else if (inMembership(*leader)) {
        ++b.counts[*leader];
      }
    }
    // An account we stand for with no leader seen yet is still being elected: plans made before
    // the first elections end would move accounts the election itself is about to place. One more
    // settle window at most: an account nobody can lead must not stop the balance of the rest.
    const bool electing = now - b.membershipSince < 2 * config.balance.settle &&
                          std::any_of(status.begin(), status.end(), [&](const auto& entry) {
                            return entry.second.standing && !b.lastLeader.contains(entry.first);
                          });
    b.row.clear();
    b.plan = {};
    if (!inMembership(config.instanceId)) {
      b.state = "unschedulable";
    } else if (now - b.membershipSince < config.balance.settle) {
      b.state = "settling";
    } else if (electing) {
      b.state = "electing";
    } else {
      b.plan = balance::planBalance(b.counts, b.unplaced, config.balance.tolerance, b.giving);
      b.row = balance::rowOf(b.plan, config.instanceId);
      b.giving = !b.row.empty();
      b.state = b.giving ? "giving" : "balanced";
    }
    const auto own = b.counts.find(config.instanceId);
    m.balanceLeading.set(own != b.counts.end() ? static_cast<double>(own->second) : 0.0);
    auto target = b.plan.target.find(config.instanceId);
    m.balanceTarget.set(target != b.plan.target.end() ? static_cast<double>(target->second)
                                                      : b.plan.share);
    // Who stands with us shows in the queues: read one led account's every health interval.
    if (b.state != "unschedulable" && now - b.lastProbe >= config.health.interval) {
      auto next = status.upper_bound(b.probed);
      for (size_t i = 0; i < status.size(); ++i, ++next) {
        if (next == status.end()) next = status.begin();
        if (next->second.role != Role::Leader || accounts[next->first].lookupInFlight) continue;
        b.lastProbe = now;
        b.probed = next->first;
        accounts[b.probed].lookupInFlight = true;
        probe = b.probed;
        break;
      }
    }
    if (b.state == "giving" || b.state == "balanced") pickMoves(status, now, picks, lookups);
    m.balanceInFlight.set(static_cast<double>(b.inFlight.size()));
  }
  for (const auto& account : lookups) {
    auto self = shared_from_this();
    lookUpSuccessor(account, [self] {
      std::lock_guard lock(self->mu);
      --self->balance.lookupsInFlight;
    });
  }
  if (probe) lookUpSuccessor(*probe);
  for (const auto& account : landingReads) readLanding(account);
  for (auto& pick : picks) startMove(pick.account, pick.to, pick.receiverSeq, pick.ahead, pick.why);
}

// Caller holds `mu`: the accounts to give now (this agent's row of the plan and the preferred
// instances, at most the free move slots) and the member lists to read before choosing more.
void Agent::Impl::pickMoves(
    const std::map<std::string, election::AccountStatus, std::less<>>& status,
    Clock::time_point now, std::vector<detail::BalanceMove>& picks,
    std::vector<std::string>& lookups) {
  auto& b = balance;
  // What to give: led accounts whose fresh queue holds the receiver behind agents only (they
  // register again when stepped back); the receiver next in the queue first (no jump).
  size_t slots = config.balance.maxMovesInFlight > b.inFlight.size()
                     ? config.balance.maxMovesInFlight - b.inFlight.size()
                     : 0;
  auto want = b.row;
  size_t wanted = 0;
  for (auto& [to, n] : want) wanted += n;
  std::vector<detail::BalanceMove> jumps;
  std::vector<std::string> unread;
  for (const auto& [account, s] : status) {
    if (s.role != Role::Leader || b.inFlight.contains(account)) continue;
    auto& state = accounts[account];
    const std::string* pinned = pinnedTo(account);
    if (pinned && *pinned == config.instanceId) continue;
    if (!pinned && wanted == 0) continue;
    if (state.queue.empty() || now - state.successorReadAt > config.health.interval) {
      if (!state.lookupInFlight) unread.push_back(account);
      continue;
    }
    auto jump = balance::jumpTo(
        state.queue, config.instanceId,
        [&](const std::string& id) {
          return pinned ? id == *pinned : want.contains(id) && want[id] > 0;
        },
        // Agents only: a member without a health report is another kind of elector.
        [&](const std::string& id) {
          return tracker.judge(id, now, config.health.ttl).report.has_value();
        });
    if (!jump) continue;
    detail::BalanceMove pick{account, jump->to, pinned ? "preferred" : "balance", jump->receiverSeq,
                             std::move(jump->ahead)};
    if (pinned) {
      picks.insert(picks.begin(), std::move(pick));
    } else if (pick.ahead.empty()) {
      --want[pick.to];
      --wanted;
      picks.push_back(std::move(pick));
    } else {
      jumps.push_back(std::move(pick));
    }
  }
  for (auto& jump : jumps) {
    if (want[jump.to] == 0) continue;
    --want[jump.to];
    picks.push_back(std::move(jump));
  }
  if (picks.size() > slots) picks.resize(slots);
  const size_t reads = std::min(unread.size(), slots - picks.size() + kSpareLookups);
  for (size_t i = 0; i < reads && b.lookupsInFlight < slots + kSpareLookups; ++i) {
    accounts[unread[i]].lookupInFlight = true;
    ++b.lookupsInFlight;
    lookups.push_back(unread[i]);
  }
  for (const auto& pick : picks) {
    auto& move = b.inFlight[pick.account];
    move = {};
    move.to = pick.to;
    move.why = pick.why;
    move.startedAt = now;
  }
}

bool Agent::Impl::inMembership(const std::string& id) const {
  return std::binary_search(balance.membership.begin(), balance.membership.end(), id);
}

// Accounts with a schedulable preferred instance are pinned to it; balance counts the rest.
const std::string* Agent::Impl::pinnedTo(const std::string& account) const {
  auto p = config.balance.preferred.find(account);
  return p != config.balance.preferred.end() && inMembership(p->second) ? &p->second : nullptr;
}

// Control strand: who holds `active` of an account we handed over.
void Agent::Impl::readLanding(const std::string& account) {
  auto self = shared_from_this();
  group->session().get(
      naming::activePath(config.zookeeper.root, account), nullptr,
      [self, account](election::ZkError err, std::string data, election::NodeStat) {
        auto active = err == election::ZkError::Ok ? election::parseActive(data) : std::nullopt;
        asio::post(self->control, [self, account, active = std::move(active)] {
          {
            std::lock_guard lock(self->mu);
            auto move = self->balance.inFlight.find(account);
            if (move == self->balance.inFlight.end()) return;
            move->second.reading = false;
            if (active) move->second.seenLeader = active->instanceId;
          }
          self->reconcileSoon();
        });
      });
}

// The members between us and the receiver step back (one multi that also checks the receiver is
// still there), then we resign: the receiver leads in one handover.
void Agent::Impl::startMove(const std::string& account, const std::string& to, int64_t receiverSeq,
                            std::vector<int64_t> ahead, const std::string& why) {
  spdlog::info("rebalance account={} instance={} to={} why={} stepping_back={}", account,
               config.instanceId, to, why, ahead.size());
  auto self = shared_from_this();
  group->jumpQueue(account, receiverSeq, std::move(ahead),
                   [self, account, why](election::ZkError err) {
                     asio::post(self->control, [self, account, why, err] {
                       if (err == election::ZkError::Ok && !self->stopping &&
                           self->group->check(account).allowed()) {
                         self->m.balanceMoves.with({why, "started"}).inc();
                         self->group->resign(account, election::LossReason::Rebalance);
                         return;
                       }
                       self->m.balanceMoves.with({why, "failed"}).inc();
                       spdlog::warn("rebalance account={} instance={} not moved: {}", account,
                                    self->config.instanceId, election::toString(err));
                       std::lock_guard lock(self->mu);
                       self->balance.inFlight.erase(account);
                       self->accounts[account].queue.clear();  // read it again before a retry
                     });
                   });
}

json Agent::Impl::balanceJson(Clock::time_point now) const {
  const auto& b = balance;
  const auto settled = now - b.membershipSince;
  json out{{"enabled", config.balance.enabled},
           {"state", b.state},
           {"agents", b.membership},
           {"counts", b.counts},
           {"unplaced", b.unplaced},
           {"accounts", b.plan.accounts},
           {"share", b.plan.share},
           {"threshold", b.plan.threshold},
           {"gives", b.row},
           {"moves_in_flight", b.inFlight.size()},
           {"settle_remaining_ms",
            settled < config.balance.settle
                ? std::chrono::duration_cast<milliseconds>(config.balance.settle - settled).count()
                : 0}};
  auto target = b.plan.target.find(config.instanceId);
  out["target"] = target != b.plan.target.end() ? json(target->second) : json(nullptr);
  return out;
}

}  // namespace zkagent::agent
