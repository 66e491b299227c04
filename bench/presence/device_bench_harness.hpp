#pragma once
// device_bench's harness: a ZooKeeper server, a fencing-gateway, zk-agent and zk-device simulator
// processes, and what the scenarios read from them (CPU, RSS, metrics, simulator STATS lines).

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zkagent/http.hpp"
#include "zkbench/process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/zookeeper_server.hpp"

namespace device_bench {

// Devices per simulator process and per source address: one source address gives at most the
// ephemeral port range (about 28 000) connections to one agent port.
constexpr size_t kDevicesPerSimulator = 12500;

struct Options {
  size_t devices = 50000;
  size_t accounts = 1000;
  size_t migrationDevices = 10000;
  size_t connectDevices = 10000;
  int seconds = 10;
  int heartbeatMs = 1000;  // the load's devices ping this often
  size_t agents = 1;       // the load's devices and accounts split over this many agents
  int rampMs = 0;          // the load's simulators start their devices evenly over this time
  bool peers = true;       // the load also on the Node.js ws peer and the epoll floor
  size_t loadPerSimulator = kDevicesPerSimulator;
  bool load = true;
  bool migration = true;
  bool connects = true;
  bool tls = false;  // wss:// between devices and agents
  size_t migrationPerSimulator = kDevicesPerSimulator;
  std::string eventsFile;  // the simulators' event lines during the migration, for a timeline
};

long long unixNanos();
uint16_t portOf(const std::string& line);
using zkbench::cpuSeconds;
using zkbench::rssKiB;
// Parses "STATS connected=.. reconnects=.. ..." into its fields.
std::map<std::string, double> statsOf(const std::string& line);
std::unique_ptr<zkagent::http::Client> clientFor(uint16_t port);
// Lets every child hold tens of thousands of sockets (the limits are inherited through exec).
void raiseFileLimit(rlim_t wanted);
std::vector<std::string> accountNames(size_t n);

// bench/peers/ws_presence_peer.js in the source tree.
inline constexpr const char* kWsPresencePeer = WS_PRESENCE_PEER;

struct AgentProcess {
  std::unique_ptr<zktest::ChildProcess> process;
  std::string deviceUrl;
  std::unique_ptr<zkagent::http::Client> admin;

  size_t leading() const;
  // Accounts whose leader it knows to be another agent (where it redirects devices).
  size_t leadersElsewhere() const;
  double metric(const std::string& name) const;
};

class Bench {
 public:
  explicit Bench(Options options);
  ~Bench();

  const Options& options() const { return options_; }
  pid_t gatewayPid() const { return gateway_->pid(); }
  pid_t zookeeperPid() const { return zk_.pid(); }

  // `presence` is merged into the agent's presence settings (device tokens).
  AgentProcess& startAgent(const std::string& id, const std::vector<std::string>& accounts,
                           const nlohmann::json& presence = nlohmann::json::object());
  // Simulators of `total` devices over `accounts`, each bound to its own source address and
  // named apart from every other simulator of the run (sim0, sim1, ...).
  std::vector<zktest::ChildProcess*> startDevices(const std::vector<std::string>& urls,
                                                  const std::filesystem::path& accountsFile,
                                                  size_t total, bool events,
                                                  const std::vector<std::string>& extra = {},
                                                  size_t perSimulator = kDevicesPerSimulator);
  // Waits until the simulators report `total` connected; returns the last STATS of each.
  std::vector<std::map<std::string, double>> awaitConnected(
      const std::vector<zktest::ChildProcess*>& sims, size_t total,
      std::chrono::milliseconds timeout);
  // One account per line, in the bench's directory as `name`.
  std::filesystem::path writeAccounts(const std::vector<std::string>& accounts,
                                      const std::string& name = "accounts.txt");
  void waitLeading(AgentProcess& agent, size_t accounts);
  // Ends every simulator and agent of a scenario; ZooKeeper and the gateway stay.
  void stopAgentsAndDevices();

  std::unique_ptr<zkagent::http::Client> gateway;

 private:
  Options options_;
  zktest::ZooKeeperServer zk_;
  std::filesystem::path dir_;
  std::unique_ptr<zktest::ChildProcess> gateway_;
  uint16_t gatewayPort_ = 0;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  std::vector<std::unique_ptr<zktest::ChildProcess>> simulators_;
  size_t simulatorsStarted_ = 0;  // names them and picks their source addresses
};

nlohmann::json loadScenario(Bench& bench);
nlohmann::json migrationScenario(Bench& bench);
nlohmann::json connectsScenario(Bench& bench);

}  // namespace device_bench
