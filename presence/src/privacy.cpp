#include "zkagent/presence/privacy.hpp"

#include <algorithm>

namespace zkagent::presence {

std::string_view toString(ShownStatus status) {
  switch (status) {
    case ShownStatus::Online:
      return "online";
    case ShownStatus::Offline:
      return "offline";
    case ShownStatus::Recently:
      return "recently";
    case ShownStatus::LongAgo:
      return "long_ago";
    case ShownStatus::Unknown:
      return "unknown";
  }
  return "unknown";
}

void PrivacyRules::setLevel(const std::string& target, PrivacyLevel level) {
  targets_[target].level = level;
}

void PrivacyRules::addContact(const std::string& target, const std::string& viewer) {
  targets_[target].contacts.insert(viewer);
}

void PrivacyRules::removeContact(const std::string& target, const std::string& viewer) {
  targets_[target].contacts.erase(viewer);
}

void PrivacyRules::block(const std::string& target, const std::string& viewer) {
  targets_[target].blocked.insert(viewer);
}

void PrivacyRules::unblock(const std::string& target, const std::string& viewer) {
  targets_[target].blocked.erase(viewer);
}

void PrivacyRules::replace(const std::string& target, const TargetPrivacy& rules) {
  TargetRules& current = targets_[target];
  current.level = rules.level;
  current.contacts = {rules.contacts.begin(), rules.contacts.end()};
  current.blocked = {rules.blocked.begin(), rules.blocked.end()};
}

std::optional<TargetPrivacy> PrivacyRules::rulesOf(std::string_view target) const {
  const TargetRules* rules = find(target);
  if (rules == nullptr) return std::nullopt;
  TargetPrivacy out{rules->level, {rules->contacts.begin(), rules->contacts.end()},
                    {rules->blocked.begin(), rules->blocked.end()}};
  std::sort(out.contacts.begin(), out.contacts.end());
  std::sort(out.blocked.begin(), out.blocked.end());
  return out;
}

const PrivacyRules::TargetRules* PrivacyRules::find(std::string_view target) const {
  auto it = targets_.find(std::string(target));
  return it == targets_.end() ? nullptr : &it->second;
}

bool PrivacyRules::maySee(std::string_view viewer, std::string_view target) const {
  const TargetRules* rules = find(target);
  if (rules == nullptr) return false;
  const std::string viewerName(viewer);
  return rules->contacts.contains(viewerName) && !rules->blocked.contains(viewerName);
}

PrivacyLevel PrivacyRules::level(std::string_view target) const {
  const TargetRules* rules = find(target);
  return rules == nullptr ? PrivacyLevel::Exact : rules->level;
}

std::optional<VisibleStatus> PrivacyRules::trim(std::string_view viewer, std::string_view target,
                                                const std::optional<UserPresence>& presence,
                                                TimePoint now, Millis recentWindow) const {
  if (!maySee(viewer, target)) return std::nullopt;
  const PrivacyLevel targetLevel = level(target);
  if (targetLevel == PrivacyLevel::Hidden) return VisibleStatus{ShownStatus::Unknown, std::nullopt};
  if (presence && presence->online) return VisibleStatus{ShownStatus::Online, std::nullopt};
  const TimePoint* lastSeen = presence && presence->lastSeen ? &*presence->lastSeen : nullptr;
  if (targetLevel == PrivacyLevel::Exact) {
    return VisibleStatus{ShownStatus::Offline,
                         lastSeen ? std::optional(minuteOf(*lastSeen)) : std::nullopt};
  }
  const bool recently = lastSeen && now - *lastSeen < recentWindow;
  return VisibleStatus{recently ? ShownStatus::Recently : ShownStatus::LongAgo, std::nullopt};
}

}  // namespace zkagent::presence
