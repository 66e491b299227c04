#pragma once
// The project's servers as a process test runs them: a fencing-gateway and zk-agent processes
// (ChildProcess: stopped by PID, killed with their process group when the test ends), their
// ports read from the "LISTENING host:port" (and "DEVICES ws://host:port") lines they print.
//
//   zktest::GatewayProcess gateway(dir, zk.connectString(), root);   // --listen 127.0.0.1:0
//   const zktest::AgentSite site{zk.connectString(), root, gateway.url()};
//   auto agent = zktest::AgentProcess::start(dir, zktest::agentConfig(site, "host-a", {"acct-0"}));
//   ASSERT_TRUE(zktest::eventually([&] { return agent->leads("acct-0"); }, 15s));
//   agent->process->kill();                                          // kill -9 by PID
//
// A test fixture gets the usual setup (shared ZooKeeper, own root and directory, one gateway) by
// deriving from AgentProcessFixture.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"  // metricSample, which process tests read /metrics with
#include "zktest/zookeeper_server.hpp"

namespace zktest {

// A loopback port that was free a moment ago, for a listener whose port a test must know before
// the process starts (an agent's device endpoint that devices are given up front). It lies below
// the kernel's ephemeral range: a port from there (bind to port 0) can be taken by any process's
// outgoing connection or port-0 listener before the process binds it ("Address already in use").
uint16_t freeLoopbackPort();
// `count` such ports, distinct from each other (each was held until all were chosen).
std::vector<uint16_t> freeLoopbackPorts(std::size_t count);

// The port of the first "LISTENING host:port" line a server wrote to `log` (servers whose whole
// output goes to a file), or nullopt when none came within `timeout`.
std::optional<uint16_t> awaitListeningPort(const std::filesystem::path& log, milliseconds timeout);

// A fencing-gateway on a loopback port of its own, its data in {dir}/gateway and its output in
// {dir}/gateway.log (read on failure). `extraArgs` follow the common ones (--listen, --data-dir,
// --zk, --root {root}/accounts): lease timings, TLS. An empty `zkHosts` runs it without
// ZooKeeper (hwm_only checks). The constructor returns once it listens (30 s) and throws with
// its output when it does not.
class GatewayProcess {
 public:
  GatewayProcess(const std::filesystem::path& dir, const std::string& zkHosts,
                 const std::string& root, std::vector<std::string> extraArgs = {});

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<ChildProcess> process_;
  uint16_t port_ = 0;
};

// What the agents of one test share.
struct AgentSite {
  std::string zkHosts;
  std::string root;        // accounts under {root}/accounts, the agents' nodes under {root}/agents
  std::string gatewayUrl;  // http://127.0.0.1:port (https://localhost:port for TLS)
};

// The agent config process tests start from: ZooKeeper sessions of 1.5 s, gateway heartbeats
// every 200 ms (700 ms timeout, 1 s per request), health every 200 ms (1 s TTL), 3 s to shut
// down, the admin and device listeners on loopback port 0 (several agents on one host).
// `patch` is a JSON merge patch (RFC 7396; null removes a key) with what a test does otherwise.
nlohmann::json agentConfig(const AgentSite& site, const std::string& instanceId,
                           const std::vector<std::string>& accounts,
                           const nlohmann::json& patch = nlohmann::json::object());

// Writes `config` to {dir}/{name}.json (for zk-agent --config) and returns that path.
std::filesystem::path writeAgentConfig(const std::filesystem::path& dir, const std::string& name,
                                       const nlohmann::json& config);

struct AgentStartOptions {
  // Given to the agent as ZKAGENT_ADMIN_TOKEN ("" sets it empty); nullopt leaves it unset.
  std::optional<std::string> environmentToken{};
  std::string bearerToken{};          // what the admin client sends ("": nothing)
  milliseconds requestTimeout{3000};  // the admin client's, per request
};

// One zk-agent process and an admin client on its port.
struct AgentProcess {
  // Writes `config` to {dir}/{instance_id}.json and starts zk-agent on it; returns at once, so
  // that several agents can start together. awaitListening() before using the ports.
  AgentProcess(const std::filesystem::path& dir, const nlohmann::json& config,
               AgentStartOptions options = {});
  // The constructor and awaitListening().
  static std::unique_ptr<AgentProcess> start(const std::filesystem::path& dir,
                                             const nlohmann::json& config,
                                             AgentStartOptions options = {});

  // Waits for "LISTENING" (20 s) and "DEVICES" (5 s), then opens the admin client; throws with
  // the agent's output when a line does not come.
  void awaitListening();

  // GET /v1/status; null when the agent does not answer it with 200.
  nlohmann::json status() const;
  // The account's entry in the status, or null.
  nlohmann::json account(const std::string& name) const;
  bool leads(const std::string& name) const;
  // The accounts it leads by its own status (none when it does not answer).
  std::set<std::string> leading() const;
  // Its ZooKeeper session id as its status shows it (what its operations and lease writes
  // carry); 0 when it does not answer.
  int64_t sessionId() const;
  // GET /metrics: Prometheus text ("" when the agent does not answer).
  std::string metrics() const;
  // POST /v1/accounts/{account}/ops: one operation for the leader to forward.
  zkagent::http::ClientResponse op(const std::string& account, const std::string& opId,
                                   const nlohmann::json& payload = {{"text", "hello"}}) const;

  std::string id;  // instance_id
  std::unique_ptr<ChildProcess> process;
  uint16_t adminPort = 0;
  std::unique_ptr<zkagent::http::Client> admin;
  std::string deviceUrl;  // ws://host:port, as the agent advertises it
  uint16_t devicePort = 0;

 private:
  AgentStartOptions options_;
};

// Which checks a fixture's gateway applies: ZooKeeper's `active` nodes, or the HWM only (the
// gateway gets no ZooKeeper; the agents still elect through it).
enum class GatewayChecks { ZooKeeper, HwmOnly };

// The fixture of a process test of agents: the shared ZooKeeper and a root of its own
// (sharedZooKeeper, uniqueTestRoot), a temporary directory for the processes' files and one
// fencing-gateway in it. At the end the agents stop (by PID), then the gateway, and the
// directory goes.
class AgentProcessFixture : public ::testing::Test {
 protected:
  // `name` starts the directory's name; `gatewayArgs` as GatewayProcess's.
  explicit AgentProcessFixture(std::string name, std::vector<std::string> gatewayArgs = {},
                               GatewayChecks checks = GatewayChecks::ZooKeeper);
  void SetUp() override;
  void TearDown() override;

  // This test's ZooKeeper root and the gateway over plain HTTP.
  AgentSite site() const;
  // Starts an agent on `config` (AgentProcess::start) and keeps it until the test ends.
  AgentProcess& addAgent(const nlohmann::json& config, AgentStartOptions options = {});

  ZooKeeperServer* zk_ = nullptr;
  std::string root_;
  std::filesystem::path dir_;
  std::unique_ptr<GatewayProcess> gateway_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;

 private:
  std::string name_;
  std::vector<std::string> gatewayArgs_;
  GatewayChecks checks_;
};

}  // namespace zktest
