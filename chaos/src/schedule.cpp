#include "schedule.hpp"

#include <algorithm>
#include <random>

namespace zkagent::chaos {

std::string_view toString(FaultKind kind) {
  switch (kind) {
    case FaultKind::agent_kill:
      return "agent_kill";
    case FaultKind::agent_pause:
      return "agent_pause";
    case FaultKind::agent_partition:
      return "agent_partition";
    case FaultKind::zk_kill_agent_server:
      return "zk_kill_agent_server";
    case FaultKind::zk_kill_leader:
      return "zk_kill_leader";
    case FaultKind::gateway_kill:
      return "gateway_kill";
    case FaultKind::gateway_pause:
      return "gateway_pause";
    case FaultKind::stale_delivery:
      return "stale_delivery";
    case FaultKind::agent_gateway_partition:
      return "agent_gateway_partition";
    case FaultKind::gateway_zk_partition:
      return "gateway_zk_partition";
    case FaultKind::agent_clock_step:
      return "agent_clock_step";
    case FaultKind::gateway_clock_step:
      return "gateway_clock_step";
    case FaultKind::gateway_disk_full:
      return "gateway_disk_full";
    case FaultKind::device_storm:
      return "device_storm";
  }
  return "?";
}

namespace {

bool touchesZooKeeper(FaultKind k) {
  return k == FaultKind::zk_kill_agent_server || k == FaultKind::zk_kill_leader;
}
bool touchesGateway(FaultKind k) {
  return k == FaultKind::gateway_kill || k == FaultKind::gateway_pause ||
         k == FaultKind::gateway_zk_partition || k == FaultKind::gateway_clock_step ||
         k == FaultKind::gateway_disk_full;
}
bool hasAgent(FaultKind k) {
  return k == FaultKind::agent_kill || k == FaultKind::agent_pause ||
         k == FaultKind::agent_partition || k == FaultKind::zk_kill_agent_server ||
         k == FaultKind::agent_gateway_partition || k == FaultKind::agent_clock_step ||
         k == FaultKind::device_storm;
}

// Faults that may run together: at most one ZooKeeper server down (the ensemble keeps its
// quorum), one fault per agent and per gateway, and stale_delivery alone (it times its steps on
// the run's state, which a second fault would blur).
bool compatible(const std::vector<Fault>& chosen, const Fault& next) {
  for (const Fault& f : chosen) {
    if (f.kind == FaultKind::stale_delivery || next.kind == FaultKind::stale_delivery) return false;
    if (touchesZooKeeper(f.kind) && touchesZooKeeper(next.kind)) return false;
    if (touchesGateway(f.kind) && touchesGateway(next.kind)) return false;
    if (f.agent >= 0 && f.agent == next.agent) return false;
  }
  return true;
}

}  // namespace

std::vector<Event> makeSchedule(const ScheduleOptions& options) {
  // mt19937_64 is fully specified by the standard and no std distribution (whose algorithms
  // vary between libraries) is used; the draw order is fixed, so a seed is a replay.
  std::mt19937_64 rng(options.seed);
  auto uniform = [&](int lo, int hi) {
    return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const int session = options.sessionTimeoutMs;
  // Relative weights of the kinds, in kAllFaultKinds order.
  const int partitionWeight = options.gatewayPartitions ? 3 : 0;
  const int clockWeight = options.clockSteps ? 3 : 0;
  const int diskWeight = options.diskFaults ? 3 : 0;
  const int stormWeight = options.deviceStorms && !options.noProcessKills ? 3 : 0;
  const int killWeight = options.noProcessKills ? 0 : 4;
  const int gatewayKillWeight = options.noProcessKills ? 0 : 3;
  const bool cluster = options.gateways > 1;
  const int staleWeight = cluster ? 0 : 2;
  const int agentGatewayWeight = cluster ? 0 : partitionWeight;
  // clang-format off
  const int weights[] = {killWeight, 4, 4, 2, 2, gatewayKillWeight, 2, staleWeight,
                         agentGatewayWeight, partitionWeight,
                         clockWeight, clockWeight,
                         diskWeight,
                         stormWeight};
  // clang-format on
  int total = 0;
  for (int w : weights) total += w;

  auto drawFault = [&]() {
    int pick = uniform(0, total - 1);
    std::size_t kindIndex = 0;
    while (pick >= weights[kindIndex]) pick -= weights[kindIndex++];
    Fault f{kAllFaultKinds[kindIndex], -1, 0};
    if (hasAgent(f.kind)) f.agent = uniform(0, options.agents - 1);
    switch (f.kind) {
      case FaultKind::agent_kill:
      case FaultKind::device_storm:  // how long the killed agent stays down
        f.durationMs = uniform(200, 2500);
        break;
      case FaultKind::agent_pause:  // always past the session timeout
        f.durationMs = session + uniform(300, 2000);
        break;
      case FaultKind::agent_partition:  // shorter ones only suspend, longer ones expire
        f.durationMs = uniform(300, session + 2000);
        break;
      case FaultKind::zk_kill_agent_server:
      case FaultKind::zk_kill_leader:
        f.durationMs = uniform(300, 3000);
        break;
      case FaultKind::gateway_kill:
        f.durationMs = uniform(100, 2000);
        break;
      case FaultKind::gateway_pause:
        f.durationMs = uniform(200, 1500);
        break;
      case FaultKind::stale_delivery:  // how long the ZooKeeper link stays cut after delivery
        f.durationMs = uniform(200, 1000);
        break;
      // Shorter than the agent's gateway heartbeat timeout (700 ms) only delays; longer ones
      // mark the link down, and the agent hands its accounts over.
      case FaultKind::agent_gateway_partition:
        f.durationMs = uniform(300, 3000);
        break;
      // Shorter than the session timeout the gateway's session survives; longer ones expire it.
      case FaultKind::gateway_zk_partition:
        f.durationMs = uniform(300, session + 2000);
        break;
      // A jump of a minute to two hours, forward or back (an NTP step, a VM restored from a
      // snapshot); the monotonic clock does not move.
      case FaultKind::agent_clock_step:
      case FaultKind::gateway_clock_step:
        f.durationMs = uniform(1000, 5000);
        f.stepSeconds = uniform(60, 7200) * (uniform(0, 1) == 0 ? -1 : 1);
        break;
      // The gateway refuses every write while full and takes its log back within a second of
      // the space returning.
      case FaultKind::gateway_disk_full:
        f.durationMs = uniform(500, 3000);
        break;
    }
    return f;
  };

  std::vector<Event> schedule;
  for (int i = 0; i < options.events; ++i) {
    Event event;
    event.index = i;
    if (options.breakFencing) {
      event.faults.push_back({FaultKind::stale_delivery, -1, 500});
    } else {
      event.faults.push_back(drawFault());
      // Now and then several faults at once.
      if (uniform(0, 99) < 20) {
        const int extra = uniform(1, 2);
        for (int tries = 0; tries < 8 && static_cast<int>(event.faults.size()) <= extra; ++tries) {
          Fault f = drawFault();
          if (compatible(event.faults, f)) event.faults.push_back(f);
        }
      }
    }
    event.calmAfterMs = uniform(300, 1200);
    schedule.push_back(std::move(event));
  }
  return schedule;
}

}  // namespace zkagent::chaos
