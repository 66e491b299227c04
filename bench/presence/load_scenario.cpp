// device_bench load: one agent leading A accounts holds N simulated devices; then, with the same
// simulators, two references speaking the device protocol as far as a heartbeat goes: the Node.js
// `ws` server (bench/peers/ws_presence_peer.js) and epoll-floor-server, the floor of this
// machine's loopback stack (one write per pong).
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "device_bench_harness.hpp"
#include "zkbench/stats.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/metrics.hpp"

namespace device_bench {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using zktest::ChildProcess;

namespace {

// A server the devices heartbeat to, the heartbeats it has answered by its own count, and the
// devices (over the accounts in `accounts`) it gets.
struct HeartbeatServer {
  pid_t pid;
  std::string url;
  std::function<double()> heartbeatsAnswered;
  std::filesystem::path accounts;
  size_t devices;
};

double median(std::vector<double> v) { return v.empty() ? -1.0 : zkbench::quantile(v, 0.5); }

// The simulators of one server, and what their STATS lines said last.
struct DeviceGroup {
  std::vector<ChildProcess*> sims;
  std::vector<double> answered, answeredBefore, connected;
};

// Connects each server's devices to it (all servers at once, each with simulators of its own) and
// measures every server over the same window: RSS per connection (with the devices minus idle),
// heartbeats per server CPU-second, and the RTT the devices see. The simulators' own count of
// answered heartbeats is beside the server's, as a check. One row per server.
std::vector<json> measure(Bench& bench, const std::vector<HeartbeatServer>& servers) {
  const Options& options = bench.options();
  std::vector<long> rssIdle;
  for (const auto& server : servers) rssIdle.push_back(rssKiB(server.pid));
  std::vector<DeviceGroup> groups(servers.size());
  std::vector<ChildProcess*> all;
  size_t total = 0;
  for (size_t s = 0; s < servers.size(); ++s) {
    // As many simulators as --load-per-simulator asks for, the devices spread evenly over them.
    const size_t devices = servers[s].devices;
    const size_t simulators = (devices + options.loadPerSimulator - 1) / options.loadPerSimulator;
    const size_t perSimulator = (devices + simulators - 1) / simulators;
    auto& group = groups[s];
    group.sims =
        bench.startDevices({servers[s].url}, servers[s].accounts, devices, false,
                           {"--heartbeat-ms", std::to_string(options.heartbeatMs), "--timeout-ms",
                            std::to_string(std::max(5000, 3 * options.heartbeatMs)), "--ramp-ms",
                            std::to_string(options.rampMs)},
                           perSimulator);
    group.answered.assign(group.sims.size(), 0);
    group.connected.assign(group.sims.size(), 0);
    all.insert(all.end(), group.sims.begin(), group.sims.end());
    total += devices;
  }
  bench.awaitConnected(all, total, 300s);
  std::this_thread::sleep_for(3s);  // let connection set-up work drain before measuring
  std::vector<long> rssLoaded;
  for (const auto& server : servers) rssLoaded.push_back(rssKiB(server.pid));

  // Every simulator prints one STATS line a second: cumulative counts, that second's RTT.
  auto readStats = [&](DeviceGroup& group, std::vector<double>* p50s, std::vector<double>* p99s) {
    for (size_t i = 0; i < group.sims.size(); ++i) {
      while (auto line = group.sims[i]->tryReadLine(0ms)) {
        if (!line->starts_with("STATS ")) continue;
        auto stats = statsOf(*line);
        group.answered[i] = stats["heartbeats_answered"];
        group.connected[i] = stats["connected"];
        if (p50s && std::isfinite(stats["rtt_p50_ms"])) p50s->push_back(stats["rtt_p50_ms"]);
        if (p99s && std::isfinite(stats["rtt_p99_ms"])) p99s->push_back(stats["rtt_p99_ms"]);
      }
    }
  };
  auto simulatorCpu = [](const DeviceGroup& group) {
    double cpu = 0;
    for (auto* sim : group.sims) cpu += cpuSeconds(sim->pid());
    return cpu;
  };
  std::vector<double> beatsBefore, cpuBefore, simCpuBefore;
  for (size_t s = 0; s < servers.size(); ++s) {
    readStats(groups[s], nullptr, nullptr);
    groups[s].answeredBefore = groups[s].answered;
    beatsBefore.push_back(servers[s].heartbeatsAnswered());
    cpuBefore.push_back(cpuSeconds(servers[s].pid));
    simCpuBefore.push_back(simulatorCpu(groups[s]));
  }
  const auto started = Clock::now();
  std::vector<std::vector<double>> p50s(servers.size()), p99s(servers.size());
  for (const auto end = started + std::chrono::seconds(options.seconds); Clock::now() < end;) {
    for (size_t s = 0; s < servers.size(); ++s) readStats(groups[s], &p50s[s], &p99s[s]);
    std::this_thread::sleep_for(100ms);
  }
  std::vector<double> beats, cpu, simCpu;
  for (size_t s = 0; s < servers.size(); ++s) {
    beats.push_back(servers[s].heartbeatsAnswered() - beatsBefore[s]);
    cpu.push_back(cpuSeconds(servers[s].pid) - cpuBefore[s]);
    simCpu.push_back(simulatorCpu(groups[s]) - simCpuBefore[s]);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  std::vector<json> rows;
  for (size_t s = 0; s < servers.size(); ++s) {
    readStats(groups[s], &p50s[s], &p99s[s]);
    // A server that falls behind loses devices to their timeouts: counted, not a failed run.
    double simulatorsAnswered = 0, connectedAtEnd = 0;
    for (size_t i = 0; i < groups[s].sims.size(); ++i) {
      simulatorsAnswered += groups[s].answered[i] - groups[s].answeredBefore[i];
      connectedAtEnd += groups[s].connected[i];
    }
    const double p99max =
        p99s[s].empty() ? -1.0 : *std::max_element(p99s[s].begin(), p99s[s].end());
    const auto devices = static_cast<double>(servers[s].devices);
    json row{
        {"devices", servers[s].devices},
        {"simulators", groups[s].sims.size()},
        {"rss_kib_idle", rssIdle[s]},
        {"rss_kib_with_devices", rssLoaded[s]},
        {"bytes_per_connection", static_cast<double>(rssLoaded[s] - rssIdle[s]) * 1024.0 / devices},
        {"heartbeats_per_second", beats[s] / elapsed},
        {"simulators_answered_per_second", simulatorsAnswered / elapsed},
        {"devices_connected_at_end", connectedAtEnd},
        {"cpu_cores", cpu[s] / elapsed},
        {"heartbeats_per_cpu_second", cpu[s] > 0 ? beats[s] / cpu[s] : 0},
        {"simulator_cpu_cores", simCpu[s] / elapsed},
        {"rtt_p50_ms", median(p50s[s])},
        {"rtt_p99_ms", median(p99s[s])},
        {"rtt_p99_ms_worst_second", p99max}};
    std::cerr << "  " << row.dump() << "\n";
    rows.push_back(std::move(row));
  }
  return rows;
}

// The whole system of several agents measured over one window: heartbeats and CPU summed (so
// heartbeats per agent CPU-second is the sum of heartbeats over the sum of the agents' CPU), RSS
// per connection per agent.
json systemOf(const std::vector<json>& agents) {
  double devices = 0, beats = 0, cores = 0, simCores = 0, connected = 0, answered = 0;
  json bytes = json::array();
  for (const auto& row : agents) {
    devices += row["devices"].get<double>();
    beats += row["heartbeats_per_second"].get<double>();
    cores += row["cpu_cores"].get<double>();
    simCores += row["simulator_cpu_cores"].get<double>();
    connected += row["devices_connected_at_end"].get<double>();
    answered += row["simulators_answered_per_second"].get<double>();
    bytes.push_back(row["bytes_per_connection"]);
  }
  return json{{"agents", agents.size()},
              {"devices", devices},
              {"heartbeats_per_second", beats},
              {"simulators_answered_per_second", answered},
              {"devices_connected_at_end", connected},
              {"agent_cpu_cores", cores},
              {"heartbeats_per_agent_cpu_second", cores > 0 ? beats / cores : 0},
              {"simulator_cpu_cores", simCores},
              {"bytes_per_connection_per_agent", bytes}};
}

// A peer process that prints "LISTENING 127.0.0.1:<port>" and, on SIGUSR2, "PINGS <answered so
// far>".
json measurePeer(Bench& bench, const std::string& program, const std::vector<std::string>& args,
                 const std::filesystem::path& accounts) {
  ChildProcess peer(program, args);
  const std::string url =
      "ws://127.0.0.1:" + std::to_string(portOf(peer.waitForLine("LISTENING ", 30s)));
  std::this_thread::sleep_for(1s);  // its start-up allocations settle before the idle RSS
  auto pings = [&] {
    peer.signal(SIGUSR2);
    const auto line = peer.waitForLine("PINGS ", 10s);
    return std::stod(line.substr(6));
  };
  json row =
      measure(bench, {HeartbeatServer{peer.pid(), url, pings, accounts, bench.options().devices}})
          .front();
  bench.stopAgentsAndDevices();
  return row;
}

}  // namespace

json loadScenario(Bench& bench) {
  const Options& options = bench.options();
  const auto accounts = accountNames(options.accounts);
  const auto accountsFile = bench.writeAccounts(accounts);
  json result{{"devices", options.devices},
              {"accounts", options.accounts},
              {"heartbeat_ms", options.heartbeatMs}};
  if (options.agents > 1) {
    if (options.accounts < options.agents || options.devices < options.agents)
      throw std::invalid_argument("--agents: needs at least as many accounts and devices");
    // Agent i serves (and, alone, leads) every agents-th account from the i-th, and gets as many
    // of the devices, on simulators of its own.
    std::vector<AgentProcess*> agents;
    std::vector<HeartbeatServer> servers;
    for (size_t i = 0; i < options.agents; ++i) {
      std::vector<std::string> own;
      for (size_t a = i; a < accounts.size(); a += options.agents) own.push_back(accounts[a]);
      const auto name = "load-" + std::to_string(i);
      auto& agent = bench.startAgent(name, own);
      bench.waitLeading(agent, own.size());
      agents.push_back(&agent);
      const size_t devices =
          options.devices / options.agents + (i < options.devices % options.agents ? 1 : 0);
      servers.push_back(
          HeartbeatServer{agent.process->pid(), agent.deviceUrl,
                          [a = &agent] { return a->metric("zkagent_presence_heartbeats_total"); },
                          bench.writeAccounts(own, name + ".txt"), devices});
    }
    std::cerr << "  " << options.agents << " agents\n";
    auto rows = measure(bench, servers);
    result["system"] = systemOf(rows);
    result["agents"] = rows;
    std::cerr << "  " << result["system"].dump() << "\n";
    bench.stopAgentsAndDevices();
    return result;  // the peers are one process each: they cannot hold more than one agent's share
  }
  auto& agent = bench.startAgent("load-a", accounts);
  bench.waitLeading(agent, accounts.size());
  std::cerr << "  agent\n";
  result["agent"] =
      measure(bench,
              {HeartbeatServer{agent.process->pid(), agent.deviceUrl,
                               [&] { return agent.metric("zkagent_presence_heartbeats_total"); },
                               accountsFile, options.devices}})
          .front();
  bench.stopAgentsAndDevices();
  if (!options.peers || options.tls) return result;  // the peers serve plain ws:// only

  std::cerr << "  node ws\n";
  ::setenv("NODE_PATH", "/usr/share/nodejs", 0);  // Debian's node-ws
  result["node_ws"] = measurePeer(bench, "/usr/bin/node", {kWsPresencePeer}, accountsFile);
  std::cerr << "  epoll floor\n";
  result["epoll_floor"] =
      measurePeer(bench, zktest::binaryPath("epoll-floor-server").string(), {}, accountsFile);
  auto ratio = [&](const char* peer, const char* field) {
    const double theirs = result[peer][field].get<double>();
    return theirs > 0 ? result["agent"][field].get<double>() / theirs : 0.0;
  };
  result["heartbeats_per_cpu_second_agent_per_node_ws"] =
      ratio("node_ws", "heartbeats_per_cpu_second");
  result["heartbeats_per_cpu_second_agent_per_floor"] =
      ratio("epoll_floor", "heartbeats_per_cpu_second");
  result["bytes_per_connection_agent_per_node_ws"] = ratio("node_ws", "bytes_per_connection");
  result["bytes_per_connection_agent_per_floor"] = ratio("epoll_floor", "bytes_per_connection");
  return result;
}

}  // namespace device_bench
