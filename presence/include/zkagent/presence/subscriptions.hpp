// The subscriber contract (seed 000 §4): a snapshot of the visible targets, then change events
// carrying a per-target version; a subscriber keeps the highest version per target, so events
// reordered in delivery cannot roll a status back. Times leave only as whole minutes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/params.hpp"
#include "zkagent/presence/privacy.hpp"
#include "zkagent/presence/view.hpp"

namespace zkagent::presence {

using SubscriptionId = std::uint64_t;

struct SnapshotEntry {
  std::string target;
  VisibleStatus status;
  std::uint64_t version;
};

struct ChangeEvent {
  std::string target;
  VisibleStatus status;
  std::uint64_t version;
  std::int64_t observedAtMinute;
};

struct Subscribed {
  SubscriptionId id;
  std::vector<SnapshotEntry> snapshot;  // targets the viewer may not see are absent, not offline
};

class Subscriptions {
 public:
  using EventSink = std::function<void(const ChangeEvent&)>;

  Subscriptions(Clock& clock, const Params& params, const PresenceView& view,
                const PrivacyRules& privacy);

  Subscribed subscribe(const std::string& viewer, const std::vector<std::string>& targets,
                       EventSink sink);
  // Idempotent: unknown or already removed ids are ignored.
  void unsubscribe(SubscriptionId id);
  // Delivers the change to every subscriber of the user who may see it and whose trimmed status
  // actually changed (a hidden target produces no events at all). Privacy is judged at delivery.
  void onUserChange(const UserChange& change);
  std::size_t size() const { return subscriptions_.size(); }

 private:
  struct Subscription {
    std::string viewer;
    std::vector<std::string> targets;
    // Shared so that a sink that unsubscribes itself stays alive until it returns.
    std::shared_ptr<const EventSink> sink;
    std::unordered_map<std::string, VisibleStatus> lastSent;  // by target
  };

  std::optional<VisibleStatus> visible(const std::string& viewer, const std::string& target) const;

  Clock& clock_;
  Params params_;
  const PresenceView& view_;
  const PrivacyRules& privacy_;
  SubscriptionId lastId_ = 0;
  std::map<SubscriptionId, Subscription> subscriptions_;
  std::unordered_map<std::string, std::vector<SubscriptionId>> byTarget_;
};

}  // namespace zkagent::presence
