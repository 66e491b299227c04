// Real presence processes for tests and experiments: a fencing-gateway (restartable on the same
// ports and data dir), zk-agent processes, zk-device processes and zk-presence-watch subscribers
// against a real ZooKeeper. Parameters are a Timing, so a test can compress them and an
// experiment can scale the defaults by one factor.
#pragma once

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"

namespace zktest::presence {

using nlohmann::json;
using std::chrono::milliseconds;

struct Timing {
  int sessionTimeoutMs = 1500;
  int heartbeatMs = 200;
  int pingTimeoutMs = 600;
  int checkIntervalMs = 100;
  int renewIntervalMs = 400;
  double renewJitter = 0.1;
  int leaseTtlMs = 1200;
  int sweepMs = 100;
  int debounceMs = 500;
  int coalesceMs = 20;
};

// One line of zk-presence-watch split into words: SNAPSHOT t s v / CHANGE t s v m ns / ...
struct WatchLine {
  std::vector<std::string> words;
  const std::string& kind() const { return words.at(0); }
  const std::string& target() const { return words.at(1); }
  const std::string& status() const { return words.at(2); }
  uint64_t version() const { return std::stoull(words.at(3)); }
  int64_t unixNs() const { return std::stoll(words.back()); }
};

inline WatchLine parseWatchLine(const std::string& line) {
  std::istringstream in(line);
  WatchLine parsed;
  for (std::string word; in >> word;) parsed.words.push_back(word);
  return parsed;
}

inline constexpr const char* kGatewayToken = "presence-test-token";

class Cluster {
 public:
  // An empty `zkConnect` runs the gateway without ZooKeeper (for lease writes made by hand).
  Cluster(std::string zkConnect, std::string root, std::filesystem::path dir, Timing timing = {},
          std::vector<std::string> gatewayExtra = {})
      : zk_(std::move(zkConnect)),
        root_(std::move(root)),
        dir_(std::move(dir)),
        timing_(timing),
        gatewayExtra_(std::move(gatewayExtra)) {
    const auto ports = freeLoopbackPorts(2);  // two distinct ports
    gatewayPort_ = ports[0];
    subscribePort_ = ports[1];
    std::filesystem::create_directories(dir_ / "gateway");
    startGateway();
  }
  ~Cluster() {
    watches_.clear();
    devices_.clear();
    agents_.clear();
    gateway_.reset();
  }

  const Timing& timing() const { return timing_; }
  std::string subscribeUrl() const { return "ws://127.0.0.1:" + std::to_string(subscribePort_); }
  zkagent::http::Client& gateway() { return *client_; }
  ChildProcess& gatewayProcess() { return *gateway_; }

  void startGateway() {
    std::vector<std::string> args{
        "--listen",           "127.0.0.1:" + std::to_string(gatewayPort_),
        "--subscribe-listen", "127.0.0.1:" + std::to_string(subscribePort_),
        "--data-dir",         (dir_ / "gateway").string(),
        "--lease-ttl-ms",     std::to_string(timing_.leaseTtlMs),
        "--lease-sweep-ms",   std::to_string(timing_.sweepMs),
        "--debounce-ms",      std::to_string(timing_.debounceMs),
        "--coalesce-ms",      std::to_string(timing_.coalesceMs)};
    if (!zk_.empty()) {  // without ZooKeeper the gateway fences lease writes by HWM only
      args.insert(args.end(), {"--zk", zk_, "--root", root_ + "/accounts"});
    }
    args.insert(args.end(), gatewayExtra_.begin(), gatewayExtra_.end());
    // Privacy rules are an operator action: the gateway needs the operator token, which every
    // client of this cluster sends (agents and subscribers need none on loopback).
    std::ofstream(dir_ / "gateway.token") << kGatewayToken;
    args.insert(args.end(), {"--operator-token-file", (dir_ / "gateway.token").string()});
    gateway_ =
        std::make_unique<ChildProcess>(binaryPath("fencing-gateway").string(), args,
                                       dir_ / ("gateway-" + std::to_string(starts_++) + ".log"));
    waitForPort(gatewayPort_);
    waitForPort(subscribePort_);
    zkagent::http::ClientOptions options;
    options.port = gatewayPort_;
    options.requestTimeout = milliseconds(3000);
    options.bearerToken = kGatewayToken;
    client_ = std::make_unique<zkagent::http::Client>(options);
  }
  void stopGateway() {
    gateway_->signal(SIGTERM);
    gateway_->wait(milliseconds(10000));
    gateway_.reset();
  }

