// The presence experiments (detection latency, renewal peak, negative control), run on the virtual
// clock: deterministic for a given seed and well under a second of real time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace zkagent::presence::experiments {

// Seconds from a device actually leaving to its user's offline being published.
struct LatencyStats {
  double min = 0;
  double median = 0;
  double max = 0;
  double bound = 0;  // bounds() for this way of leaving
};

// Store-side renewals after every gateway restarted at the same instant.
struct RenewalPeak {
  std::uint64_t peakPerSecond = 0;  // lease entries renewed in the busiest second
  std::uint64_t finalLeases = 0;
};

// TTL 50 s below the renewal interval of 60 s, no jitter, 1000 s, one device.
struct NegativeControl {
  std::uint64_t leaseExpirations = 0;
  std::uint64_t publishedDebounce20 = 0;
  std::uint64_t publishedDebounce0 = 0;
  std::uint64_t deviceFlaps = 0;
};

struct Report {
  LatencyStats close;
  LatencyStats halfOpen;
  LatencyStats gatewayCrash;
  RenewalPeak noJitter;
  RenewalPeak jitter;
  NegativeControl negativeControl;
};

// The renewal peak alone: 20 gateways restart together with 250 connections each; renewJitter 0 or
// the default.
RenewalPeak measureRenewalPeak(double renewJitter, std::uint64_t seed);

// The negative control alone, run with debounce 20 s and 0 s.
NegativeControl measureNegativeControl(std::uint64_t seed);

// Runs all three experiments. Throws std::logic_error if a device's offline is never published
// (the model broke its own contract).
Report run(std::uint64_t seed);

// Exactly three top-level keys: detection_latency, renewal_peak, negative_control.
nlohmann::json toJson(const Report& report);
std::string toTable(const Report& report);

}  // namespace zkagent::presence::experiments
