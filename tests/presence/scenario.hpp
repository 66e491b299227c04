// A small world on the virtual clock for presence tests: one store side, one leader agent, and a
// record of every published change and every lease renewal.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zkagent/presence.hpp"
#include "zkagent/presence/simulation.hpp"

namespace zkagent::presence::testing {

inline TimePoint at(double seconds) {
  return TimePoint{} + std::chrono::round<Millis>(std::chrono::duration<double>(seconds));
}
inline double secondsOf(TimePoint t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// Heartbeats and the timeout check off (both set to 0), for tests that connect without devices.
inline Params withoutHeartbeats() {
  Params params;
  params.heartbeatInterval = Millis{0};
  params.pingTimeout = Millis{0};
  return params;
}

struct Published {
  std::string user;
  bool online;
  std::uint64_t version;
  TimePoint at;
};

// Forwards to the store and remembers when each device's lease was last sent for renewal.
class RenewalLog final : public LeaseWriter {
 public:
  RenewalLog(Clock& clock, LeaseWriter& store) : clock_(clock), store_(store) {}
  void renew(std::string_view holder, std::span<const LeaseEntry> entries) override {
    batchTimes.push_back(clock_.now());
    for (const LeaseEntry& entry : entries) lastRenewal[entry.key.user] = clock_.now();
    store_.renew(holder, entries);
  }
  void remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) override {
    store_.remove(key, epoch, reason);
  }

  std::vector<TimePoint> batchTimes;             // every renew call, connects included
  std::map<std::string, TimePoint> lastRenewal;  // by user

 private:
  Clock& clock_;
  LeaseWriter& store_;
};

struct Scenario {
  explicit Scenario(Params p = {})
      : params(p),
        service(clock, params,
                [this](const UserChange& change) {
                  published.push_back(Published{change.user, change.presence.online,
                                                change.presence.version, change.at});
                }),
        renewals(clock, service.leases()),
        gateway(clock, params, {"gateway-a", 1}, renewals) {}

  SimulatedDevice& device(const std::string& user, const std::string& name = "phone") {
    return *devices.emplace_back(
        std::make_unique<SimulatedDevice>(clock, params, DeviceKey{user, name}, 0));
  }
  void runUntil(double seconds) { clock.runUntil(at(seconds)); }
  std::vector<Published> changesOf(const std::string& user) const {
    std::vector<Published> result;
    for (const Published& change : published) {
      if (change.user == user) result.push_back(change);
    }
    return result;
  }

  Params params;
  VirtualClock clock;
  std::vector<Published> published;
  PresenceService service;
  RenewalLog renewals;
  ConnectionTable gateway;
  std::vector<std::unique_ptr<SimulatedDevice>> devices;
};

}  // namespace zkagent::presence::testing
