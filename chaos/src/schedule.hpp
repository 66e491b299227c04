#pragma once
// The nemesis schedule of a chaos run: a pure function of the seed, so the same seed replays the
// same faults in the same order with the same durations. Targets that depend on the run's state
// (the ZooKeeper server an agent is connected to, the ensemble's leader, the agent that leads the
// most accounts) are resolved when the fault starts and logged with the event.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zkagent::chaos {

enum class FaultKind {
  agent_kill,            // kill -9 an agent, restart it after `durationMs`
  agent_pause,           // SIGSTOP an agent past its session timeout, then SIGCONT
  agent_partition,       // blackhole the agent's ZooKeeper links, heal after `durationMs`
  zk_kill_agent_server,  // kill -9 the ZooKeeper server the agent is connected to, restart
  zk_kill_leader,        // kill -9 the ensemble's leader, restart
  gateway_kill,          // kill -9 the gateway, restart on the same data dir and port
  gateway_pause,         // SIGSTOP the gateway briefly
  stale_delivery,        // hold the busiest leader's gateway link, cut its ZooKeeper link until a
                         // successor leads, then deliver the held (now stale) operations
  // Drawn only with ScheduleOptions::gatewayPartitions:
  agent_gateway_partition,  // blackhole one agent's links to the gateway (ZooKeeper stays)
  gateway_zk_partition,     // blackhole the gateway's ZooKeeper links (the agents stay)
  // Drawn only with ScheduleOptions::clockSteps:
  agent_clock_step,    // step one agent's wall clock by `stepSeconds`, back after `durationMs`
  gateway_clock_step,  // the same for the gateway
  // Drawn only with ScheduleOptions::diskFaults:
  gateway_disk_full,  // fill the gateway's data filesystem to the last byte, free it after
  // Drawn only with ScheduleOptions::deviceStorms:
  device_storm,  // kill -9 an agent and every device at once; the devices come back together
};
inline constexpr FaultKind kAllFaultKinds[] = {FaultKind::agent_kill,
                                               FaultKind::agent_pause,
                                               FaultKind::agent_partition,
                                               FaultKind::zk_kill_agent_server,
                                               FaultKind::zk_kill_leader,
                                               FaultKind::gateway_kill,
                                               FaultKind::gateway_pause,
                                               FaultKind::stale_delivery,
                                               FaultKind::agent_gateway_partition,
                                               FaultKind::gateway_zk_partition,
                                               FaultKind::agent_clock_step,
                                               FaultKind::gateway_clock_step,
                                               FaultKind::gateway_disk_full,
                                               FaultKind::device_storm};

std::string_view toString(FaultKind kind);

struct Fault {
  FaultKind kind;
  int agent = -1;       // agent index for agent_* and zk_kill_agent_server, else -1
  int durationMs = 0;   // how long the fault lasts before it is healed
  int stepSeconds = 0;  // clock steps: how far the wall clock jumps (either way)
};

struct Event {
  int index = 0;
  std::vector<Fault> faults;  // one, or several started together
  int calmAfterMs = 0;        // quiet time after the event settled
};

struct ScheduleOptions {
  std::uint64_t seed = 1;
  int events = 40;
  int agents = 3;
  // More than 1 (a gateway cluster): stale_delivery and agent_gateway_partition are not drawn
  // (both act on an agent's link to one configured gateway, and in a cluster an agent routes to
  // the shards' owners by itself); 1: a seed's schedule is unchanged.
  int gateways = 1;
  int sessionTimeoutMs = 1500;
  bool breakFencing = false;  // every event is a stale_delivery (the negative control)
  // Also draw agent_gateway_partition and gateway_zk_partition. Off, the schedule of a seed is
  // what it was before they existed.
  bool gatewayPartitions = false;
  // Also draw agent_clock_step and gateway_clock_step; off, a seed's schedule is unchanged.
  bool clockSteps = false;
  // Also draw gateway_disk_full; off, a seed's schedule is unchanged.
  bool diskFaults = false;
  // Also draw device_storm; off, a seed's schedule is unchanged.
  bool deviceStorms = false;
  // Never draw a fault that kills a zkagent process (agent_kill, gateway_kill, device_storm), so
  // that a soak follows each process for the whole run; off, a seed's schedule is unchanged.
  bool noProcessKills = false;
};

std::vector<Event> makeSchedule(const ScheduleOptions& options);

}  // namespace zkagent::chaos
