// Starting and stopping the gateway and the agents; which ZooKeeper server an agent is on.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "run.hpp"
#include "zkagent/naming.hpp"
#include "zktest/znode.hpp"

namespace zkagent::chaos {
using namespace std::chrono_literals;
namespace {

// The port of the first line of `log` that starts with `marker` ("LISTENING 127.0.0.1:PORT",
// "DEVICES ws://127.0.0.1:PORT").
std::optional<std::uint16_t> awaitPort(const fs::path& log, std::string_view marker,
                                       milliseconds timeout, const std::function<bool()>& alive) {
  const auto deadline = SteadyClock::now() + timeout;
  do {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with(marker)) continue;
      if (auto port = zkagent::naming::trailingPort(line)) return port;
    }
    if (!alive()) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  } while (SteadyClock::now() < deadline);
  return std::nullopt;
}

// Debian's libfaketime (package libfaketime), the thread-safe build: /usr/lib/<triplet>/faketime.
fs::path libfaketime() {
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/usr/lib", ignored)) {
    const auto candidate = entry.path() / "faketime" / "libfaketimeMT.so.1";
    if (fs::exists(candidate, ignored)) return candidate;
  }
  throw std::runtime_error("--clock-steps needs libfaketime (apt-get install libfaketime)");
}

}  // namespace

std::unique_ptr<zktest::ChildProcess> Run::spawn(const std::string& name,
                                                 std::vector<std::string> args,
                                                 const std::string& process, const fs::path& log) {
  if (!o_.clockSteps)
    return std::make_unique<zktest::ChildProcess>(binary(name).string(), args, log);
  // env(1) execs the binary in the same process, so the pid stays the one signals go to. The
  // file is re-read at most once a second; the monotonic clock (timeouts, leases) is not faked.
  static const fs::path preload = libfaketime();
  if (!fs::exists(clockFile(process))) setClockOffset(process, 0);
  std::vector<std::string> command{
      "LD_PRELOAD=" + preload.string(), "FAKETIME_TIMESTAMP_FILE=" + clockFile(process).string(),
      "FAKETIME_CACHE_DURATION=1", "FAKETIME_DONT_FAKE_MONOTONIC=1", binary(name).string()};
  command.insert(command.end(), args.begin(), args.end());
  return std::make_unique<zktest::ChildProcess>("/usr/bin/env", std::move(command), log);
}

void Run::setClockOffset(const std::string& process, int seconds) {
  fs::create_directories(clockFile(process).parent_path());
  // Written aside and renamed, so libfaketime never reads half a line.
  const fs::path next = clockFile(process).string() + ".next";
  std::ofstream(next) << (seconds < 0 ? "" : "+") << seconds << "\n";
  fs::rename(next, clockFile(process));
}

