// device_bench: whole-system presence numbers (real ZooKeeper, fencing-gateway, zk-agent and
// zk-device simulator processes), printed as a table and one JSON object on the last line.
//
//   load       one agent leading A accounts holds N simulated devices (heartbeat 1 s): agent RSS
//              per connection, agent CPU per heartbeat (heartbeats per agent CPU-second), the
//              simulators' CPU apart (they share the machine), heartbeat RTT p50/p99 as the
//              devices measure it (the median over the window's per-second STATS lines);
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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/http.hpp"
#include "zkagent/naming.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using zktest::ChildProcess;

// Devices per simulator process and per source address: one source address gives at most the
// ephemeral port range (about 28 000) connections to one agent port.
constexpr size_t kDevicesPerSimulator = 12500;

struct Options {
  size_t devices = 50000;
  size_t accounts = 1000;
  size_t migrationDevices = 10000;
  size_t connectDevices = 10000;
  int seconds = 10;
  bool load = true;
  bool migration = true;
  bool connects = true;
  bool tls = false;  // wss:// between devices and agents
  size_t migrationPerSimulator = kDevicesPerSimulator;
  std::string eventsFile;  // the simulators' event lines during the migration, for a timeline
};

long long unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint16_t portOf(const std::string& line) { return zkagent::naming::trailingPort(line).value(); }

long rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  }
  return -1;
}

// utime + stime of a process, in seconds.
double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.rfind(')') == std::string::npos) return 0;  // the process is gone
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double sampleOf(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
  }
  return 0;
}

// Parses "STATS connected=.. reconnects=.. ..." into its fields.
std::map<std::string, double> statsOf(const std::string& line) {
  std::map<std::string, double> out;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = std::stod(word.substr(eq + 1));
  }
  return out;
}

std::unique_ptr<zkagent::http::Client> clientFor(uint16_t port) {
  zkagent::http::ClientOptions o;
  o.port = port;
  o.requestTimeout = 10000ms;
  return std::make_unique<zkagent::http::Client>(o);
}

// Lets every child hold tens of thousands of sockets (the limits are inherited through exec).
void raiseFileLimit(rlim_t wanted) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  rlimit raised{std::max(limit.rlim_cur, wanted), std::max(limit.rlim_max, wanted)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    raised = {limit.rlim_max, limit.rlim_max};
    ::setrlimit(RLIMIT_NOFILE, &raised);
    std::cerr << "could not raise the fd limit to " << wanted << "; using " << limit.rlim_max
              << "\n";
  }
}

std::vector<std::string> accountNames(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back("acct-" + std::to_string(i));
  return out;
}

struct AgentProcess {
  std::unique_ptr<ChildProcess> process;
  std::string deviceUrl;
  std::unique_ptr<zkagent::http::Client> admin;

  size_t leading() const {
    auto r = admin->get("/v1/status");
    if (!r.delivered() || r.status != 200) return 0;
    size_t n = 0;
    for (const auto& a : json::parse(r.body, nullptr, false).value("accounts", json::array())) {
      if (a["role"] == "LEADER") ++n;
    }
    return n;
  }
  // Accounts whose leader it knows to be another agent (where it redirects devices).
  size_t leadersElsewhere() const {
    auto r = admin->get("/v1/status");
    if (!r.delivered() || r.status != 200) return 0;
    size_t n = 0;
    for (const auto& a : json::parse(r.body, nullptr, false).value("accounts", json::array())) {
      if (a["role"] != "LEADER" && a["leader"].is_object()) ++n;
    }
    return n;
  }
  double metric(const std::string& name) const {
    auto r = admin->get("/metrics");
    return r.delivered() ? sampleOf(r.body, name) : 0;
  }
};

