// Privacy trimming of the view (exact / coarse / hidden). Only contacts who are not blocked learn
// anything; everyone else gets "no information", never "offline", or a blocked viewer could infer
// the block from a user who is always offline (RFC 6121 takes the same stance).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/view.hpp"

namespace zkagent::presence {

enum class PrivacyLevel {
  Exact,   // online, or offline with the minute last seen
  Coarse,  // online, recently (within coarseRecentWindow), or long ago
  Hidden,  // unknown
};

enum class ShownStatus { Online, Offline, Recently, LongAgo, Unknown };
std::string_view toString(ShownStatus status);

struct VisibleStatus {
  ShownStatus status;
  std::optional<std::int64_t> lastSeenMinute;  // Exact and offline only; minutes, never seconds
  bool operator==(const VisibleStatus&) const = default;
};

// All rules of one target at once, as an operator sets and reads them.
struct TargetPrivacy {
  PrivacyLevel level = PrivacyLevel::Exact;
  std::vector<std::string> contacts;  // sorted, no duplicates when read back
  std::vector<std::string> blocked;
  bool operator==(const TargetPrivacy&) const = default;
};

class PrivacyRules {
 public:
  // Replaces every rule of `target` (level, contacts, blocked).
  void replace(const std::string& target, const TargetPrivacy& rules);
  // The rules of `target`, nullopt if none were ever set (then nobody may see it).
  std::optional<TargetPrivacy> rulesOf(std::string_view target) const;

  // Targets without a level are Exact: visibility itself is already limited to contacts.
  void setLevel(const std::string& target, PrivacyLevel level);
  void addContact(const std::string& target, const std::string& viewer);
  void removeContact(const std::string& target, const std::string& viewer);
  void block(const std::string& target, const std::string& viewer);
  void unblock(const std::string& target, const std::string& viewer);

  bool maySee(std::string_view viewer, std::string_view target) const;
  PrivacyLevel level(std::string_view target) const;

  // What `viewer` may know of `target` given its published presence (nullopt if never seen).
  // nullopt means "no information" and must stay distinct from offline.
  std::optional<VisibleStatus> trim(std::string_view viewer, std::string_view target,
                                    const std::optional<UserPresence>& presence, TimePoint now,
                                    Millis recentWindow) const;

 private:
  struct TargetRules {
    PrivacyLevel level = PrivacyLevel::Exact;
    std::unordered_set<std::string> contacts;
    std::unordered_set<std::string> blocked;
  };
  const TargetRules* find(std::string_view target) const;

  std::unordered_map<std::string, TargetRules> targets_;
};

}  // namespace zkagent::presence
