// chaos-runner's command line: what a run is made of (events, seed, accounts, agents, timings).
#pragma once

#include <cstdint>
#include <filesystem>

#include "schedule.hpp"

namespace zkagent::chaos {

struct Options {
  int events = 40;
  // When > 0, the run ends with the first event that heals this long after the load started
  // (a soak: scripts/soak), or with the schedule's last event, whichever comes first.
  int durationS = 0;
  std::uint64_t seed = 1;
  std::filesystem::path out;
  int accounts = 50;
  int agents = 3;
  // 1: one gateway (no cluster). 2 or 3: a gateway cluster of that many, kClusterShards shards
  // (docs/testing.md "Cluster mode").
  int gateways = 1;
  bool breakFencing = false;
  bool gatewayPartitions = false;  // also draw the partitions around the gateway (schedule.hpp)
  // The gateway's data dir on a tmpfs the nemesis fills (zktest/small_filesystem.hpp).
  bool diskFaults = false;
  bool deviceStorms = false;    // also draw device_storm: every device reconnects at once
  bool noProcessKills = false;  // no fault kills an agent, the gateway or the devices (a soak)
  bool clockSteps = false;  // also draw wall-clock steps (libfaketime under every agent, gateway)
  bool printSchedule = false;  // print the schedule as JSON and exit: nothing is started
  int sessionTimeoutMs = 1500;
  int workersPerAgent = 2;
  int devicesPerAccount = 2;  // simulated devices (one zk-device process); 0: none
  int deviceTimingScale = 1;  // every presence timing this many times longer (run.hpp)
  int extraCalmMs = 0;        // quiet time added after every event (a soak's faults are periodic)
  int gatewayCompactAfterMib = -1;  // the gateway's --compact-after-mib; -1: its default
  int thinkMs = 20;
  std::filesystem::path binDir;
};

// Exits 2 naming the flag on bad input, 0 after --help.
Options parseOptions(int argc, char** argv);

// What of the options decides the schedule (the same for --print-schedule and a run).
ScheduleOptions scheduleOptions(const Options& options);

}  // namespace zkagent::chaos