class Bench {
 public:
  explicit Bench(Options options) : options_(options) {
    dir_ = std::filesystem::temp_directory_path() / ("device-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_ / "gateway");
    gateway_ = std::make_unique<ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(),
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--data-dir",
                                 (dir_ / "gateway").string(), "--zk", zk_.connectString(), "--root",
                                 "/bench/accounts", "--log-level", "warn"},
        dir_ / "gateway.log");
    for (auto deadline = Clock::now() + 30s; Clock::now() < deadline && gatewayPort_ == 0;) {
      std::ifstream in(dir_ / "gateway.log");
      for (std::string line; std::getline(in, line);) {
        if (line.starts_with("LISTENING ")) gatewayPort_ = portOf(line);
      }
      std::this_thread::sleep_for(20ms);
    }
    if (gatewayPort_ == 0) throw std::runtime_error("gateway did not start");
    gateway = clientFor(gatewayPort_);
  }
  ~Bench() {
    simulators_.clear();
    agents_.clear();
    gateway_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `presence` is merged into the agent's presence settings (device tokens).
  AgentProcess& startAgent(const std::string& id, const std::vector<std::string>& accounts,
                           const json& presence = json::object()) {
    const uint16_t devicePort = zktest::freeLoopbackPort();
    json config{{"instance_id", id},
                {"zookeeper",
                 {{"hosts", zk_.connectString()},
                  {"session_timeout_ms", 4000},
                  {"root", "/bench/accounts"},
                  {"agents_path", "/bench/agents"}}},
                {"accounts", accounts},
                {"gateway", {{"url", "http://127.0.0.1:" + std::to_string(gatewayPort_)}}},
                {"admin", {{"listen", "127.0.0.1:0"}}},
                {"presence",
                 {{"listen", "127.0.0.1:" + std::to_string(devicePort)},
                  {"heartbeat_ms", 1000},
                  {"ping_timeout_ms", 5000},
                  {"check_interval_ms", 1000},
                  {"renew_interval_ms", 5000},
                  {"lease_ttl_ms", 150000}}},
                {"log", {{"level", "warn"}}}};
    if (options_.tls) {
      const auto certs = zktest::testCertificates();
      config["presence"]["tls"] = {{"cert", (certs / "gateway.pem").string()},
                                   {"key", (certs / "gateway.key").string()}};
    }
    config["presence"].update(presence);
    const auto path = dir_ / (id + ".json");
    std::ofstream(path) << config.dump(2);
    auto process = std::make_unique<ChildProcess>(zktest::binaryPath("zk-agent").string(),
                                                  std::vector<std::string>{"--config", path});
    auto admin = clientFor(portOf(process->waitForLine("LISTENING ", 30s)));
    agents_.push_back(std::make_unique<AgentProcess>(AgentProcess{
        std::move(process),
        std::string(options_.tls ? "wss" : "ws") + "://127.0.0.1:" + std::to_string(devicePort),
        std::move(admin)}));
    return *agents_.back();
  }

  // Simulators of `total` devices over `accounts`, each bound to its own source address.
  std::vector<ChildProcess*> startDevices(const std::vector<std::string>& urls,
                                          const std::filesystem::path& accountsFile, size_t total,
                                          bool events, const std::vector<std::string>& extra = {},
                                          size_t perSimulator = kDevicesPerSimulator) {
    std::vector<ChildProcess*> started;
    std::string connect;
    for (const auto& url : urls) connect += (connect.empty() ? "" : ",") + url;
    for (size_t first = 0, index = 0; first < total; first += perSimulator, ++index) {
      const size_t count = std::min(perSimulator, total - first);
      std::vector<std::string> args{"--connect",          connect,
                                    "--accounts-file",    accountsFile.string(),
                                    "--device",           "sim" + std::to_string(index),
                                    "--devices",          std::to_string(count),
                                    "--heartbeat-ms",     "1000",
                                    "--timeout-ms",       "5000",
                                    "--source-addresses", "127.0.1." + std::to_string(index + 1)};
      if (events) args.push_back("--events");
      if (options_.tls) {
        args.push_back("--ca");
        args.push_back((zktest::testCertificates() / "ca.pem").string());
      }
      args.insert(args.end(), extra.begin(), extra.end());  // later flags win
      simulators_.push_back(
          std::make_unique<ChildProcess>(zktest::binaryPath("zk-device").string(), args));
      started.push_back(simulators_.back().get());
    }
    return started;
  }

  // Waits until the simulators report `total` connected; returns the last STATS of each.
  std::vector<std::map<std::string, double>> awaitConnected(const std::vector<ChildProcess*>& sims,
                                                            size_t total, milliseconds timeout) {
    std::vector<std::map<std::string, double>> last(sims.size());
    const auto deadline = Clock::now() + timeout;
    size_t connected = 0;
    auto lastPrint = Clock::now();
    while (Clock::now() < deadline) {
      connected = 0;
      for (size_t i = 0; i < sims.size(); ++i) {
        while (auto line = sims[i]->tryReadLine(0ms)) {
          if (line->starts_with("STATS ")) last[i] = statsOf(*line);
        }
        connected += static_cast<size_t>(last[i]["connected"]);
      }
      if (connected >= total) return last;
      if (Clock::now() - lastPrint > 2s) {
        std::cerr << "  connected " << connected << " of " << total << "\n";
        lastPrint = Clock::now();
      }
      std::this_thread::sleep_for(200ms);
    }
    throw std::runtime_error("only " + std::to_string(connected) + " of " + std::to_string(total) +
                             " devices connected in time");
  }

  std::filesystem::path writeAccounts(const std::vector<std::string>& accounts) {
    const auto path = dir_ / "accounts.txt";
    std::ofstream out(path);
    for (const auto& a : accounts) out << a << "\n";
    return path;
  }

  json load() {
    const auto accounts = accountNames(options_.accounts);
    auto& agent = startAgent("load-a", accounts);
    waitLeading(agent, accounts.size());
    const long rssBefore = rssKiB(agent.process->pid());
    auto sims = startDevices({agent.deviceUrl}, writeAccounts(accounts), options_.devices, false);
    awaitConnected(sims, options_.devices, 300s);
    std::this_thread::sleep_for(3s);  // let connection set-up work drain before measuring
    const long rssAfter = rssKiB(agent.process->pid());

    auto simulatorCpu = [&] {
      double total = 0;
      for (auto* sim : sims) total += cpuSeconds(sim->pid());
      return total;
    };
    for (auto* sim : sims) {
      while (sim->tryReadLine(0ms)) {
      }
    }
    const double beatsBefore = agent.metric("zkagent_presence_heartbeats_total");
    const double cpuBefore = cpuSeconds(agent.process->pid());
    const double simCpuBefore = simulatorCpu();
    const auto started = Clock::now();
    // Every simulator prints one STATS line a second with that second's RTT percentiles.
    std::vector<double> p50s, p99s;
    for (const auto end = started + std::chrono::seconds(options_.seconds); Clock::now() < end;) {
      for (auto* sim : sims) {
        while (auto line = sim->tryReadLine(0ms)) {
          if (!line->starts_with("STATS ")) continue;
          auto stats = statsOf(*line);
          if (std::isfinite(stats["rtt_p50_ms"])) p50s.push_back(stats["rtt_p50_ms"]);
          if (std::isfinite(stats["rtt_p99_ms"])) p99s.push_back(stats["rtt_p99_ms"]);
        }
      }
      std::this_thread::sleep_for(100ms);
    }
    const double beats = agent.metric("zkagent_presence_heartbeats_total") - beatsBefore;
    const double cpu = cpuSeconds(agent.process->pid()) - cpuBefore;
    const double simCpu = simulatorCpu() - simCpuBefore;
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    awaitConnected(sims, options_.devices, 30s);
    auto median = [](std::vector<double> v) {
      if (v.empty()) return -1.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double p99max = p99s.empty() ? -1.0 : *std::max_element(p99s.begin(), p99s.end());
    json result{{"devices", options_.devices},
                {"accounts", options_.accounts},
                {"agent_rss_kib_before", rssBefore},
                {"agent_rss_kib_after", rssAfter},
                {"agent_bytes_per_connection", static_cast<double>(rssAfter - rssBefore) * 1024.0 /
                                                   static_cast<double>(options_.devices)},
                {"heartbeats_per_second", beats / elapsed},
                {"agent_cpu_cores", cpu / elapsed},
                {"heartbeats_per_cpu_second", cpu > 0 ? beats / cpu : 0},
                {"simulator_cpu_cores", simCpu / elapsed},
                {"rtt_p50_ms", median(p50s)},
                {"rtt_p99_ms", median(p99s)},
                {"rtt_p99_ms_worst_second", p99max}};
    simulators_.clear();
    agents_.clear();
    return result;
  }

  json migration() {
    const auto accounts = accountNames(options_.accounts);
    auto& a = startAgent("mig-a", accounts);
    waitLeading(a, accounts.size());
    auto& b = startAgent("mig-b", accounts);
    std::this_thread::sleep_for(3s);  // b registers as a candidate everywhere
    auto sims = startDevices({a.deviceUrl, b.deviceUrl}, writeAccounts(accounts),
                             options_.migrationDevices, true, {}, options_.migrationPerSimulator);
    awaitConnected(sims, options_.migrationDevices, 120s);
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
      auto r = gateway->get("/metrics");
      if (!r.delivered() || r.status != 200) throw std::runtime_error("gateway /metrics failed");
      return r.body;
    };
    // Every device's lease is at the gateway before the signal (the leader writes them in
    // batches after the welcomes), so that a missing one during the migration is the migration's.
    const auto leasesIn = Clock::now() + 60s;
    while (sampleOf(gatewayMetrics(), "zkagent_gateway_presence_leases") <
           static_cast<double>(options_.migrationDevices)) {
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
        auto r = gateway->get("/metrics");
        const double leases = r.delivered() && r.status == 200
                                  ? sampleOf(r.body, "zkagent_gateway_presence_leases")
                                  : -1.0;
        leaseSamples.emplace_back(unixNanos(), leases);
        if (::kill(a.process->pid(), 0) == 0)
          aCpu = std::max(aCpu.load(), cpuSeconds(a.process->pid()));
        std::this_thread::sleep_for(20ms);
      }
    });
    std::map<std::string, double> cpuBefore{{"b", cpuSeconds(b.process->pid())},
                                            {"gateway", cpuSeconds(gateway_->pid())},
                                            {"zookeeper", cpuSeconds(zk_.pid())},
                                            {"simulators", 0.0}};
    for (auto* sim : sims) cpuBefore["simulators"] += cpuSeconds(sim->pid());

    std::optional<std::ofstream> events;
    if (!options_.eventsFile.empty()) events.emplace(options_.eventsFile);
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
    while (moved.size() < options_.migrationDevices && Clock::now() < deadline) {
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
    const auto devices = static_cast<double>(options_.migrationDevices);
    double fewest = devices;
    for (const auto& [at, leases] : leaseSamples) {
      fewest = std::min(fewest, leases);
      if (events) *events << "LEASES gateway - " << leases << ' ' << at << '\n';
    }
    // CPU-seconds each process spent from the signal until every device was on b.
    json cpu{{"a", aCpu - aCpuBefore},
             {"b", cpuSeconds(b.process->pid()) - cpuBefore["b"]},
             {"gateway", cpuSeconds(gateway_->pid()) - cpuBefore["gateway"]},
             {"zookeeper", cpuSeconds(zk_.pid()) - cpuBefore["zookeeper"]},
             {"simulators", -cpuBefore["simulators"]}};
    for (auto* sim : sims)
      cpu["simulators"] = cpu["simulators"].get<double>() + cpuSeconds(sim->pid());
    std::sort(moveMs.begin(), moveMs.end());
    std::sort(closedMs.begin(), closedMs.end());
    std::sort(reconnectMs.begin(), reconnectMs.end());
    auto quantile = [](const std::vector<double>& v, double q) {
      return v.empty() ? -1.0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
    };
    auto at = [&](double q) { return quantile(moveMs, q); };
    json result{
        {"devices", options_.migrationDevices},
        {"accounts", options_.accounts},
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
        {"leases_removed", sampleOf(metricsAfter, removals) - sampleOf(metricsBefore, removals)},
        {"leases_expired",
         sampleOf(metricsAfter, expirations) - sampleOf(metricsBefore, expirations)}};
    simulators_.clear();
    agents_.clear();
    return result;
  }

  json connects() {
    const auto accounts = accountNames(options_.accounts);
    const auto accountsFile = writeAccounts(accounts);
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
            {"keys",
             {{{"kid", "k1"}, {"alg", v.name}, {"file", (tokens / v.verifyKey).string()}}}}};
        extra.insert(extra.end(), {"--sign-key", (tokens / v.signKey).string(), "--sign-alg",
                                   v.name, "--sign-kid", "k1"});
      }
      std::cerr << "connects: " << options_.connectDevices << " devices, tokens " << v.name << "\n";
      auto& agent = startAgent("connect-" + v.name, accounts, presence);
      waitLeading(agent, accounts.size());
      const double cpuBefore = cpuSeconds(agent.process->pid());
      const auto started = Clock::now();
      auto sims =
          startDevices({agent.deviceUrl}, accountsFile, options_.connectDevices, false, extra);
      awaitConnected(sims, options_.connectDevices, 300s);
      const double wall = std::chrono::duration<double>(Clock::now() - started).count();
      const double cpu = cpuSeconds(agent.process->pid()) - cpuBefore;
      rows.push_back(
          {{"tokens", v.name},
           {"devices", options_.connectDevices},
           {"agent_cpu_s", cpu},
           {"agent_cpu_us_per_connect", cpu * 1e6 / static_cast<double>(options_.connectDevices)},
           {"connects_per_agent_cpu_s",
            cpu > 0 ? static_cast<double>(options_.connectDevices) / cpu : 0},
           {"wall_s_until_all_connected", wall}});
      simulators_.clear();
      agents_.clear();
    }
    rows.push_back(connectsThroughAFollower(accounts, accountsFile, false));
    rows.push_back(connectsThroughAFollower(accounts, accountsFile, true));
    return rows;
  }

  // The redirect paths: every device is pointed at an agent that does not lead its account and
  // follows its 307 (or, `inBand`, its 4001 right after the upgrade) to the leader. The
  // follower's CPU per redirect beside the leader's per connect.
  json connectsThroughAFollower(const std::vector<std::string>& accounts,
                                const std::filesystem::path& accountsFile, bool inBand) {
    const std::string path = inBand ? "an in-band 4001" : "a 307";
    std::cerr << "connects: " << options_.connectDevices << " devices, through " << path << "\n";
    auto& leader = startAgent("connect-leader", accounts);
    waitLeading(leader, accounts.size());
    auto& follower = startAgent("connect-follower", accounts);
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
        startDevices({follower.deviceUrl}, accountsFile, options_.connectDevices, false, extra);
    awaitConnected(sims, options_.connectDevices, 300s);
    const double wall = std::chrono::duration<double>(Clock::now() - started).count();
    const double leaderCpu = cpuSeconds(leader.process->pid()) - leaderBefore;
    const double followerCpu = cpuSeconds(follower.process->pid()) - followerBefore;
    const auto devices = static_cast<double>(options_.connectDevices);
    json row{
        {"tokens", "none, through " + path},
        {"devices", options_.connectDevices},
        {"redirects", follower.metric(inBand ? "zkagent_presence_redirects_total{code=\"4001\"}"
                                             : "zkagent_presence_redirects_total{code=\"307\"}")},
        {"agent_cpu_s", leaderCpu},
        {"agent_cpu_us_per_connect", leaderCpu * 1e6 / devices},
        {"connects_per_agent_cpu_s", leaderCpu > 0 ? devices / leaderCpu : 0},
        {"follower_cpu_us_per_redirect", followerCpu * 1e6 / devices},
        {"redirects_per_follower_cpu_s", followerCpu > 0 ? devices / followerCpu : 0},
        {"wall_s_until_all_connected", wall}};
    simulators_.clear();
    agents_.clear();
    return row;
  }

  std::unique_ptr<zkagent::http::Client> gateway;

 private:
  void waitLeading(AgentProcess& agent, size_t accounts) {
    const auto deadline = Clock::now() + 120s;
    while (agent.leading() < accounts) {
      if (Clock::now() > deadline) throw std::runtime_error("agent never led every account");
      std::this_thread::sleep_for(100ms);
    }
  }

  Options options_;
  zktest::ZooKeeperServer zk_;
  std::filesystem::path dir_;
  std::unique_ptr<ChildProcess> gateway_;
  uint16_t gatewayPort_ = 0;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  std::vector<std::unique_ptr<ChildProcess>> simulators_;
};

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
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "device_bench: " << e.what() << "\n";
    return 2;
  }
  raiseFileLimit(200000);
  json report{{"tls", options.tls}};
  try {
    Bench bench(options);
    if (options.load) {
      std::cerr << "load: " << options.devices << " devices over " << options.accounts
                << " accounts on one agent\n";
      report["load"] = bench.load();
      std::cout << "load      " << report["load"].dump() << "\n";
    }
    if (options.migration) {
      std::cerr << "migration: " << options.migrationDevices << " devices, leader SIGTERM\n";
      report["migration"] = bench.migration();
      std::cout << "migration " << report["migration"].dump() << "\n";
    }
    if (options.connects) {
      report["connects"] = bench.connects();
      std::cout << "connects  " << report["connects"].dump() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "device_bench failed: " << e.what() << "\n";
    return 1;
  }
  std::cout << report.dump() << std::endl;
  return 0;
}
