// device_bench connects: the agent's CPU per connect, with and without device tokens, and per
// redirect.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>
#include <vector>

#include "device_bench_harness.hpp"
#include "zktest/metrics.hpp"
#include "zktest/test_certs.hpp"

namespace device_bench {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The redirect paths: every device is pointed at an agent that does not lead its account and
// follows its 307 (or, `inBand`, its 4001 right after the upgrade) to the leader. The
// follower's CPU per redirect beside the leader's per connect.
json connectsThroughAFollower(Bench& bench, const std::vector<std::string>& accounts,
                              const std::filesystem::path& accountsFile, bool inBand) {
  const Options& options = bench.options();
  const std::string path = inBand ? "an in-band 4001" : "a 307";
  std::cerr << "connects: " << options.connectDevices << " devices, through " << path << "\n";
  auto& leader = bench.startAgent("connect-leader", accounts);
  bench.waitLeading(leader, accounts.size());
  auto& follower = bench.startAgent("connect-follower", accounts);
  const auto known = Clock::now() + 60s;
  while (follower.leadersElsewhere() < accounts.size()) {
    if (Clock::now() > known) throw std::runtime_error("the follower never learnt every leader");
    std::this_thread::sleep_for(100ms);
  }
  const double leaderBefore = cpuSeconds(leader.process->pid());
  const double followerBefore = cpuSeconds(follower.process->pid());
  const auto started = Clock::now();
  std::vector<std::string> extra{"--heartbeat-ms", "0", "--timeout-ms", "0"};
  if (inBand) extra.push_back("--redirect-in-band");
  auto sims =
      bench.startDevices({follower.deviceUrl}, accountsFile, options.connectDevices, false, extra);
  bench.awaitConnected(sims, options.connectDevices, 300s);
  const double wall = std::chrono::duration<double>(Clock::now() - started).count();
  const double leaderCpu = cpuSeconds(leader.process->pid()) - leaderBefore;
  const double followerCpu = cpuSeconds(follower.process->pid()) - followerBefore;
  const auto devices = static_cast<double>(options.connectDevices);
  json row{
      {"tokens", "none, through " + path},
      {"devices", options.connectDevices},
      {"redirects", follower.metric(inBand ? "zkagent_presence_redirects_total{code=\"4001\"}"
                                           : "zkagent_presence_redirects_total{code=\"307\"}")},
      {"agent_cpu_s", leaderCpu},
      {"agent_cpu_us_per_connect", leaderCpu * 1e6 / devices},
      {"connects_per_agent_cpu_s", leaderCpu > 0 ? devices / leaderCpu : 0},
      {"follower_cpu_us_per_redirect", followerCpu * 1e6 / devices},
      {"redirects_per_follower_cpu_s", followerCpu > 0 ? devices / followerCpu : 0},
      {"wall_s_until_all_connected", wall}};
  bench.stopAgentsAndDevices();
  return row;
}

}  // namespace

json connectsScenario(Bench& bench) {
  const Options& options = bench.options();
  const auto accounts = accountNames(options.accounts);
  const auto accountsFile = bench.writeAccounts(accounts);
  const auto tokens = zktest::testCertificates() / "tokens";
  struct Variant {
    std::string name, verifyKey, signKey;
  };
  json rows = json::array();
  for (const Variant& v :
       {Variant{"none", "", ""}, Variant{"HS256", "hs256.secret", "hs256.secret"},
        Variant{"ES256", "es256.pub", "es256.key"}}) {
    json presence = json::object();
    std::vector<std::string> extra{"--heartbeat-ms", "0", "--timeout-ms", "0"};
    if (!v.verifyKey.empty()) {
      presence["auth"] = {
          {"keys", {{{"kid", "k1"}, {"alg", v.name}, {"file", (tokens / v.verifyKey).string()}}}}};
      extra.insert(extra.end(), {"--sign-key", (tokens / v.signKey).string(), "--sign-alg", v.name,
                                 "--sign-kid", "k1"});
    }
    std::cerr << "connects: " << options.connectDevices << " devices, tokens " << v.name << "\n";
    auto& agent = bench.startAgent("connect-" + v.name, accounts, presence);
    bench.waitLeading(agent, accounts.size());
    const double cpuBefore = cpuSeconds(agent.process->pid());
    const auto started = Clock::now();
    auto sims =
        bench.startDevices({agent.deviceUrl}, accountsFile, options.connectDevices, false, extra);
    bench.awaitConnected(sims, options.connectDevices, 300s);
    const double wall = std::chrono::duration<double>(Clock::now() - started).count();
    const double cpu = cpuSeconds(agent.process->pid()) - cpuBefore;
    rows.push_back(
        {{"tokens", v.name},
         {"devices", options.connectDevices},
         {"agent_cpu_s", cpu},
         {"agent_cpu_us_per_connect", cpu * 1e6 / static_cast<double>(options.connectDevices)},
         {"connects_per_agent_cpu_s",
          cpu > 0 ? static_cast<double>(options.connectDevices) / cpu : 0},
         {"wall_s_until_all_connected", wall}});
    bench.stopAgentsAndDevices();
  }
  rows.push_back(connectsThroughAFollower(bench, accounts, accountsFile, false));
  rows.push_back(connectsThroughAFollower(bench, accounts, accountsFile, true));
  return rows;
}

}  // namespace device_bench