  // PUT /v1/presence/privacy/{account}; returns the HTTP status.
  int setPrivacy(const std::string& account, const json& rules) {
    auto r = client_->request(zkagent::http::Method::Put, "/v1/presence/privacy/" + account,
                              rules.dump());
    return r.status;
  }

  using Agent = AgentProcess;

  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts) {
    return *startAgents({{id, accounts}}).front();
  }
  // Spawns every agent before waiting for any, so they start together (the renewal peak).
  std::vector<Agent*> startAgents(
      const std::vector<std::pair<std::string, std::vector<std::string>>>& agents) {
    std::vector<Agent*> started;
    for (const auto& [id, accounts] : agents) {
      agents_.push_back(std::make_unique<Agent>(dir_, agentConfig(id, accounts)));
      started.push_back(agents_.back().get());
    }
    for (auto* agent : started) agent->awaitListening();
    return started;
  }

 private:
  // The device endpoint on a port chosen up front; the cluster's timings.
  json agentConfig(const std::string& id, const std::vector<std::string>& accounts) const {
    return zktest::agentConfig({zk_, root_, "http://127.0.0.1:" + std::to_string(gatewayPort_)}, id,
                               accounts,
                               {{"zookeeper", {{"session_timeout_ms", timing_.sessionTimeoutMs}}},
                                {"gateway", {{"token", kGatewayToken}}},
                                {"presence",
                                 {{"listen", "127.0.0.1:" + std::to_string(freeLoopbackPort())},
                                  {"heartbeat_ms", timing_.heartbeatMs},
                                  {"ping_timeout_ms", timing_.pingTimeoutMs},
                                  {"check_interval_ms", timing_.checkIntervalMs},
                                  {"renew_interval_ms", timing_.renewIntervalMs},
                                  {"renew_jitter", timing_.renewJitter},
                                  {"lease_ttl_ms", timing_.leaseTtlMs}}}});
  }

 public:
  ChildProcess& startDevice(const std::vector<std::string>& urls, const std::string& account,
                            const std::string& device) {
    std::string connect;
    for (const auto& url : urls) connect += (connect.empty() ? "" : ",") + url;
    devices_.push_back(std::make_unique<ChildProcess>(
        binaryPath("zk-device").string(),
        std::vector<std::string>{"--connect", connect, "--account", account, "--device", device,
                                 "--heartbeat-ms", std::to_string(timing_.heartbeatMs),
                                 "--timeout-ms", std::to_string(timing_.pingTimeoutMs)}));
    return *devices_.back();
  }

  // A zk-presence-watch process; `waitSnapshot` reads through SNAPSHOT-END and returns the
  // SNAPSHOT lines.
  ChildProcess& startWatch(const std::string& viewer, const std::string& targets,
                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--token",  kGatewayToken, "--gateway", subscribeUrl(),
                                  "--viewer", viewer,        "--targets", targets};
    args.insert(args.end(), extra.begin(), extra.end());
    watches_.push_back(
        std::make_unique<ChildProcess>(binaryPath("zk-presence-watch").string(), args));
    return *watches_.back();
  }
  static std::vector<WatchLine> waitSnapshot(ChildProcess& watch, milliseconds timeout) {
    std::vector<WatchLine> snapshot;
    for (;;) {
      const auto line = watch.readLine(timeout);
      if (line == "SNAPSHOT-END") return snapshot;
      if (line.starts_with("SNAPSHOT ")) snapshot.push_back(parseWatchLine(line));
    }
  }

  // The gateway's lease table for one account (null when it cannot be read).
  json leases(const std::string& account) {
    auto r = client_->get("/v1/presence/" + account);
    if (!r.delivered() || r.status != 200) return json();
    return json::parse(r.body, nullptr, false);
  }

 private:
  static void waitForPort(uint16_t port) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket socket(io);
      boost::system::error_code error;
      socket.connect({boost::asio::ip::make_address("127.0.0.1"), port}, error);
      if (!error) return;
      ::usleep(20000);
    }
    throw std::runtime_error("nothing listens on port " + std::to_string(port));
  }

  std::string zk_, root_;
  std::filesystem::path dir_;
  Timing timing_;
  std::vector<std::string> gatewayExtra_;
  uint16_t gatewayPort_ = 0, subscribePort_ = 0;
  int starts_ = 0;
  std::unique_ptr<ChildProcess> gateway_;
  std::unique_ptr<zkagent::http::Client> client_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::unique_ptr<ChildProcess>> devices_;
  std::vector<std::unique_ptr<ChildProcess>> watches_;
};

}  // namespace zktest::presence
