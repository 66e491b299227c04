#include "experiments.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "zkagent/presence.hpp"
#include "zkagent/presence/simulation.hpp"

namespace zkagent::presence::experiments {
namespace {

using Seconds = std::chrono::seconds;

constexpr int kLatencyDevices = 300;
constexpr int kGateways = 20;
constexpr int kConnectionsPerGateway = 250;  // 5000 in all

double toSeconds(Millis value) { return std::chrono::duration<double>(value).count(); }

TimePoint randomTime(StableRandom& random, Seconds from, Seconds to) {
  return TimePoint{} + random.scale(Millis{to - from}, 0, 1) + from;
}

enum class Leaving { Close, HalfOpen, GatewayCrash };

// Detection latency: 300 devices, one per user, on one leader agent; each leaves at a random time
// (a crash takes them all at one random time).
LatencyStats measureDetection(Leaving way, std::uint64_t seed) {
  const Params params;
  VirtualClock clock;
  std::unordered_map<std::string, TimePoint> leftAt;
  std::vector<double> delays;
  PresenceService service(clock, params, [&](const UserChange& change) {
    auto left = leftAt.find(change.user);
    if (!change.presence.online && left != leftAt.end()) {
      delays.push_back(toSeconds(change.at - left->second));
    }
  });
  ConnectionTable gateway(clock, params, {"gateway-1", 1}, service.leases(), {}, seed);
  StableRandom random("detection-latency", seed);

  std::vector<std::unique_ptr<SimulatedDevice>> devices;
  for (int i = 0; i < kLatencyDevices; ++i) {
    auto& device = *devices.emplace_back(std::make_unique<SimulatedDevice>(
        clock, params, DeviceKey{"user-" + std::to_string(i), "phone"}, seed));
    clock.scheduleAt(randomTime(random, Seconds{0}, Seconds{60}),
                     [&device, &gateway] { device.connect(gateway); });
  }
  if (way == Leaving::GatewayCrash) {
    clock.scheduleAt(randomTime(random, Seconds{120}, Seconds{720}), [&] {
      for (const auto& device : devices) leftAt[device->key().user] = clock.now();
      gateway.crash();
    });
  } else {
    for (const auto& device : devices) {
      clock.scheduleAt(randomTime(random, Seconds{120}, Seconds{720}), [&, raw = device.get()] {
        leftAt[raw->key().user] = clock.now();
        way == Leaving::Close ? raw->close() : raw->goHalfOpen();
      });
    }
  }
  clock.runUntil(TimePoint{} + Seconds{1200});

  if (delays.size() != devices.size()) {
    throw std::logic_error("detection experiment: " + std::to_string(delays.size()) + " of " +
                           std::to_string(devices.size()) + " offlines were published");
  }
  std::sort(delays.begin(), delays.end());
  const std::size_t middle = delays.size() / 2;
  const Bounds bound = bounds(params);
  const Millis wayBound = way == Leaving::Close      ? bound.close
                          : way == Leaving::HalfOpen ? *bound.halfOpen
                                                     : bound.gatewayCrash;
  return LatencyStats{.min = delays.front(),
                      .median = (delays[middle - 1] + delays[middle]) / 2,
                      .max = delays.back(),
                      .bound = toSeconds(wayBound)};
}

// Counts the lease entries the store receives per second of virtual time, once enabled.
class RenewalCounter final : public LeaseWriter {
 public:
  RenewalCounter(Clock& clock, LeaseWriter& store) : clock_(clock), store_(store) {}
  void enable() { enabled_ = true; }
  std::uint64_t peakPerSecond() const {
    std::uint64_t peak = 0;
    for (const auto& [second, count] : perSecond_) peak = std::max(peak, count);
    return peak;
  }
  void renew(std::string_view holder, std::span<const LeaseEntry> entries) override {
    if (enabled_) {
      const auto second = std::chrono::floor<Seconds>(clock_.now()).time_since_epoch().count();
      perSecond_[second] += entries.size();
    }
    store_.renew(holder, entries);
  }
  void remove(const DeviceKey& key, Epoch epoch, LeaveReason reason) override {
    store_.remove(key, epoch, reason);
  }

