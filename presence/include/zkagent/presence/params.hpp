// Parameters of the three heartbeat layers (device heartbeat, lease renewal, debounced view) and
// the worst-case detection delays they imply (bounds() below).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "zkagent/presence/clock.hpp"

namespace zkagent::presence {

using Seconds = std::chrono::seconds;

struct Params {
  // Layer 1, device -> leader agent: one-way heartbeats, each interval x U[1 - jitter, 1]
  // (27-30 s); 0 disables heartbeats, and then pingTimeout must be 0 too.
  Millis heartbeatInterval = Seconds{30};
  double heartbeatJitter = 0.1;
  // A connection is dead after pingTimeout without a heartbeat, checked every checkInterval;
  // 0 disables the check (no connection is ever timed out). Must exceed 2 x heartbeatInterval: one
  // lost ping is fine.
  Millis pingTimeout = Seconds{75};
  Millis checkInterval = Seconds{5};
  // Layer 2, leader agent -> store: batched renewal; the first one uniform in [0, renewInterval],
  // then renewInterval x U[1 - renewJitter, 1 + renewJitter].
  Millis renewInterval = Seconds{60};
  double renewJitter = 0.1;
  // Store: a lease lives leaseTtl after its last renewal, swept every sweepInterval. Must exceed
  // 2 x renewInterval: one failed renewal is fine.
  Millis leaseTtl = Seconds{150};
  Millis sweepInterval = Seconds{5};
  // Layer 3, view: a user's offline is published only if no device came back within this delay.
  Millis offlineDebounce = Seconds{20};
  // Coarse privacy says "recently" for this long after the user was last seen.
  Millis coarseRecentWindow = Seconds{86400};
  // Lets the two safety margins above be violated: only for the negative control (TTL
  // below the renewal interval).
  bool allowUnsafe = false;
};

// Every problem with `params`, each message naming the parameter; empty when valid.
std::vector<std::string> validationErrors(const Params& params);
// Throws std::invalid_argument listing validationErrors() if there are any.
void validate(const Params& params);

// Worst-case delay from a device actually leaving to its user's offline being published.
struct Bounds {
  Millis close;  // active close: offlineDebounce
  std::optional<Millis>
      halfOpen;         // pingTimeout + checkInterval + offlineDebounce; none if unchecked
  Millis gatewayCrash;  // leaseTtl + sweepInterval + offlineDebounce
};
// 20 s / 100 s / 175 s with the defaults. gatewayCrash is also the longest false "online".
Bounds bounds(const Params& params);

}  // namespace zkagent::presence
