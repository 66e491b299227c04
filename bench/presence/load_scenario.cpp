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

// A server the devices heartbeat to, and the heartbeats it has answered by its own count.
struct HeartbeatServer {
  pid_t pid;
  std::string url;
  std::function<double()> heartbeatsAnswered;
};

double median(std::vector<double> v) { return v.empty() ? -1.0 : zkbench::quantile(v, 0.5); }

// Connects the devices to `server` and measures it over the window: RSS per connection (with the
// devices minus idle), heartbeats per server CPU-second, and the RTT the devices see. The
// simulators' own count of answered heartbeats is beside the server's, as a check.
json measure(Bench& bench, const HeartbeatServer& server, const std::filesystem::path& accounts) {
  const Options& options = bench.options();
  const long rssIdle = rssKiB(server.pid);
  auto sims =
      bench.startDevices({server.url}, accounts, options.devices, false,
                         {"--heartbeat-ms", std::to_string(options.heartbeatMs), "--timeout-ms",
                          std::to_string(std::max(5000, 3 * options.heartbeatMs))},
                         options.loadPerSimulator);
  bench.awaitConnected(sims, options.devices, 300s);
  std::this_thread::sleep_for(3s);  // let connection set-up work drain before measuring
  const long rssLoaded = rssKiB(server.pid);

  // Every simulator prints one STATS line a second: cumulative counts, that second's RTT.
  std::vector<double> answered(sims.size()), answeredBefore(sims.size()), connected(sims.size());
  auto readStats = [&](std::vector<double>* p50s, std::vector<double>* p99s) {
    for (size_t i = 0; i < sims.size(); ++i) {
      while (auto line = sims[i]->tryReadLine(0ms)) {
        if (!line->starts_with("STATS ")) continue;
        auto stats = statsOf(*line);
        answered[i] = stats["heartbeats_answered"];
        connected[i] = stats["connected"];
        if (p50s && std::isfinite(stats["rtt_p50_ms"])) p50s->push_back(stats["rtt_p50_ms"]);
        if (p99s && std::isfinite(stats["rtt_p99_ms"])) p99s->push_back(stats["rtt_p99_ms"]);
      }
    }
  };
  auto simulatorCpu = [&] {
    double total = 0;
    for (auto* sim : sims) total += cpuSeconds(sim->pid());
    return total;
  };
  readStats(nullptr, nullptr);
  answeredBefore = answered;
  const double beatsBefore = server.heartbeatsAnswered();
  const double cpuBefore = cpuSeconds(server.pid);
  const double simCpuBefore = simulatorCpu();
  const auto started = Clock::now();
  std::vector<double> p50s, p99s;
  for (const auto end = started + std::chrono::seconds(options.seconds); Clock::now() < end;) {
    readStats(&p50s, &p99s);
    std::this_thread::sleep_for(100ms);
  }
  const double beats = server.heartbeatsAnswered() - beatsBefore;
  const double cpu = cpuSeconds(server.pid) - cpuBefore;
  const double simCpu = simulatorCpu() - simCpuBefore;
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  readStats(&p50s, &p99s);
  // A server that falls behind loses devices to their timeouts: counted, not a failed run.
  double simulatorsAnswered = 0, connectedAtEnd = 0;
  for (size_t i = 0; i < sims.size(); ++i) {
    simulatorsAnswered += answered[i] - answeredBefore[i];
    connectedAtEnd += connected[i];
  }
  const double p99max = p99s.empty() ? -1.0 : *std::max_element(p99s.begin(), p99s.end());
  const auto devices = static_cast<double>(options.devices);
  json row{{"rss_kib_idle", rssIdle},
           {"rss_kib_with_devices", rssLoaded},
           {"bytes_per_connection", static_cast<double>(rssLoaded - rssIdle) * 1024.0 / devices},
           {"heartbeats_per_second", beats / elapsed},
           {"simulators_answered_per_second", simulatorsAnswered / elapsed},
           {"devices_connected_at_end", connectedAtEnd},
           {"cpu_cores", cpu / elapsed},
           {"heartbeats_per_cpu_second", cpu > 0 ? beats / cpu : 0},
           {"simulator_cpu_cores", simCpu / elapsed},
           {"rtt_p50_ms", median(p50s)},
           {"rtt_p99_ms", median(p99s)},
           {"rtt_p99_ms_worst_second", p99max}};
  std::cerr << "  " << row.dump() << "\n";
  return row;
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
  json row = measure(bench, HeartbeatServer{peer.pid(), url, pings}, accounts);
  bench.stopAgentsAndDevices();
  return row;
}

}  // namespace

json loadScenario(Bench& bench) {
  const Options& options = bench.options();
  const auto accounts = accountNames(options.accounts);
  const auto accountsFile = bench.writeAccounts(accounts);
  auto& agent = bench.startAgent("load-a", accounts);
  bench.waitLeading(agent, accounts.size());
  std::cerr << "  agent\n";
  json result{
      {"devices", options.devices},
      {"accounts", options.accounts},
      {"heartbeat_ms", options.heartbeatMs},
      {"agent",
       measure(bench,
               HeartbeatServer{agent.process->pid(), agent.deviceUrl,
                               [&] { return agent.metric("zkagent_presence_heartbeats_total"); }},
               accountsFile)}};
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
