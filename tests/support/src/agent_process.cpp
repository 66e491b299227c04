#include "zktest/agent_process.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "loopback.hpp"
#include "zkagent/naming.hpp"

namespace zktest {
using nlohmann::json;

uint16_t freeLoopbackPort() { return detail::reserveLoopbackPorts(1).front(); }

std::vector<uint16_t> freeLoopbackPorts(std::size_t count) {
  return detail::reserveLoopbackPorts(count);
}

std::optional<uint16_t> awaitListeningPort(const std::filesystem::path& log, milliseconds timeout) {
  std::optional<uint16_t> port;
  eventually(
      [&] {
        std::ifstream in(log);
        for (std::string line; std::getline(in, line);) {
          if (line.starts_with("LISTENING "))
            return (port = zkagent::naming::trailingPort(line)).has_value();
        }
        return false;
      },
      timeout, milliseconds(20));
  return port;
}

namespace {}  // namespace

GatewayProcess::GatewayProcess(const std::filesystem::path& dir, const std::string& zkHosts,
                               const std::string& root, std::vector<std::string> extraArgs) {
  std::filesystem::create_directories(dir / "gateway");
  std::vector<std::string> args{"--listen", "127.0.0.1:0", "--data-dir",
                                (dir / "gateway").string()};
  if (!zkHosts.empty()) args.insert(args.end(), {"--zk", zkHosts, "--root", root + "/accounts"});
  args.insert(args.end(), extraArgs.begin(), extraArgs.end());
  const auto log = dir / "gateway.log";
  process_ = std::make_unique<ChildProcess>(binaryPath("fencing-gateway").string(), args, log);
  // Its output goes to a file (a server's whole life of it): poll the file for the line.
  const std::optional<uint16_t> port = awaitListeningPort(log, milliseconds(30000));
  if (!port) {
    std::ostringstream output;
    output << std::ifstream(log).rdbuf();
    throw std::runtime_error("fencing-gateway did not listen within 30 s: " +
                             process_->transcript() + "\n" + output.str());
  }
  port_ = *port;
}

json agentConfig(const AgentSite& site, const std::string& instanceId,
                 const std::vector<std::string>& accounts, const json& patch) {
  json config = {{"instance_id", instanceId},
                 {"zookeeper",
                  {{"hosts", site.zkHosts},
                   {"session_timeout_ms", 1500},
                   {"root", site.root + "/accounts"},
                   {"agents_path", site.root + "/agents"}}},
                 {"accounts", accounts},
                 {"gateway",
                  {{"url", site.gatewayUrl},
                   {"heartbeat_interval_ms", 200},
                   {"heartbeat_timeout_ms", 700},
                   {"request_timeout_ms", 1000}}},
                 {"admin", {{"listen", "127.0.0.1:0"}}},
                 {"presence", {{"listen", "127.0.0.1:0"}}},
                 {"health", {{"interval_ms", 200}, {"ttl_ms", 1000}}},
                 {"shutdown_timeout_ms", 3000}};
  config.merge_patch(patch);
  return config;
}

std::filesystem::path writeAgentConfig(const std::filesystem::path& dir, const std::string& name,
                                       const json& config) {
  const auto path = dir / (name + ".json");
  std::ofstream(path) << config.dump(2);
  return path;
}

AgentProcess::AgentProcess(const std::filesystem::path& dir, const json& config,
                           AgentStartOptions options)
    : id(config.at("instance_id").get<std::string>()), options_(std::move(options)) {
  std::vector<std::string> args{binaryPath("zk-agent").string(), "--config",
                                writeAgentConfig(dir, id, config).string()};
  if (options_.environmentToken) {
    args.insert(args.begin(), "ZKAGENT_ADMIN_TOKEN=" + *options_.environmentToken);
    process = std::make_unique<ChildProcess>("env", std::move(args));
  } else {
    const auto program = args.front();
    args.erase(args.begin());
    process = std::make_unique<ChildProcess>(program, std::move(args));
  }
}

std::unique_ptr<AgentProcess> AgentProcess::start(const std::filesystem::path& dir,
                                                  const json& config, AgentStartOptions options) {
  auto agent = std::make_unique<AgentProcess>(dir, config, std::move(options));
  agent->awaitListening();
  return agent;
}

void AgentProcess::awaitListening() {
  adminPort = zkagent::naming::trailingPort(process->waitForLine("LISTENING ", milliseconds(20000)))
                  .value();
  deviceUrl = process->waitForLine("DEVICES ", milliseconds(5000)).substr(8);
  devicePort = zkagent::naming::trailingPort(deviceUrl).value();
  zkagent::http::ClientOptions client;
  client.port = adminPort;
  client.requestTimeout = options_.requestTimeout;
  client.bearerToken = options_.bearerToken;
  admin = std::make_unique<zkagent::http::Client>(client);
}

json AgentProcess::status() const {
  auto r = admin->get("/v1/status");
  if (!r.delivered() || r.status != 200) return json();
  return json::parse(r.body, nullptr, false);
}

json AgentProcess::account(const std::string& name) const {
  const auto s = status();
  if (!s.is_object()) return json();
  for (const auto& a : s.value("accounts", json::array())) {
    if (a["account"] == name) return a;
  }
  return json();
}

bool AgentProcess::leads(const std::string& name) const {
  const auto a = account(name);
  return a.is_object() && a.value("role", "") == "LEADER";
}

std::set<std::string> AgentProcess::leading() const {
  std::set<std::string> out;
  const auto s = status();
  if (!s.is_object()) return out;
  for (const auto& a : s.value("accounts", json::array())) {
    if (a["role"] == "LEADER") out.insert(a["account"].get<std::string>());
  }
  return out;
}

int64_t AgentProcess::sessionId() const {
  const auto s = status();
  if (!s.is_object() || !s.contains("session")) return 0;
  // Shown as "0x..." (hexadecimal); the wire carries it as a signed 64-bit integer.
  return static_cast<int64_t>(std::stoull(s["session"].value("id", std::string("0")), nullptr, 16));
}

std::string AgentProcess::metrics() const {
  auto r = admin->get("/metrics");
  return r.delivered() ? r.body : std::string();
}

zkagent::http::ClientResponse AgentProcess::op(const std::string& account, const std::string& opId,
                                               const json& payload) const {
  return admin->post("/v1/accounts/" + account + "/ops",
                     json{{"opId", opId}, {"payload", payload}}.dump());
}

AgentProcessFixture::AgentProcessFixture(std::string name, std::vector<std::string> gatewayArgs,
                                         GatewayChecks checks)
    : name_(std::move(name)), gatewayArgs_(std::move(gatewayArgs)), checks_(checks) {}

void AgentProcessFixture::SetUp() {
  static int tests = 0;  // each test of the process gets a directory of its own
  zk_ = &sharedZooKeeper();
  root_ = uniqueTestRoot();
  dir_ = std::filesystem::temp_directory_path() /
         (name_ + "-" + std::to_string(::getpid()) + "-" + std::to_string(tests++));
  gateway_ = std::make_unique<GatewayProcess>(
      dir_, checks_ == GatewayChecks::ZooKeeper ? zk_->connectString() : std::string(), root_,
      gatewayArgs_);
}

void AgentProcessFixture::TearDown() {
  agents_.clear();
  gateway_.reset();
  if (!std::getenv("ZKTEST_KEEP_FAILED") || !::testing::Test::HasFailure()) {
    std::filesystem::remove_all(dir_);
  }
}

AgentSite AgentProcessFixture::site() const {
  return {zk_->connectString(), root_, gateway_->url()};
}

AgentProcess& AgentProcessFixture::addAgent(const json& config, AgentStartOptions options) {
  agents_.push_back(AgentProcess::start(dir_, config, std::move(options)));
  return *agents_.back();
}

}  // namespace zktest
