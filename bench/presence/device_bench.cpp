// device_bench: whole-system presence numbers (real ZooKeeper, fencing-gateway, zk-agent and
// zk-device simulator processes), printed as a table and one JSON object on the last line.
//
//   load       one agent leading A accounts holds N simulated devices (a ping every
//              --heartbeat-ms, default 1000): agent RSS per connection, heartbeats per agent
//              CPU-second, the simulators' CPU apart (they share the machine), heartbeat RTT
//              p50/p99 as the devices measure it (the median over the window's per-second STATS
//              lines); then the same devices on two references (--skip-peers leaves them out):
//              the Node.js ws server (bench/peers/ws_presence_peer.js, Debian's node-ws) and
//              epoll-floor-server, the floor of the loopback stack; the agent's ratios to both;
//              --load-per-simulator spreads the devices over more simulator processes;
//              --agents K splits the devices and accounts over K agents (agent i alone serves
//              every K-th account from the i-th, and gets N/K devices on simulators of its
//              own), all measured over the same window: the whole system's heartbeats/s and
//              heartbeats per agent CPU-second (summed over the agents), each agent's row beside
//              it (RSS per connection, heartbeats per CPU-second); no peers then. One process
//              may hold 20 000 fds here: 50 000 devices need --agents 3; --ramp-ms R starts
//              each simulator's devices evenly over R ms instead of all at once;
//   migration  D devices over A accounts on a leader; SIGTERM it: time from the signal until each
//              device is connected to the successor (p50/max), from a device's close until its
//              welcome there, each process's CPU meanwhile, and whether any device's lease was
//              missing at the gateway (its lease gauge every 20 ms, its removal and expiry
//              counters over the whole migration); --events-file writes the simulators' event
//              lines for a timeline; --migration-per-simulator spreads the devices over more
//              simulator processes (default 12500 each);
//   connects   C devices connect to one agent at once, without device tokens and with HS256 and
//              ES256 tokens (presence.auth; the simulators sign a token per device): the agent's
//              CPU per connect (upgrade, token check, welcome, lease) and connects per agent
//              CPU-second. The devices send no heartbeats meanwhile, so the CPU is the connects'.
//              Then the same devices (no tokens) pointed at an agent that does not lead their
//              accounts, following its 307, then its in-band 4001 (redirect=close): the
//              follower's CPU per redirect beside the leader's per connect.
//
// With --tls every agent serves wss:// (presence.tls, the test certificates of
// scripts/make-test-certs) and every device checks it against the test CA: the same scenarios
// with TLS, for the memory per connection and the cost of a TLS connect.
//
// usage: device_bench [--devices N] [--accounts A] [--migration-devices D] [--seconds S]
//                     [--connect-devices C] [--skip-load] [--skip-migration] [--skip-connects]
//                     [--tls] [--migration-per-simulator M] [--events-file F]
//                     [--heartbeat-ms H] [--skip-peers] [--load-per-simulator L]
//                     [--agents K] [--ramp-ms R]
//
// The harness (processes, ZooKeeper, metrics) is device_bench_harness.cpp, each scenario its own
// file (load_scenario.cpp, migration_scenario.cpp, connects_scenario.cpp).
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "device_bench_harness.hpp"

namespace {

using device_bench::kDevicesPerSimulator;
using device_bench::Options;
using nlohmann::json;

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> size_t {
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": needs a value");
      return std::stoul(argv[++i]);
    };
    if (arg == "--devices") {
      o.devices = next();
    } else if (arg == "--accounts") {
      o.accounts = next();
    } else if (arg == "--migration-devices") {
      o.migrationDevices = next();
    } else if (arg == "--connect-devices") {
      o.connectDevices = next();
    } else if (arg == "--skip-connects") {
      o.connects = false;
    } else if (arg == "--seconds") {
      o.seconds = static_cast<int>(next());
    } else if (arg == "--heartbeat-ms") {
      o.heartbeatMs = static_cast<int>(std::clamp<size_t>(next(), 50, 60000));
    } else if (arg == "--agents") {
      o.agents = std::clamp<size_t>(next(), 1, 64);
    } else if (arg == "--ramp-ms") {
      o.rampMs = static_cast<int>(std::min<size_t>(next(), 600000));
    } else if (arg == "--skip-peers") {
      o.peers = false;
    } else if (arg == "--load-per-simulator") {
      o.loadPerSimulator = std::clamp<size_t>(next(), 1, kDevicesPerSimulator);
    } else if (arg == "--skip-load") {
      o.load = false;
    } else if (arg == "--skip-migration") {
      o.migration = false;
    } else if (arg == "--tls") {
      o.tls = true;
    } else if (arg == "--migration-per-simulator") {
      o.migrationPerSimulator = std::clamp<size_t>(next(), 1, kDevicesPerSimulator);
    } else if (arg == "--events-file") {
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": needs a value");
      o.eventsFile = argv[++i];
    } else {
      throw std::invalid_argument("unknown argument " + arg);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  device_bench::Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "device_bench: " << e.what() << "\n";
    return 2;
  }
  device_bench::raiseFileLimit(200000);
  json report{{"tls", options.tls}};
  try {
    device_bench::Bench bench(options);
    if (options.load) {
      std::cerr << "load: " << options.devices << " devices over " << options.accounts
                << " accounts on " << options.agents << " agent(s)\n";
      report["load"] = device_bench::loadScenario(bench);
      std::cout << "load      " << report["load"].dump() << "\n";
    }
    if (options.migration) {
      std::cerr << "migration: " << options.migrationDevices << " devices, leader SIGTERM\n";
      report["migration"] = device_bench::migrationScenario(bench);
      std::cout << "migration " << report["migration"].dump() << "\n";
    }
    if (options.connects) {
      report["connects"] = device_bench::connectsScenario(bench);
      std::cout << "connects  " << report["connects"].dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "device_bench failed: " << e.what() << "\n";
    return 1;
  }
  std::cout << report.dump() << std::endl;
  return 0;
}
