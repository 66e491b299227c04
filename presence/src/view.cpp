#include "zkagent/presence/view.hpp"

namespace zkagent::presence {

PresenceView::PresenceView(Clock& clock, const Params& params, PublishHandler onPublish)
    : timers_(clock), params_(params), onPublish_(std::move(onPublish)) {
  validate(params_);
}

void PresenceView::onDeviceChange(const DeviceChange& change) {
  auto [it, created] = users_.try_emplace(change.key.user);
  UserState& state = it->second;
  if (change.online) {
    if (!state.onlineDevices.insert(change.key.device).second) return;
    ++counters_.deviceFlaps;
    ++state.generation;  // voids a pending offline
    if (!state.published.online) {
      publish(it->first, state, true, change.at);
    }
    return;
  }
  if (state.onlineDevices.erase(change.key.device) == 0) return;
  ++counters_.deviceFlaps;
  if (!state.onlineDevices.empty()) return;
  const std::uint64_t generation = ++state.generation;
  const TimePoint lastSeen = change.at;
  if (params_.offlineDebounce == Millis{0}) {
    publish(it->first, state, false, lastSeen);
    return;
  }
  timers_.after(params_.offlineDebounce, [this, user = it->first, generation, lastSeen] {
    UserState& current = users_.at(user);
    if (current.generation == generation && current.onlineDevices.empty()) {
      publish(user, current, false, lastSeen);
    }
  });
}

void PresenceView::publish(const std::string& user, UserState& state, bool online,
                           TimePoint lastSeen) {
  state.published.online = online;
  ++state.published.version;
  if (!online) state.published.lastSeen = lastSeen;
  ++counters_.publishedChanges;
  if (onPublish_) onPublish_(UserChange{user, state.published, timers_.now()});
}

std::optional<UserPresence> PresenceView::published(std::string_view user) const {
  auto it = users_.find(std::string(user));
  if (it == users_.end() || it->second.published.version == 0) return std::nullopt;
  return it->second.published;
}

}  // namespace zkagent::presence
