// The detection-latency table and the renewal peak of the presence model, measured end to end on
// real processes: a standalone ZooKeeper, a fencing-gateway, zk-agent and zk-device processes, and
// zk-presence-watch as the subscriber. Every presence parameter is its default divided by one
// factor (--scale, default 100), and so are the bounds it is compared with.
//
//   presence-e2e --out DIR [--scale 100] [--trials 7] [--agents 5]
//
// Latency = the CHANGE offline line's time at the subscriber - the moment of leaving (just before
// the signal). Writes DIR/report.json and prints the table.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../tests/presence_runtime/presence_cluster.hpp"
#include "zkagent/presence/params.hpp"
#include "zkbench/stats.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using zktest::ChildProcess;
using zktest::presence::Cluster;
using zktest::presence::json;
using zktest::presence::Timing;

int64_t unixNanosNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int scaled(int defaultMs, int scale) { return std::max(1, defaultMs / scale); }

// The defaults of presence::Params and the gateway, divided by `scale`.
Timing scaledTiming(int scale) {
  const zkagent::presence::Params d;
  Timing t;
  t.heartbeatMs = scaled(static_cast<int>(d.heartbeatInterval.count()), scale);
  t.pingTimeoutMs = scaled(static_cast<int>(d.pingTimeout.count()), scale);
  t.checkIntervalMs = scaled(static_cast<int>(d.checkInterval.count()), scale);
  t.renewIntervalMs = scaled(static_cast<int>(d.renewInterval.count()), scale);
  t.leaseTtlMs = scaled(static_cast<int>(d.leaseTtl.count()), scale);
  t.sweepMs = scaled(static_cast<int>(d.sweepInterval.count()), scale);
  t.debounceMs = scaled(static_cast<int>(d.offlineDebounce.count()), scale);
  t.coalesceMs = scaled(100, scale);  // the gateway's presence.coalesce_ms default
  return t;
}

zkagent::presence::Params paramsOf(const Timing& t) {
  zkagent::presence::Params p;
  p.heartbeatInterval = milliseconds(t.heartbeatMs);
  p.pingTimeout = milliseconds(t.pingTimeoutMs);
  p.checkInterval = milliseconds(t.checkIntervalMs);
  p.renewInterval = milliseconds(t.renewIntervalMs);
  p.leaseTtl = milliseconds(t.leaseTtlMs);
  p.sweepInterval = milliseconds(t.sweepMs);
  p.offlineDebounce = milliseconds(t.debounceMs);
  return p;
}

// The next CHANGE of `status` (other lines skipped); its unix_ns.
int64_t nextChange(ChildProcess& watch, const std::string& status) {
  for (;;) {
    const auto line = zktest::presence::parseWatchLine(watch.waitForLine("CHANGE ", 20s));
    if (line.status() == status) return line.unixNs();
  }
}

