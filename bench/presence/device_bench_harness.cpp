#include "device_bench_harness.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "zkagent/naming.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/metrics.hpp"
#include "zktest/test_certs.hpp"

namespace device_bench {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using zktest::ChildProcess;

long long unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint16_t portOf(const std::string& line) { return zkagent::naming::trailingPort(line).value(); }

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

size_t AgentProcess::leading() const {
  auto r = admin->get("/v1/status");
  if (!r.delivered() || r.status != 200) return 0;
  size_t n = 0;
  for (const auto& a : json::parse(r.body, nullptr, false).value("accounts", json::array())) {
    if (a["role"] == "LEADER") ++n;
  }
  return n;
}
size_t AgentProcess::leadersElsewhere() const {
  auto r = admin->get("/v1/status");
  if (!r.delivered() || r.status != 200) return 0;
  size_t n = 0;
  for (const auto& a : json::parse(r.body, nullptr, false).value("accounts", json::array())) {
    if (a["role"] != "LEADER" && a["leader"].is_object()) ++n;
  }
  return n;
}
double AgentProcess::metric(const std::string& name) const {
  auto r = admin->get("/metrics");
  return r.delivered() ? zktest::metricSample(r.body, name).value_or(0) : 0;
}

Bench::Bench(Options options) : options_(options) {
  dir_ = std::filesystem::temp_directory_path() / ("device-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir_ / "gateway");
  gateway_ = std::make_unique<ChildProcess>(
      zktest::binaryPath("fencing-gateway").string(),
      std::vector<std::string>{"--listen", "127.0.0.1:0", "--data-dir", (dir_ / "gateway").string(),
                               "--zk", zk_.connectString(), "--root", "/bench/accounts",
                               "--log-level", "warn"},
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
Bench::~Bench() {
  simulators_.clear();
  agents_.clear();
  gateway_.reset();
  std::filesystem::remove_all(dir_);
}

AgentProcess& Bench::startAgent(const std::string& id, const std::vector<std::string>& accounts,
                                const json& presence) {
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
                // The load's interval, so the welcome and the timeout agree with the simulators
                // (a fixed 1 s / 5 s timed every device out at --heartbeat-ms 10000).
                {"heartbeat_ms", options_.heartbeatMs},
                {"ping_timeout_ms", std::max(5000, 3 * options_.heartbeatMs)},
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

std::vector<ChildProcess*> Bench::startDevices(const std::vector<std::string>& urls,
                                               const std::filesystem::path& accountsFile,
                                               size_t total, bool events,
                                               const std::vector<std::string>& extra,
                                               size_t perSimulator) {
  std::vector<ChildProcess*> started;
  std::string connect;
  for (const auto& url : urls) connect += (connect.empty() ? "" : ",") + url;
  for (size_t first = 0; first < total; first += perSimulator) {
    const size_t count = std::min(perSimulator, total - first);
    // 127.0.1.1 to 127.0.1.254, then round again: a run starts far fewer simulators.
    const size_t index = simulatorsStarted_++;
    std::vector<std::string> args{
        "--connect",          connect,
        "--accounts-file",    accountsFile.string(),
        "--device",           "sim" + std::to_string(index),
        "--devices",          std::to_string(count),
        "--heartbeat-ms",     "1000",
        "--timeout-ms",       "5000",
        "--source-addresses", "127.0.1." + std::to_string(index % 254 + 1)};
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

std::vector<std::map<std::string, double>> Bench::awaitConnected(
    const std::vector<ChildProcess*>& sims, size_t total, milliseconds timeout) {
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

std::filesystem::path Bench::writeAccounts(const std::vector<std::string>& accounts,
                                           const std::string& name) {
  const auto path = dir_ / name;
  std::ofstream out(path);
  for (const auto& a : accounts) out << a << "\n";
  return path;
}

void Bench::waitLeading(AgentProcess& agent, size_t accounts) {
  const auto deadline = Clock::now() + 120s;
  while (agent.leading() < accounts) {
    if (Clock::now() > deadline) throw std::runtime_error("agent never led every account");
    std::this_thread::sleep_for(100ms);
  }
}

void Bench::stopAgentsAndDevices() {
  simulators_.clear();
  agents_.clear();
}

}  // namespace device_bench
