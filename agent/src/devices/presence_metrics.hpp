// The presence runtime's metric families (docs/agent.md "Metrics"): low cardinality, no account
// or device labels. Shared by the device endpoint and the lease writer.
#pragma once

#include "zkagent/metrics.hpp"

namespace zkagent::agent::detail {

struct PresenceMetrics {
  explicit PresenceMetrics(metrics::Registry& registry);

  metrics::GaugeFamily& connections;     // {state}: upgrading, open, closing
  metrics::Counter& heartbeats;          // pings answered
  metrics::Counter& pingTimeouts;        // connections closed with 4002
  metrics::Counter& pingFloods;          // connections closed (1008) over the ping rate limit
  metrics::CounterFamily& redirects;     // {code}: 307, 503
  metrics::CounterFamily& refused;       // {reason}: upgrades refused before the handshake
  metrics::CounterFamily& closes;        // {code}: close frames the agent sent
  metrics::Counter& leaderMovedCloses;   // connections closed with 4001
  metrics::CounterFamily& leaseBatches;  // {result}: sent, failed
  metrics::CounterFamily& leaseEntries;  // {kind, result}: renew|remove x sent|dropped|failed
  metrics::CounterFamily& leaseDropped;  // {kind}: renew|remove dropped because the queue was full
  metrics::Gauge& leaseQueued;           // entries in the lease queue now
  metrics::Counter& fencedAccounts;      // accounts the gateway fenced
  metrics::Gauge& gatewayLeaseTtl;       // the lease TTL the gateway last reported, seconds
  metrics::CounterFamily& authRefused;   // {reason}: 401 failures by auth::nameOf, 403 mismatches
  metrics::Counter& tokenExpired;        // connections closed with 4003
};

}  // namespace zkagent::agent::detail