bool waitFor(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

// `boundMs` is bounds(): leaving to publication on a clock with no transport. At a subscriber the
// hops (device -> agent -> gateway, the coalescing tick, the WebSocket) come on top, so the report
// shows how far the slowest trial is over or under it.
json summary(std::vector<double> ms, double boundMs) {
  std::sort(ms.begin(), ms.end());
  return {{"trials_ms", ms},
          {"min_ms", ms.front()},
          {"median_ms", zkbench::quantileOfSorted(ms, 0.5)},
          {"max_ms", ms.back()},
          {"bound_ms", boundMs},
          {"max_over_bound_ms", ms.back() - boundMs}};
}

// Close, half-open and agent crash, `trials` times each, one account, one device at a time.
json detection(const std::string& zk, const std::filesystem::path& dir, const Timing& timing,
               int trials) {
  Cluster cluster(zk, "/presence-e2e-" + std::to_string(::getpid()) + "-detect", dir, timing);
  const std::string account = "acct-0";
  if (cluster.setPrivacy(account, {{"granularity", "exact"}, {"contacts", {"bob"}}}) != 200)
    throw std::runtime_error("privacy refused");
  int agents = 0;
  auto startLeader = [&]() -> Cluster::Agent& {
    auto& agent = cluster.startAgent("agent-" + std::to_string(agents++), {account});
    if (!waitFor([&] { return agent.leads(account); }, 30s))
      throw std::runtime_error("agent does not lead " + account);
    return agent;
  };
  auto* agent = &startLeader();
  auto& watch = cluster.startWatch("bob", account);
  Cluster::waitSnapshot(watch, 20s);
  int devices = 0;
  auto online = [&]() -> ChildProcess& {
    auto& device =
        cluster.startDevice({agent->deviceUrl}, account, "d" + std::to_string(devices++));
    device.waitForLine("CONNECTED ", 20s);
    nextChange(watch, "online");
    return device;
  };

  // The moment of leaving is uniform over a renewal interval after the device came online, so it
  // is not in phase with the device's first heartbeat or the lease's first renewal (both happen
  // at connect).
  std::mt19937 random(11);
  auto somewhenLater = [&] {
    std::this_thread::sleep_for(
        milliseconds(std::uniform_int_distribution<int>(0, timing.renewIntervalMs)(random)));
  };
  const auto b = zkagent::presence::bounds(paramsOf(timing));
  std::map<std::string, std::vector<double>> results;
  for (int i = 0; i < trials; ++i) {
    auto& device = online();
    somewhenLater();
    const int64_t left = unixNanosNow();
    device.signal(SIGTERM);
    results["close"].push_back(static_cast<double>(nextChange(watch, "offline") - left) / 1e6);
    device.wait(10s);
  }
  for (int i = 0; i < trials; ++i) {
    auto& device = online();
    somewhenLater();
    const int64_t left = unixNanosNow();
    device.signal(SIGSTOP);  // half-open: the socket stays, heartbeats stop
    results["half_open"].push_back(static_cast<double>(nextChange(watch, "offline") - left) / 1e6);
    device.kill();
  }
  for (int i = 0; i < trials; ++i) {
    auto& device = online();
    somewhenLater();
    const int64_t left = unixNanosNow();
    // The device is stopped too, so it cannot close or move: only the lease TTL tells.
    agent->process->signal(SIGSTOP);
    device.signal(SIGSTOP);
    results["agent_crash"].push_back(static_cast<double>(nextChange(watch, "offline") - left) /
                                     1e6);
    device.kill();
    agent->process->kill();
    agent = &startLeader();
  }
  return {{"close", summary(results["close"], static_cast<double>(b.close.count()))},
          {"half_open", summary(results["half_open"], static_cast<double>(b.halfOpen->count()))},
          {"agent_crash",
           summary(results["agent_crash"], static_cast<double>(b.gatewayCrash.count()))}};
}

double leaseRequests(Cluster& cluster) {
  auto r = cluster.gateway().get("/metrics");
  if (!r.delivered() || r.status != 200) return -1;
  const std::string name = "zkagent_gateway_presence_lease_requests_total";
  double total = 0;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(name) && (line[name.size()] == ' ' || line[name.size()] == '{'))
      total += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return total;
}

// `agents` agents started together, each leading two accounts with one device each; the gateway's
// lease-request counter read every 10 ms for `intervals` renewal intervals, binned per 100 ms.
json renewalPeak(const std::string& zk, const std::filesystem::path& dir, Timing timing,
                 double jitter, int agentCount, int intervals) {
  timing.renewJitter = jitter;
  Cluster cluster(zk,
                  "/presence-e2e-" + std::to_string(::getpid()) + "-peak-" +
                      std::to_string(static_cast<int>(jitter * 100)),
                  dir, timing);
  std::vector<std::pair<std::string, std::vector<std::string>>> specs;
  for (int i = 0; i < agentCount; ++i) {
    const std::string id = "agent-" + std::to_string(i);
    specs.push_back({id, {id + "-a", id + "-b"}});
  }
  auto agents = cluster.startAgents(specs);
  for (size_t i = 0; i < agents.size(); ++i) {
    for (const auto& account : specs[i].second) {
      if (!waitFor([&] { return agents[i]->leads(account); }, 30s))
        throw std::runtime_error(specs[i].first + " does not lead " + account);
      cluster.startDevice({agents[i]->deviceUrl}, account, "phone").waitForLine("CONNECTED ", 20s);
    }
  }
  // Every device renewed at least once before the measurement starts.
  std::this_thread::sleep_for(milliseconds(2 * timing.renewIntervalMs));
  constexpr int kWindowMs = 100;
  const int windows = intervals * timing.renewIntervalMs / kWindowMs;
  std::vector<double> perWindow(static_cast<size_t>(windows), 0);
  const auto start = std::chrono::steady_clock::now();
  double previous = leaseRequests(cluster);
  for (;;) {
    std::this_thread::sleep_for(10ms);
    const double now = leaseRequests(cluster);
    const auto at =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start).count();
    const auto window = static_cast<size_t>(at / kWindowMs);
    if (window >= perWindow.size()) break;
    perWindow[window] += now - previous;
    previous = now;
  }
  double total = 0, peak = 0;
  for (double n : perWindow) total += n, peak = std::max(peak, n);
  const double mean = total / windows;
  return {{"renew_jitter", jitter},  {"agents", agentCount},
          {"window_ms", kWindowMs},  {"windows", windows},
          {"requests", total},       {"max_per_window", peak},
          {"mean_per_window", mean}, {"peak_over_mean", mean > 0 ? peak / mean : 0},
          {"per_window", perWindow}};
}

