#include "zkagent/presence/subscriptions.hpp"

#include <algorithm>

namespace zkagent::presence {

Subscriptions::Subscriptions(Clock& clock, const Params& params, const PresenceView& view,
                             const PrivacyRules& privacy)
    : clock_(clock), params_(params), view_(view), privacy_(privacy) {}

std::optional<VisibleStatus> Subscriptions::visible(const std::string& viewer,
                                                    const std::string& target) const {
  return privacy_.trim(viewer, target, view_.published(target), clock_.now(),
                       params_.coarseRecentWindow);
}

std::optional<SnapshotEntry> Subscriptions::watch(SubscriptionId id, Subscription& subscription,
                                                  const std::string& target) {
  byTarget_[target].push_back(id);
  ++targetsWatched_;
  const auto status = visible(subscription.viewer, target);
  if (!status) return std::nullopt;
  const auto presence = view_.published(target);
  subscription.lastSent.insert_or_assign(target, *status);
  return SnapshotEntry{target, *status, presence ? presence->version : 0};
}

void Subscriptions::unwatch(SubscriptionId id, const std::string& target) {
  auto ids = byTarget_.find(target);
  if (ids == byTarget_.end()) return;
  if (std::erase(ids->second, id) > 0) --targetsWatched_;
  if (ids->second.empty()) byTarget_.erase(ids);
}

Subscribed Subscriptions::subscribe(const std::string& viewer,
                                    const std::vector<std::string>& targets, EventSink sink) {
  const SubscriptionId id = ++lastId_;
  subscriptions_.emplace(
      id, Subscription{viewer, {}, std::make_shared<const EventSink>(std::move(sink)), {}});
  return Subscribed{id, addTargets(id, targets)};
}

std::vector<SnapshotEntry> Subscriptions::addTargets(SubscriptionId id,
                                                     const std::vector<std::string>& targets) {
  std::vector<SnapshotEntry> snapshot;
  auto it = subscriptions_.find(id);
  if (it == subscriptions_.end()) return snapshot;
  Subscription& subscription = it->second;
  std::vector<std::string> added(targets);
  std::sort(added.begin(), added.end());
  added.erase(std::unique(added.begin(), added.end()), added.end());
  std::vector<std::string> merged;
  merged.reserve(subscription.targets.size() + added.size());
  for (const std::string& target : added) {
    if (std::binary_search(subscription.targets.begin(), subscription.targets.end(), target)) {
      continue;
    }
    if (auto entry = watch(id, subscription, target)) snapshot.push_back(std::move(*entry));
    merged.push_back(target);
  }
  if (merged.empty()) return snapshot;
  const auto middle = merged.size();
  merged.insert(merged.end(), subscription.targets.begin(), subscription.targets.end());
  std::inplace_merge(merged.begin(), merged.begin() + static_cast<std::ptrdiff_t>(middle),
                     merged.end());
  subscription.targets = std::move(merged);
  return snapshot;
}

void Subscriptions::removeTargets(SubscriptionId id, const std::vector<std::string>& targets) {
  auto it = subscriptions_.find(id);
  if (it == subscriptions_.end()) return;
  Subscription& subscription = it->second;
  for (const std::string& target : targets) {
    auto at = std::lower_bound(subscription.targets.begin(), subscription.targets.end(), target);
    if (at == subscription.targets.end() || *at != target) continue;
    subscription.targets.erase(at);
    subscription.lastSent.erase(target);
    unwatch(id, target);
  }
}

void Subscriptions::unsubscribe(SubscriptionId id) {
  auto it = subscriptions_.find(id);
  if (it == subscriptions_.end()) return;
  for (const std::string& target : it->second.targets) unwatch(id, target);
  subscriptions_.erase(it);
}

void Subscriptions::onUserChange(const UserChange& change) {
  auto ids = byTarget_.find(change.user);
  if (ids == byTarget_.end()) return;
  // A sink may unsubscribe while we deliver: iterate over a copy and look every id up again.
  const std::vector<SubscriptionId> watching = ids->second;
  for (SubscriptionId id : watching) {
    auto it = subscriptions_.find(id);
    if (it == subscriptions_.end()) continue;
    Subscription& subscription = it->second;
    const auto status = privacy_.trim(subscription.viewer, change.user, change.presence, change.at,
                                      params_.coarseRecentWindow);
    if (!status) continue;
    auto [last, first] = subscription.lastSent.try_emplace(change.user, *status);
    if (!first && last->second == *status) continue;
    last->second = *status;
    const std::shared_ptr<const EventSink> sink = subscription.sink;
    (*sink)(ChangeEvent{change.user, *status, change.presence.version, minuteOf(change.at),
                        false});
  }
}

void Subscriptions::onPrivacyChange(const std::string& target) {
  auto ids = byTarget_.find(target);
  if (ids == byTarget_.end()) return;
  const std::vector<SubscriptionId> watching = ids->second;
  const auto presence = view_.published(target);
  const std::uint64_t version = presence ? presence->version : 0;
  const std::int64_t minute = minuteOf(clock_.now());
  for (SubscriptionId id : watching) {
    auto it = subscriptions_.find(id);
    if (it == subscriptions_.end()) continue;
    Subscription& subscription = it->second;
    const auto status = visible(subscription.viewer, target);
    auto last = subscription.lastSent.find(target);
    ChangeEvent event{target, status.value_or(VisibleStatus{ShownStatus::Unknown, std::nullopt}),
                      version, minute, false};
    if (!status) {
      if (last == subscription.lastSent.end()) continue;  // it saw nothing before either
      subscription.lastSent.erase(last);
      event.removed = true;
    } else if (last != subscription.lastSent.end() && last->second == *status) {
      continue;
    } else {
      subscription.lastSent.insert_or_assign(target, *status);
    }
    const std::shared_ptr<const EventSink> sink = subscription.sink;
    (*sink)(event);
  }
}

}  // namespace zkagent::presence
