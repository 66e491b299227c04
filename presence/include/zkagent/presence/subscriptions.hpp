// The subscriber contract: a snapshot of the visible targets, then change events
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
  // The viewer may no longer see the target (blocked, removed from contacts): nothing about it
  // follows until it becomes visible again. `status` is meaningless then; never an "offline".
  bool removed = false;
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
  // Adds targets to a live subscription; returns the snapshot of those newly added the viewer may
  // see. Targets already watched are left as they are. Unknown ids get an empty snapshot.
  std::vector<SnapshotEntry> addTargets(SubscriptionId id, const std::vector<std::string>& targets);
  // Stops watching targets; targets not watched are ignored (idempotent).
  void removeTargets(SubscriptionId id, const std::vector<std::string>& targets);
  // The rules of `target` changed: each of its subscribers that saw it and may no longer gets a
  // removal, one that may see it now gets its status (at the current version), one whose trimmed
  // status changed (another level) gets the new status. Applied at once, not at the next change.
  void onPrivacyChange(const std::string& target);
  // Targets one subscription watches (0 for an unknown id).
  std::size_t targetCount(SubscriptionId id) const {
    auto it = subscriptions_.find(id);
    return it == subscriptions_.end() ? 0 : it->second.targets.size();
  }
  // Distinct (subscription, target) pairs watched.
  std::size_t targetsWatched() const { return targetsWatched_; }
  // Delivers the change to every subscriber of the user who may see it and whose trimmed status
  // actually changed (a hidden target produces no events at all). Privacy is judged at delivery.
  void onUserChange(const UserChange& change);
  std::size_t size() const { return subscriptions_.size(); }

 private:
  struct Subscription {
    std::string viewer;
    std::vector<std::string> targets;  // sorted, no duplicates
    // Shared so that a sink that unsubscribes itself stays alive until it returns.
    std::shared_ptr<const EventSink> sink;
    std::unordered_map<std::string, VisibleStatus> lastSent;  // by target
  };

  std::optional<VisibleStatus> visible(const std::string& viewer, const std::string& target) const;
  // Watches `target` in `subscription` (id `id`); returns the snapshot entry if visible.
  std::optional<SnapshotEntry> watch(SubscriptionId id, Subscription& subscription,
                                     const std::string& target);
  void unwatch(SubscriptionId id, const std::string& target);

  Clock& clock_;
  Params params_;
  const PresenceView& view_;
  const PrivacyRules& privacy_;
  SubscriptionId lastId_ = 0;
  std::map<SubscriptionId, Subscription> subscriptions_;
  std::unordered_map<std::string, std::vector<SubscriptionId>> byTarget_;
  std::size_t targetsWatched_ = 0;
};

}  // namespace zkagent::presence