constexpr const char* kUsage =
    "usage: presence-e2e --out DIR [--scale 100] [--trials 7] [--agents 5]\n";

int usage(const std::string& problem) {
  std::cerr << "presence-e2e: " << problem << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path out;
  int scale = 100, trials = 7, agentCount = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) return usage(flag + ": needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "--out")
        out = value;
      else if (flag == "--scale")
        scale = std::stoi(value);
      else if (flag == "--trials")
        trials = std::stoi(value);
      else if (flag == "--agents")
        agentCount = std::stoi(value);
      else
        return usage(flag + ": unknown flag");
    } catch (const std::exception&) {
      return usage(flag + ": not an integer: " + value);
    }
  }
  if (out.empty()) return usage("--out: required");
  if (scale < 1 || scale > 1000) return usage("--scale: must be between 1 and 1000");
  if (trials < 1) return usage("--trials: must be at least 1");
  if (agentCount < 1) return usage("--agents: must be at least 1");
  std::filesystem::create_directories(out);
  const Timing timing = scaledTiming(scale);
  try {
    zkagent::presence::validate(paramsOf(timing));
    zktest::ZooKeeperServer zk;
    json report{{"scale", scale},
                {"params_ms",
                 {{"heartbeat", timing.heartbeatMs},
                  {"ping_timeout", timing.pingTimeoutMs},
                  {"check", timing.checkIntervalMs},
                  {"renew", timing.renewIntervalMs},
                  {"lease_ttl", timing.leaseTtlMs},
                  {"sweep", timing.sweepMs},
                  {"debounce", timing.debounceMs},
                  {"coalesce", timing.coalesceMs}}}};
    report["detection"] = detection(zk.connectString(), out / "detect", timing, trials);
    report["renewal_peak"] = json::array();
    for (double jitter : {0.0, 0.1}) {
      report["renewal_peak"].push_back(renewalPeak(
          zk.connectString(), out / ("peak-" + std::to_string(static_cast<int>(jitter * 100))),
          timing, jitter, agentCount, 10));
    }
    std::ofstream(out / "report.json") << report.dump(2) << "\n";

    std::printf("presence end to end, parameters / %d (ms)\n", scale);
    std::printf("%-12s %8s %8s %8s %8s %10s\n", "leaving", "min", "median", "max", "bound",
                "max-bound");
    for (const char* kind : {"close", "half_open", "agent_crash"}) {
      const auto& d = report["detection"][kind];
      std::printf("%-12s %8.0f %8.0f %8.0f %8.0f %+10.0f\n", kind, d["min_ms"].get<double>(),
                  d["median_ms"].get<double>(), d["max_ms"].get<double>(),
                  d["bound_ms"].get<double>(), d["max_over_bound_ms"].get<double>());
    }
    std::printf("\nrenewal peak at the gateway, %d agents, lease requests per 100 ms\n",
                agentCount);
    std::printf("%-8s %8s %8s %8s %10s\n", "jitter", "requests", "max", "mean", "peak/mean");
    for (const auto& p : report["renewal_peak"]) {
      std::printf("%-8.2f %8.0f %8.0f %8.2f %10.1f\n", p["renew_jitter"].get<double>(),
                  p["requests"].get<double>(), p["max_per_window"].get<double>(),
                  p["mean_per_window"].get<double>(), p["peak_over_mean"].get<double>());
    }
    std::printf("\nreport: %s\n", (out / "report.json").c_str());
  } catch (const std::exception& e) {
    std::cerr << "presence-e2e: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
