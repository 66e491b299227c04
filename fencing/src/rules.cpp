#include "rules.hpp"

#include <algorithm>
#include <chrono>

namespace zkagent::fencing::detail {
namespace {

std::int64_t nowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string fenceDetail(std::uint64_t activeSeq, std::uint64_t hwm) {
  return "hwm_ahead_of_zookeeper: active seq " + std::to_string(activeSeq) + " is below hwm " +
         std::to_string(hwm) + "; the account stays fenced until an operator resets its HWM";
}

}  // namespace

Rules::Rules(std::size_t rememberedOpsPerAccount)
    : rememberedOps_(std::max<std::size_t>(rememberedOpsPerAccount, 1)) {}

Outcome Rules::submit(const Operation& operation, const ActiveView& active) {
  const FencingToken& fencing = operation.fencing;
  const auto found = accounts_.find(fencing.account);
  Account* account = found == accounts_.end() ? nullptr : &found->second;

  if (account != nullptr) {
    const auto& recent = account->recent.hwmByOpId;
    if (const auto earlier = recent.find(operation.opId); earlier != recent.end()) {
      return {Decision{Verdict::accepted, earlier->second, true, "retry of an accepted opId"}, {}};
    }
  }
  if (auto refused = refusal(fencing, active, account)) return std::move(*refused);
  AcceptedOp accepted{operation, fencing.token};
  apply(accepted);
  return {Decision{Verdict::accepted, fencing.token, false, {}}, std::move(accepted)};
}

Outcome Rules::admit(const FencingToken& fencing, const ActiveView& active) {
  const auto found = accounts_.find(fencing.account);
  Account* account = found == accounts_.end() ? nullptr : &found->second;
  if (auto refused = refusal(fencing, active, account)) return std::move(*refused);
  // Only a change of the HWM or of its holder is logged: a leader's steady renewals cost no fsync.
  if (account != nullptr && fencing.token == account->status.hwm &&
      !account->holder.instanceId.empty()) {
    return {Decision{Verdict::accepted, fencing.token, false, {}}, {}};
  }
  HwmRaised raised{fencing.account, fencing.token, fencing.instanceId, fencing.sessionId};
  apply(raised);
  return {Decision{Verdict::accepted, fencing.token, false, {}}, std::move(raised)};
}

std::optional<Outcome> Rules::refusal(const FencingToken& fencing, const ActiveView& active,
                                      Account* account) {
  // Unknown accounts get no entry on rejection: garbage must not grow memory.
  const std::uint64_t hwm = account != nullptr ? account->status.hwm : 0;
  const auto reject = [&](Verdict verdict, std::string detail, bool superseded = true) {
    if (account != nullptr) ++account->status.rejected;
    return Outcome{Decision{verdict, hwm, false, std::move(detail), superseded}, {}};
  };

  if (account != nullptr && account->status.fenced) {
    return reject(Verdict::account_fenced, fenceDetail(account->status.fencedAtActiveSeq, hwm));
  }
  if (active.state == ActiveView::State::present && active.seq < hwm && active.cached) {
    // A fence holds until an operator lifts it: it is never taken on a view that may only lag.
    return Outcome{
        Decision{Verdict::not_current_leader, hwm, false,
                 "cached active seq " + std::to_string(active.seq) + " is below hwm " +
                     std::to_string(hwm) + "; deciding again on a view read after a sync",
                 false, true},
        {}};
  }
  if (active.state == ActiveView::State::present && active.seq < hwm) {
    AccountFenced fenced{fencing.account, active.seq, hwm, nowUnixMillis()};
    apply(fenced);
    ++account->status.rejected;  // hwm > 0 implies the account exists
    return Outcome{
        Decision{Verdict::account_fenced, hwm, false, fenceDetail(active.seq, hwm), true},
        std::move(fenced)};
  }
  if (fencing.token < hwm) {
    return reject(Verdict::stale_token, "token " + std::to_string(fencing.token) +
                                            " is below the account's hwm " + std::to_string(hwm));
  }
  if (active.state == ActiveView::State::absent) {
    // The new leader's node may not have reached this view yet.
    return reject(Verdict::not_current_leader, "the account has no active node in ZooKeeper",
                  false);
  }
  if (active.state == ActiveView::State::present && fencing.token != active.seq) {
    return reject(Verdict::not_current_leader,
                  "token " + std::to_string(fencing.token) + " is not the active seq " +
                      std::to_string(active.seq),
                  active.seq > fencing.token);
  }
  const auto heldBy = [&](const std::string& instance, std::int64_t session) {
    return fencing.instanceId == instance && fencing.sessionId == session;
  };
  if (active.state == ActiveView::State::present && !active.instanceId.empty() &&
      !heldBy(active.instanceId, active.sessionId)) {
    return reject(Verdict::not_current_leader,
                  "instance " + fencing.instanceId + " session " +
                      std::to_string(fencing.sessionId) + " does not hold the active node (" +
                      active.instanceId + " session " + std::to_string(active.sessionId) + ")");
  }
  // Without ZooKeeper the HWM's holder stands in for the active node: a token can be read by
  // anyone, so at the HWM only the instance and session that wrote under it pass.
  if (account != nullptr && fencing.token == hwm && !account->holder.instanceId.empty() &&
      !heldBy(account->holder.instanceId, account->holder.sessionId)) {
    return reject(Verdict::not_current_leader,
                  "token " + std::to_string(fencing.token) + " is held by instance " +
                      account->holder.instanceId + " session " +
                      std::to_string(account->holder.sessionId) + ", not instance " +
                      fencing.instanceId + " session " + std::to_string(fencing.sessionId));
  }
  return std::nullopt;
}

void Rules::raise(Account& account, std::uint64_t hwm, const std::string& instanceId,
                  std::int64_t sessionId) {
  if (hwm < account.status.hwm) return;
  if (hwm > account.status.hwm || account.holder.instanceId.empty()) {
    account.holder = {instanceId, sessionId};
  }
  account.status.hwm = hwm;
}

HwmReset Rules::reset(std::string_view account, std::uint64_t hwm, std::string_view actor,
                      std::string_view reason) {
  HwmReset reset{std::string(account), hwm, std::string(actor), std::string(reason),
                 nowUnixMillis()};
  apply(reset);
  return reset;
}

void Rules::apply(const Event& event) {
  std::visit(
      [this](const auto& change) {
        using Change = std::decay_t<decltype(change)>;
        if constexpr (std::is_same_v<Change, AcceptedOp>) {
          const FencingToken& fencing = change.operation.fencing;
          Account& account = accounts_[fencing.account];
          raise(account, change.hwm, fencing.instanceId, fencing.sessionId);
          ++account.status.accepted;
          remember(account.recent, change.operation.opId, change.hwm);
        } else if constexpr (std::is_same_v<Change, HwmRaised>) {
          raise(accounts_[change.account], change.hwm, change.instanceId, change.sessionId);
        } else if constexpr (std::is_same_v<Change, AccountFenced>) {
          AccountStatus& status = accounts_[change.account].status;
          status.fenced = true;
          status.fencedAtActiveSeq = change.activeSeq;
        } else {
          Account& account = accounts_[change.account];
          account.status.hwm = change.hwm;
          account.status.fenced = false;
          account.status.fencedAtActiveSeq = 0;
          account.holder = {};  // whoever writes first under the reset HWM holds it
        }
      },
      event);
}

void Rules::remember(RecentOps& recent, const std::string& opId, std::uint64_t hwm) const {
  if (!recent.hwmByOpId.emplace(opId, hwm).second) return;
  recent.order.push_back(opId);
  while (recent.order.size() > rememberedOps_) {
    recent.hwmByOpId.erase(recent.order.front());
    recent.order.pop_front();
  }
}

void Rules::restore(AccountSnapshot snapshot) {
  Account& account = accounts_[snapshot.account];
  account.status.hwm = snapshot.hwm;
  account.status.accepted = snapshot.accepted;
  account.status.fenced = snapshot.fenced;
  account.status.fencedAtActiveSeq = snapshot.fencedAtActiveSeq;
  account.holder = {std::move(snapshot.holderInstance), snapshot.holderSession};
  for (const auto& [opId, hwm] : snapshot.recentOps) remember(account.recent, opId, hwm);
}

std::optional<AccountStatus> Rules::status(std::string_view account) const {
  const auto found = accounts_.find(account);
  if (found == accounts_.end()) return std::nullopt;
  return found->second.status;
}

std::vector<std::string> Rules::fencedAccounts() const {
  std::vector<std::string> fenced;
  for (const auto& [name, account] : accounts_) {
    if (account.status.fenced) fenced.push_back(name);
  }
  std::sort(fenced.begin(), fenced.end());
  return fenced;
}

std::vector<AccountSnapshot> Rules::snapshot() const {
  std::vector<AccountSnapshot> accounts;
  accounts.reserve(accounts_.size());
  for (const auto& [name, account] : accounts_) {
    AccountSnapshot& saved = accounts.emplace_back();
    saved.account = name;
    saved.hwm = account.status.hwm;
    saved.accepted = account.status.accepted;
    saved.fenced = account.status.fenced;
    saved.fencedAtActiveSeq = account.status.fencedAtActiveSeq;
    saved.holderInstance = account.holder.instanceId;
    saved.holderSession = account.holder.sessionId;
    saved.recentOps.reserve(account.recent.order.size());
    for (const std::string& opId : account.recent.order) {
      saved.recentOps.emplace_back(opId, account.recent.hwmByOpId.at(opId));
    }
  }
  return accounts;
}

}  // namespace zkagent::fencing::detail