 private:
  Clock& clock_;
  LeaseWriter& store_;
  bool enabled_ = false;
  std::map<std::int64_t, std::uint64_t> perSecond_;
};

}  // namespace

// Renewal peak: 20 leader agents restart at the same instant and their 5000 devices reconnect at
// once; only the periodic renewals that follow are counted, not the reconnections themselves.
RenewalPeak measureRenewalPeak(double renewJitter, std::uint64_t seed) {
  Params params;
  params.renewJitter = renewJitter;
  VirtualClock clock;
  PresenceService service(clock, params);
  RenewalCounter counter(clock, service.leases());
  std::vector<std::unique_ptr<ConnectionTable>> gateways;
  std::vector<std::unique_ptr<SimulatedDevice>> devices;
  for (int g = 0; g < kGateways; ++g) {
    const std::string name = "gateway-" + std::to_string(g + 1);
    auto& gateway = *gateways.emplace_back(std::make_unique<ConnectionTable>(
        clock, params, HolderIdentity{name, static_cast<std::uint64_t>(g + 1)}, counter,
        ConnectionTable::TimeoutHandler{}, seed));
    for (int c = 0; c < kConnectionsPerGateway; ++c) {
      const DeviceKey key{name + "-user-" + std::to_string(c), "phone"};
      devices.emplace_back(std::make_unique<SimulatedDevice>(clock, params, key, seed))
          ->connect(gateway);
    }
  }
  counter.enable();
  clock.runUntil(TimePoint{} + Seconds{600});
  return RenewalPeak{counter.peakPerSecond(), service.leases().size()};
}

namespace {

struct ControlRun {
  std::uint64_t expirations;
  std::uint64_t published;
  std::uint64_t deviceFlaps;
};

ControlRun runNegativeControl(Millis debounce, std::uint64_t seed) {
  Params params;
  params.leaseTtl = Seconds{50};
  params.renewInterval = Seconds{60};
  params.renewJitter = 0;
  params.offlineDebounce = debounce;
  params.allowUnsafe = true;
  VirtualClock clock;
  PresenceService service(clock, params);
  ConnectionTable gateway(clock, params, {"gateway-1", 1}, service.leases(), {}, seed);
  SimulatedDevice device(clock, params, {"user-1", "phone"}, seed);
  device.connect(gateway);
  clock.runUntil(TimePoint{} + Seconds{1000});
  return ControlRun{service.leases().counters().leaseExpirations,
                    service.view().counters().publishedChanges,
                    service.view().counters().deviceFlaps};
}

nlohmann::json latencyJson(const LatencyStats& stats) {
  return {{"min", stats.min}, {"median", stats.median}, {"max", stats.max}, {"bound", stats.bound}};
}

nlohmann::json renewalJson(const RenewalPeak& peak) {
  return {{"peak_per_second", peak.peakPerSecond}, {"final_leases", peak.finalLeases}};
}

std::string format(const char* pattern, auto... values) {
  char line[160];
  std::snprintf(line, sizeof line, pattern, values...);
  return line;
}

}  // namespace

// Negative control: a TTL shorter than the renewal interval flaps the store; debounce hides it from
// subscribers, the device-level flap count does not.
NegativeControl measureNegativeControl(std::uint64_t seed) {
  const ControlRun debounced = runNegativeControl(Seconds{20}, seed);
  const ControlRun undebounced = runNegativeControl(Seconds{0}, seed);
  return NegativeControl{.leaseExpirations = debounced.expirations,
                         .publishedDebounce20 = debounced.published,
                         .publishedDebounce0 = undebounced.published,
                         .deviceFlaps = debounced.deviceFlaps};
}

Report run(std::uint64_t seed) {
  return Report{.close = measureDetection(Leaving::Close, seed),
                .halfOpen = measureDetection(Leaving::HalfOpen, seed),
                .gatewayCrash = measureDetection(Leaving::GatewayCrash, seed),
                .noJitter = measureRenewalPeak(0, seed),
                .jitter = measureRenewalPeak(Params{}.renewJitter, seed),
                .negativeControl = measureNegativeControl(seed)};
}

nlohmann::json toJson(const Report& report) {
  const NegativeControl& control = report.negativeControl;
  return {
      {"detection_latency",
       {{"close", latencyJson(report.close)},
        {"half_open", latencyJson(report.halfOpen)},
        {"gateway_crash", latencyJson(report.gatewayCrash)}}},
      {"renewal_peak",
       {{"no_jitter", renewalJson(report.noJitter)}, {"jitter", renewalJson(report.jitter)}}},
      {"negative_control",
       {{"lease_expirations", control.leaseExpirations},
        {"published_debounce_20", control.publishedDebounce20},
        {"published_debounce_0", control.publishedDebounce0},
        {"device_flaps", control.deviceFlaps}}},
  };
}

std::string toTable(const Report& report) {
  std::string out = "Detection latency, seconds (300 devices, random leave times)\n";
  out += format("  %-14s %8s %8s %8s %8s\n", "leaving by", "min", "median", "max", "bound");
  const std::pair<const char*, const LatencyStats*> rows[] = {
      {"close", &report.close},
      {"half-open", &report.halfOpen},
      {"gateway crash", &report.gatewayCrash}};
  for (const auto& [name, stats] : rows) {
    out += format("  %-14s %8.1f %8.1f %8.1f %8.0f\n", name, stats->min, stats->median, stats->max,
                  stats->bound);
  }
  out += "\nRenewals at the store after 20 gateways restart together (5000 connections)\n";
  out += format("  %-14s %14s %14s\n", "jitter", "peak/second", "final leases");
  out +=
      format("  %-14s %14s %14s\n", "none", std::to_string(report.noJitter.peakPerSecond).c_str(),
             std::to_string(report.noJitter.finalLeases).c_str());
  out += format("  %-14s %14s %14s\n", "+-10%, spread",
                std::to_string(report.jitter.peakPerSecond).c_str(),
                std::to_string(report.jitter.finalLeases).c_str());
  const NegativeControl& control = report.negativeControl;
  out += "\nNegative control: TTL 50 s, renewal 60 s, no jitter, 1000 s\n";
  out += format("  %-34s %6s\n", "lease expirations",
                std::to_string(control.leaseExpirations).c_str());
  out += format("  %-34s %6s\n", "published changes, debounce 20 s",
                std::to_string(control.publishedDebounce20).c_str());
  out += format("  %-34s %6s\n", "published changes, debounce 0 s",
                std::to_string(control.publishedDebounce0).c_str());
  out += format("  %-34s %6s\n", "device flaps (debounce 20 s)",
                std::to_string(control.deviceFlaps).c_str());
  return out;
}

}  // namespace zkagent::presence::experiments
