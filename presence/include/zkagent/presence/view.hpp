// Layer 3: the user-level view. A user is online iff any device is; going
// online is published at once, going offline only after offlineDebounce without any device coming
// back. A generation token per user makes every online event void a pending offline.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/leases.hpp"
#include "zkagent/presence/params.hpp"

namespace zkagent::presence {

// A user's published state. version grows by one with every published change of that user.
struct UserPresence {
  bool online = false;
  std::uint64_t version = 0;
  std::optional<TimePoint> lastSeen;  // when the last device left, once the user went offline
};

struct UserChange {
  const std::string& user;
  const UserPresence& presence;
  TimePoint at;
};

struct ViewCounters {
  // Device-level appearances and disappearances, counted apart from what was published: debounce
  // hides flapping from subscribers, this keeps it visible to operators (a TTL below the
  // renewal interval flaps the store while a 20 s debounce publishes nothing).
  std::uint64_t deviceFlaps = 0;
  std::uint64_t publishedChanges = 0;
};

class PresenceView {
 public:
  using PublishHandler = std::function<void(const UserChange&)>;

  // Throws std::invalid_argument for invalid params.
  PresenceView(Clock& clock, const Params& params, PublishHandler onPublish);

  void onDeviceChange(const DeviceChange& change);
  // nullopt if the user never had a device online.
  std::optional<UserPresence> published(std::string_view user) const;
  const ViewCounters& counters() const { return counters_; }

 private:
  struct UserState {
    std::unordered_set<std::string> onlineDevices;
    std::uint64_t generation = 0;
    UserPresence published;
  };

  void publish(const std::string& user, UserState& state, bool online, TimePoint lastSeen);

  TimerScope timers_;
  Params params_;
  PublishHandler onPublish_;
  std::unordered_map<std::string, UserState> users_;
  ViewCounters counters_;
};

}  // namespace zkagent::presence
