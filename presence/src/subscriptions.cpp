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

Subscribed Subscriptions::subscribe(const std::string& viewer,
                                    const std::vector<std::string>& targets, EventSink sink) {
  const SubscriptionId id = ++lastId_;
  Subscription subscription{
      viewer, targets, std::make_shared<const EventSink>(std::move(sink)), {}};
  std::sort(subscription.targets.begin(), subscription.targets.end());
  subscription.targets.erase(std::unique(subscription.targets.begin(), subscription.targets.end()),
                             subscription.targets.end());
  Subscribed result{id, {}};
  for (const std::string& target : subscription.targets) {
    byTarget_[target].push_back(id);
    const auto status = visible(viewer, target);
    if (!status) continue;
    const auto presence = view_.published(target);
    result.snapshot.push_back(SnapshotEntry{target, *status, presence ? presence->version : 0});
    subscription.lastSent.emplace(target, *status);
  }
  subscriptions_.emplace(id, std::move(subscription));
  return result;
}

void Subscriptions::unsubscribe(SubscriptionId id) {
  auto it = subscriptions_.find(id);
  if (it == subscriptions_.end()) return;
  for (const std::string& target : it->second.targets) {
    auto ids = byTarget_.find(target);
    std::erase(ids->second, id);
    if (ids->second.empty()) byTarget_.erase(ids);
  }
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
    (*sink)(ChangeEvent{change.user, *status, change.presence.version, minuteOf(change.at)});
  }
}

}  // namespace zkagent::presence