void Run::startGateway(int g) {
  std::lock_guard lock(gatewayMu_);
  Gateway& gateway = gateways_[static_cast<std::size_t>(g)];
  const std::string name = gatewayName(g);
  const fs::path log = o_.out / "logs" / (name + "." + std::to_string(++gateway.runs) + ".log");
  // The subscriber listener would default to the next port, which a client's ephemeral port may
  // hold by the time the gateway restarts: any free port (no subscribers in the run).
  std::vector<std::string> args{
      "--listen", "127.0.0.1:" + std::to_string(gateway.port), "--subscribe-listen", "127.0.0.1:0",
      "--data-dir", gatewayData(g).string(), "--lease-ttl-ms", std::to_string(timings_.leaseTtlMs),
      "--lease-sweep-ms", std::to_string(timings_.leaseSweepMs),
      // Every lease write's decision, for check 6; restarts append.
      "--lease-journal", gatewayJournal(g).string()};
  if (o_.gatewayCompactAfterMib >= 0) {
    args.insert(args.end(), {"--compact-after-mib", std::to_string(o_.gatewayCompactAfterMib)});
  }
  if (!o_.breakFencing) {
    // ZooKeeper mode, strict: while its ZooKeeper session is down the gateway refuses (503)
    // rather than falling back to the HWM alone, so every acceptance was checked against active.
    std::string hosts = gateway.zkProxies.empty() ? zk_->connectString() : "";
    for (const auto& proxy : gateway.zkProxies) {
      if (!hosts.empty()) hosts += ',';
      hosts += proxy->connectString();
    }
    args.insert(args.end(), {"--zk", hosts, "--root", kRoot, "--zk-untrusted", "refuse"});
    // With its links cut by the nemesis, the gateway notices a dead link after two thirds of its
    // session timeout, as the agents do: the same timeout keeps check 5's bound (session timeout
    // + 2 s after the last heal) true of it too. (Its default, 10 s, would take ~6.7 s.) A
    // cluster's gateways always: a dead member's shards move at its session's expiry.
    if (o_.gatewayPartitions || o_.gateways > 1) {
      args.insert(args.end(), {"--zk-session-timeout-ms", std::to_string(o_.sessionTimeoutMs)});
    }
    if (o_.gateways > 1) {
      // The URL it advertises in the shards' `active` nodes: its own port, which the agents
      // reach directly (docs/gateway-cluster.md "Agents").
      args.insert(args.end(),
                  {"--cluster-shards", std::to_string(kClusterShards), "--gateway-id", name,
                   "--advertise-url", "http://127.0.0.1:" + std::to_string(gateway.port)});
    }
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    spawners_->run([&] { gateway.process = spawn("fencing-gateway", args, name, log); });
    auto* process = gateway.process.get();
    const auto port = awaitPort(log, "LISTENING ", 30s, [&] { return process->running(); });
    if (port) {
      gateway.port = *port;
      gatewayRunLog_.push_back(
          {{"gateway", name}, {"run", gateway.runs}, {"started_ms", now()}, {"port", *port}});
      return;
    }
    gateway.process->kill();  // the port may still be held by the killed one: try again
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error(name + " does not start; see " + log.string());
}

void Run::killGateway(int g) {
  std::lock_guard lock(gatewayMu_);
  auto& process = gateways_[static_cast<std::size_t>(g)].process;
  if (process) process->kill();
  for (auto it = gatewayRunLog_.rbegin(); it != gatewayRunLog_.rend(); ++it) {
    if ((*it)["gateway"] == gatewayName(g)) {
      (*it)["killed_ms"] = now();
      break;
    }
  }
}

std::vector<int> Run::shardOwners() {
  if (o_.gateways == 1) return {};
  std::vector<std::string> paths;
  for (std::uint32_t shard = 0; shard < kClusterShards; ++shard) {
    paths.push_back(zkagent::naming::activePath(zkagent::naming::gatewayShardsRoot(kRoot),
                                                zkagent::naming::shardId(shard)));
  }
  std::vector<int> owners(kClusterShards, -1);
  const auto nodes = zktest::readZNodes(zk_->connectString(), paths, 2s);
  for (std::size_t shard = 0; shard < nodes.size(); ++shard) {
    if (nodes[shard].state != zktest::ZNode::State::found) continue;
    const auto body = json::parse(nodes[shard].data, nullptr, false);
    if (!body.is_object() || !body.contains("instanceId") || !body["instanceId"].is_string())
      continue;
    const auto instance = body["instanceId"].get<std::string>();
    for (int g = 0; g < o_.gateways; ++g) {
      if (gatewayName(g) == instance) owners[shard] = g;
    }
  }
  return owners;
}

bool Run::everyShardOwned() {
  for (const int owner : shardOwners()) {
    if (owner < 0) return false;
  }
  return true;
}

int Run::gatewayTarget(json& record) {
  if (o_.gateways == 1) return 0;
  std::vector<int> owned(static_cast<std::size_t>(o_.gateways), 0);
  for (const int owner : shardOwners()) {
    if (owner >= 0) ++owned[static_cast<std::size_t>(owner)];
  }
  // Balanced (4/4/4) is the usual case: a tie goes round by the event's index, so that every
  // gateway gets hit.
  const int most = *std::max_element(owned.begin(), owned.end());
  std::vector<int> tied;
  for (int g = 0; g < o_.gateways; ++g) {
    if (owned[static_cast<std::size_t>(g)] == most) tied.push_back(g);
  }
  const int target = tied[static_cast<std::size_t>(record.value("event", 0)) % tied.size()];
  record["gateway"] = gatewayName(target);
  record["shards_owned"] = owned;
  return target;
}

void Run::startAgent(int i) {
  std::lock_guard lock(*agentMu_[i]);
  const std::string& id = agentIds_[i];
  std::string hosts;
  for (const auto& proxy : zkProxies_[i]) {
    if (!hosts.empty()) hosts += ',';
    hosts += proxy->connectString();
  }
  json config{{"instance_id", id},
              {"zookeeper",
               {{"hosts", hosts},
                {"session_timeout_ms", o_.sessionTimeoutMs},
                {"root", kRoot},
                {"agents_path", kAgentsPath}}},
              {"accounts", accounts_},
              {"gateway",
               {{"url", "http://127.0.0.1:" + std::to_string(gatewayCuts_.empty()
                                                                 ? gatewayProxies_[i]->port()
                                                                 : gatewayCuts_[i]->port())},
                {"heartbeat_interval_ms", 200},
                {"heartbeat_timeout_ms", 700},
                {"request_timeout_ms", 1000}}},
              {"admin", {{"listen", "127.0.0.1:" + std::to_string(agentPorts_[i])}}},
              {"presence",
               {{"listen", "127.0.0.1:" + std::to_string(devicePorts_[i])},
                {"heartbeat_ms", timings_.heartbeatMs},
                {"ping_timeout_ms", timings_.timeoutMs},
                {"check_interval_ms", timings_.checkIntervalMs},
                {"renew_interval_ms", timings_.renewIntervalMs},
                {"lease_ttl_ms", timings_.leaseTtlMs}}},
              {"health", {{"interval_ms", 200}, {"ttl_ms", 1000}}},
              {"lock_delay_ms", o_.breakFencing ? kBreakLockDelayMs : 0},
              {"shutdown_timeout_ms", 3000}};
  const fs::path configPath = o_.out / (id + ".json");
  std::ofstream(configPath) << config.dump(2);
  for (int attempt = 0; attempt < 20; ++attempt) {
    const fs::path log = o_.out / "logs" / (id + "." + std::to_string(++agentRuns_[i]) + ".log");
    spawners_->run([&] {
      agents_[i] = spawn("zk-agent", {"--config", configPath.string()}, id, log);
    });
    auto* process = agents_[i].get();
    const auto port = awaitPort(log, "LISTENING ", 30s, [&] { return process->running(); });
    // Printed right after LISTENING.
    const auto devicePort =
        port ? awaitPort(log, "DEVICES ", 5s, [&] { return process->running(); }) : std::nullopt;
    if (devicePort) {
      agentPorts_[i] = *port;
      devicePorts_[i] = *devicePort;
      return;
    }
    agents_[i]->kill();
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error("agent " + id + " does not start");
}

void Run::killAgent(int i) {
  std::lock_guard lock(*agentMu_[i]);
  if (agents_[i]) agents_[i]->kill();
}

bool Run::agentAlive(int i) {
  std::lock_guard lock(*agentMu_[i]);
  return agents_[i] && agents_[i]->running();
}

void Run::startDevices() {
  if (o_.devicesPerAccount == 0) return;
  std::string endpoints;
  for (const auto port : devicePorts_) {
    if (!endpoints.empty()) endpoints += ',';
    endpoints += "ws://127.0.0.1:" + std::to_string(port);
  }
  std::string accounts;
  for (const auto& account : accounts_) {
    if (!accounts.empty()) accounts += ',';
    accounts += account;
  }
  const std::vector<std::string> args{"--connect",
                                      endpoints,
                                      "--devices",
                                      std::to_string(o_.devicesPerAccount * o_.accounts),
                                      "--accounts",
                                      accounts,
                                      "--device",
                                      "dev",
                                      "--heartbeat-ms",
                                      std::to_string(timings_.heartbeatMs),
                                      "--timeout-ms",
                                      std::to_string(timings_.timeoutMs),
                                      "--backoff-initial-ms",
                                      "100",
                                      "--backoff-max-ms",
                                      std::to_string(timings_.backoffMaxMs),
                                      "--seed",
                                      std::to_string(o_.seed),
                                      "--events"};
  spawners_->run([&] {
    devices_ = std::make_unique<zktest::ChildProcess>(binary("zk-device").string(), args,
                                                      o_.out / "logs" / "devices.log");
  });
}

void Run::restartDevices() {
  if (!devices_) return;
  devices_->signal(SIGKILL);
  devices_->wait(10s);
  startDevices();
}

void Run::stopDevices() {
  if (!devices_) return;
  devices_->signal(SIGTERM);
  devices_->wait(10s);
}

std::optional<std::size_t> Run::connectedServer(int agent) {
  // The agent's current session: the last "session connected ... session=0x..." its log has.
  std::string session;
  {
    std::lock_guard lock(*agentMu_[agent]);
    std::ifstream in(o_.out / "logs" /
                     (agentIds_[agent] + "." + std::to_string(agentRuns_[agent]) + ".log"));
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("session connected ");
      const auto id = line.find(" session=0x", at);
      if (at != std::string::npos && id != std::string::npos)
        session = line.substr(id + 9, line.find(' ', id + 9) - (id + 9));
    }
  }
  if (session.empty()) return std::nullopt;
  // The server whose `cons` lists that session. A connection a partition left behind may still
  // be listed on the server the agent used before: the freshest response (lresp) wins.
  std::optional<std::size_t> found;
  long long freshest = -1;
  for (std::size_t s = 0; s < zk_->size(); ++s) {
    const auto cons = zktest::fourLetterWord(zk_->server(s).port(), "cons", 500ms);
    if (!cons) continue;
    std::istringstream lines(*cons);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("sid=" + session + ",") == std::string::npos) continue;
      const auto at = line.find("lresp=");
      const long long lresp = at == std::string::npos ? 0 : std::atoll(line.c_str() + at + 6);
      if (lresp > freshest) {
        freshest = lresp;
        found = s;
      }
    }
  }
  return found;
}

}  // namespace zkagent::chaos
