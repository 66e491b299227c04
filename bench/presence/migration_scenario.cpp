// device_bench migration: D devices on a leader that gets SIGTERM; how they move to the successor.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "device_bench_harness.hpp"
#include "zkbench/stats.hpp"
#include "zktest/metrics.hpp"

namespace device_bench {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

json migrationScenario(Bench& bench) {
  const Options& options = bench.options();
  const auto accounts = accountNames(options.accounts);
  auto& a = bench.startAgent("mig-a", accounts);
  bench.waitLeading(a, accounts.size());
  auto& b = bench.startAgent("mig-b", accounts);
  std::this_thread::sleep_for(3s);  // b registers as a candidate everywhere
  auto sims = bench.startDevices({a.deviceUrl, b.deviceUrl}, bench.writeAccounts(accounts),
                                 options.migrationDevices, true, {}, options.migrationPerSimulator);
  bench.awaitConnected(sims, options.migrationDevices, 120s);
  for (auto* sim : sims) {
    while (sim->tryReadLine(0ms)) {
    }
  }

  // Watch the gateway's leases while the devices move: the lease gauge every 20 ms (one small
  // request, so the watch takes almost nothing from the processes under test) and, over the
  // whole migration, the counters of removals and expirations, which catch a lease that went
  // and came back between two polls.
  const std::string removals =
      "zkagent_gateway_presence_lease_entries_total{op=\"remove\",result=\"accepted\"}";
  const std::string expirations = "zkagent_gateway_presence_lease_expirations_total";
  auto gatewayMetrics = [&] {
    auto r = bench.gateway->get("/metrics");
    if (!r.delivered() || r.status != 200) throw std::runtime_error("gateway /metrics failed");
    return r.body;
  };
  // Every device's lease is at the gateway before the signal (the leader writes them in
  // batches after the welcomes), so that a missing one during the migration is the migration's.
  const auto leasesIn = Clock::now() + 60s;
  while (zktest::metricSample(gatewayMetrics(), "zkagent_gateway_presence_leases").value_or(0) <
         static_cast<double>(options.migrationDevices)) {
    if (Clock::now() > leasesIn) throw std::runtime_error("not every lease reached the gateway");
    std::this_thread::sleep_for(50ms);
  }
  const auto metricsBefore = gatewayMetrics();
  std::atomic<bool> watching{true};
  std::vector<std::pair<long long, double>> leaseSamples;  // (unix ns, leases); -1: no answer
  std::atomic<double> aCpu{cpuSeconds(a.process->pid())};  // a exits during the migration
  const double aCpuBefore = aCpu;
  std::thread watcher([&] {
    while (watching) {
      auto r = bench.gateway->get("/metrics");
      const double leases =
          r.delivered() && r.status == 200
              ? zktest::metricSample(r.body, "zkagent_gateway_presence_leases").value_or(0)
              : -1.0;
      leaseSamples.emplace_back(unixNanos(), leases);
      if (::kill(a.process->pid(), 0) == 0)
        aCpu = std::max(aCpu.load(), cpuSeconds(a.process->pid()));
      std::this_thread::sleep_for(20ms);
    }
  });
  std::map<std::string, double> cpuBefore{{"b", cpuSeconds(b.process->pid())},
                                          {"gateway", cpuSeconds(bench.gatewayPid())},
                                          {"zookeeper", cpuSeconds(bench.zookeeperPid())},
                                          {"simulators", 0.0}};
  for (auto* sim : sims) cpuBefore["simulators"] += cpuSeconds(sim->pid());

  std::optional<std::ofstream> events;
  if (!options.eventsFile.empty()) events.emplace(options.eventsFile);
  const auto signalled = std::chrono::system_clock::now();
  if (events) {
    *events << "SIGTERM a "
            << std::chrono::duration_cast<std::chrono::nanoseconds>(signalled.time_since_epoch())
                   .count()
            << '\n';
  }
  a.process->signal(SIGTERM);
  std::vector<double> moveMs, closedMs;  // connected to b; first close by a
  std::vector<double> reconnectMs;       // from a device's close by a to its welcome at b
  std::set<std::string> moved;
  std::map<std::string, double> closedAt;
  std::map<std::string, size_t> reasons;  // every disconnect and failed attempt, by reason
  size_t redirects = 0;
  auto sinceSignal = [&](long long unixNs) {
    const auto at = std::chrono::system_clock::time_point(std::chrono::nanoseconds(unixNs));
    return std::chrono::duration<double, std::milli>(at - signalled).count();
  };
  const auto deadline = Clock::now() + 120s;
  while (moved.size() < options.migrationDevices && Clock::now() < deadline) {
    bool any = false;
    for (auto* sim : sims) {
      while (auto line = sim->tryReadLine(0ms)) {
        any = true;
        if (events) *events << *line << '\n';
        std::istringstream in(*line);
        std::string word, account, device, third;
        in >> word >> account >> device >> third;
        if (word == "REDIRECTED") ++redirects;
        if (word == "DISCONNECTED") {
          long long unixNs = 0;
          in >> unixNs;
          ++reasons[third.substr(
              0, third.find(':') == std::string::npos ? third.size() : third.find(':') + 12)];
          if (closedAt.emplace(account + "/" + device, sinceSignal(unixNs)).second)
            closedMs.push_back(sinceSignal(unixNs));
        }
        if (word != "CONNECTED" || third != "mig-b") continue;
        std::string epoch;
        long long unixNs = 0;
        in >> epoch >> unixNs;
        if (!moved.insert(account + "/" + device).second) continue;
        moveMs.push_back(sinceSignal(unixNs));
        if (auto it = closedAt.find(account + "/" + device); it != closedAt.end())
          reconnectMs.push_back(moveMs.back() - it->second);
      }
    }
    if (!any) std::this_thread::sleep_for(10ms);
  }
  const double window =
      std::chrono::duration<double>(std::chrono::system_clock::now() - signalled).count();
  watching = false;
  watcher.join();
  const auto metricsAfter = gatewayMetrics();
  const auto devices = static_cast<double>(options.migrationDevices);
  double fewest = devices;
  for (const auto& [at, leases] : leaseSamples) {
    fewest = std::min(fewest, leases);
    if (events) *events << "LEASES gateway - " << leases << ' ' << at << '\n';
  }
  // CPU-seconds each process spent from the signal until every device was on b.
  json cpu{{"a", aCpu - aCpuBefore},
           {"b", cpuSeconds(b.process->pid()) - cpuBefore["b"]},
           {"gateway", cpuSeconds(bench.gatewayPid()) - cpuBefore["gateway"]},
           {"zookeeper", cpuSeconds(bench.zookeeperPid()) - cpuBefore["zookeeper"]},
           {"simulators", -cpuBefore["simulators"]}};
  for (auto* sim : sims)
    cpu["simulators"] = cpu["simulators"].get<double>() + cpuSeconds(sim->pid());
  std::sort(moveMs.begin(), moveMs.end());
  std::sort(closedMs.begin(), closedMs.end());
  std::sort(reconnectMs.begin(), reconnectMs.end());
  auto quantile = [](const std::vector<double>& sorted, double q) {
    return sorted.empty() ? -1.0 : zkbench::quantileOfSorted(sorted, q);
  };
  auto at = [&](double q) { return quantile(moveMs, q); };
  json result{{"devices", options.migrationDevices},
              {"accounts", options.accounts},
              {"moved", moveMs.size()},
              {"move_ms_p50", at(0.5)},
              {"move_ms_p99", at(0.99)},
              {"move_ms_max", moveMs.empty() ? -1.0 : moveMs.back()},
              {"move_ms_min", moveMs.empty() ? -1.0 : moveMs.front()},
              {"closed_by_a_ms_min", closedMs.empty() ? -1.0 : closedMs.front()},
              {"closed_by_a_ms_p50", quantile(closedMs, 0.5)},
              {"closed_by_a_ms_max", closedMs.empty() ? -1.0 : closedMs.back()},
              {"close_to_b_ms_p50", quantile(reconnectMs, 0.5)},
              {"close_to_b_ms_max", reconnectMs.empty() ? -1.0 : reconnectMs.back()},
              {"disconnect_reasons", reasons},
              {"redirects", redirects},
              {"simulators", sims.size()},
              {"cpu_s", cpu},
              {"window_s", window},
              {"lease_poll_rounds", leaseSamples.size()},
              {"rounds_with_a_lease_missing",
               std::count_if(leaseSamples.begin(), leaseSamples.end(),
                             [&](const auto& sample) { return sample.second < devices; })},
              {"fewest_leases", fewest},
              {"leases_removed", zktest::metricSample(metricsAfter, removals).value_or(0) -
                                     zktest::metricSample(metricsBefore, removals).value_or(0)},
              {"leases_expired", zktest::metricSample(metricsAfter, expirations).value_or(0) -
                                     zktest::metricSample(metricsBefore, expirations).value_or(0)}};
  bench.stopAgentsAndDevices();
  return result;
}

}  // namespace device_bench
