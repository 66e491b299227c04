// chaos-runner: a real 3-server ZooKeeper ensemble, one fencing-gateway with its durable log,
// several zk-agents standing for the same accounts, clients sending operations through every
// agent, and a seeded schedule of faults. Writes DIR/history.json for chaos/check.py.
// Usage: see usage() below and docs/testing.md "Chaos runs".
#include <signal.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hold_proxy.hpp"
#include "observer.hpp"
#include "schedule.hpp"
#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_ensemble.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

namespace zkagent::chaos {
namespace {

constexpr const char* kRoot = "/chaos/accounts";
constexpr const char* kAgentsPath = "/chaos/agents";
constexpr int kBreakLockDelayMs = 4000;  // the successor's first ops wait; held stale ops land first
constexpr int kStaleDeliveryDelayMs = 2000;
// How long after a heal (beyond the session timeout) the runner waits for every account to be
// led again before it records the event as unsettled and goes on.
constexpr int kSettleMarginMs = 5000;

// SIGINT/SIGTERM end the schedule early; the run then finishes as usual (final probes, history).
std::atomic<bool> interrupted{false};
extern "C" void onInterrupt(int) { interrupted = true; }

struct Options {
  int events = 40;
  std::uint64_t seed = 1;
  fs::path out;
  int accounts = 50;
  int agents = 3;
  bool breakFencing = false;
  bool printSchedule = false;  // print the schedule as JSON and exit: nothing is started
  int sessionTimeoutMs = 1500;
  int workersPerAgent = 2;
  int thinkMs = 20;
  fs::path binDir;
};

[[noreturn]] void usage(const std::string& error, int exitCode = 2) {
  std::ostream& out = exitCode == 0 ? std::cout : std::cerr;
  if (!error.empty()) out << "chaos-runner: " << error << "\n";
  out << "usage: chaos-runner --events N --seed S --out DIR [--accounts K] [--agents M]\n"
               "                    [--session-timeout-ms MS] [--workers-per-agent W]\n"
               "                    [--think-ms MS] [--bin-dir DIR] [--break-fencing]\n"
               "       chaos-runner --print-schedule --events N --seed S [--agents M]\n";
  std::exit(exitCode);
}

long long parseNumber(const std::string& flag, const std::string& text, long long lo,
                      long long hi) {
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size() && value >= lo && value <= hi) return value;
  } catch (const std::exception&) {
  }
  usage(flag + ": must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
        ", got '" + text + "'");
}

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--break-fencing") {
      o.breakFencing = true;
      continue;
    }
    if (flag == "--help") {
      std::cout << "chaos-runner: a seeded chaos run; writes DIR/history.json for chaos/check.py "
                   "(docs/testing.md \"Chaos runs\")\n";
      usage("", 0);
    }
    if (flag == "--print-schedule") {
      o.printSchedule = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--events") {
      o.events = static_cast<int>(parseNumber(flag, value, 1, 100000));
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(parseNumber(flag, value, 0, 1LL << 62));
    } else if (flag == "--out") {
      o.out = value;
    } else if (flag == "--accounts") {
      o.accounts = static_cast<int>(parseNumber(flag, value, 1, 5000));
    } else if (flag == "--agents") {
      o.agents = static_cast<int>(parseNumber(flag, value, 2, 9));
    } else if (flag == "--session-timeout-ms") {
      o.sessionTimeoutMs = static_cast<int>(parseNumber(flag, value, 600, 60000));
    } else if (flag == "--workers-per-agent") {
      o.workersPerAgent = static_cast<int>(parseNumber(flag, value, 1, 64));
    } else if (flag == "--think-ms") {
      o.thinkMs = static_cast<int>(parseNumber(flag, value, 0, 10000));
    } else if (flag == "--bin-dir") {
      o.binDir = value;
    } else {
      usage("unknown flag '" + flag + "'");
    }
  }
  if (o.out.empty() && !o.printSchedule) usage("--out: required");
  return o;
}

json scheduleJson(const std::vector<Event>& schedule) {
  json planned = json::array();
  for (const auto& e : schedule) {
    json faults = json::array();
    for (const auto& f : e.faults)
      faults.push_back({{"kind", std::string(toString(f.kind))}, {"agent", f.agent},
                        {"duration_ms", f.durationMs}});
    planned.push_back({{"index", e.index}, {"faults", faults}, {"calm_after_ms", e.calmAfterMs}});
  }
  return planned;
}

// Children get PR_SET_PDEATHSIG from the thread that forks them, so every process (agents, the
// gateway, ZooKeeper restarts) is started on one of these threads, which live for the whole run.
class Spawners {
 public:
  explicit Spawners(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Spawners() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs `task` on a spawner thread and waits for it; rethrows what it threw.
  void run(std::function<void()> task) {
    std::packaged_task<void()> packaged(std::move(task));
    auto done = packaged.get_future();
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(packaged));
    }
    wake_.notify_one();
    done.get();
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

std::optional<std::uint16_t> awaitListening(const fs::path& log, milliseconds timeout,
                                            const std::function<bool()>& alive) {
  const auto deadline = SteadyClock::now() + timeout;
  do {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find("LISTENING ");
      if (at == std::string::npos) continue;
      const auto colon = line.rfind(':');
      if (colon != std::string::npos) return static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
    }
    if (!alive()) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  } while (SteadyClock::now() < deadline);
  return std::nullopt;
}

struct OpRecord {
  std::int64_t invoked = 0;
  std::int64_t completed = 0;
  int agent = 0;
  std::string account;
  std::string opId;
  int status = 0;
  std::string outcome;
  std::int64_t token = -1;
  bool probe = false;
};

struct AgentStatus {
  std::int64_t fetchedMs = -1;
  std::map<std::string, std::int64_t> leading;  // account -> token
};

class Run {
 public:
  explicit Run(Options options) : o_(std::move(options)), t0_(SteadyClock::now()) {
    for (int i = 0; i < o_.accounts; ++i) accounts_.push_back("acct-" + std::to_string(i));
    for (int i = 0; i < o_.agents; ++i) agentIds_.push_back("agent-" + std::to_string(i));
  }
  ~Run() { stopThreads(); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  int execute();

 private:
  std::int64_t now() const {
    return std::chrono::duration_cast<milliseconds>(SteadyClock::now() - t0_).count();
  }
  fs::path binary(const std::string& name) const {
    return o_.binDir.empty() ? zktest::binaryPath(name) : o_.binDir / name;
  }
  void note(const std::string& text) {
    std::lock_guard lock(mu_);
    std::cerr << "[chaos " << now() << " ms] " << text << std::endl;
  }

  // ---- processes ----
  void startGateway();
  void killGateway();
  void startAgent(int i);
  void killAgent(int i);
  bool agentAlive(int i);
  std::optional<std::size_t> connectedServer(int agent);

  // ---- load and status ----
  void worker(int agent, int index);
  void pollStatus(int agent);
  OpRecord sendOp(int agent, zkagent::http::Client& client, const std::string& account,
                  const std::string& opId, bool probe);
  std::map<std::string, std::int64_t> leadingOf(int agent, std::int64_t freshAfter);
  bool settled(std::int64_t freshAfter);
  json unsettledAccounts(std::int64_t freshAfter);

  void stopThreads() {
    stopLoad_ = true;
    for (auto& t : workers_) t.join();
    workers_.clear();
    stopPolling_ = true;
    for (auto& t : pollers_) t.join();
    pollers_.clear();
  }
  int runSchedule();

  // ---- faults ----
  json runFault(const Fault& fault, int eventIndex);
  void writeHistory();

  Options o_;
  SteadyClock::time_point t0_;
  std::vector<std::string> accounts_;
  std::vector<std::string> agentIds_;
  std::mutex mu_;

  // Declared first so it is destroyed last: its threads' exit kills the children they started.
  std::unique_ptr<Spawners> spawners_;
  std::unique_ptr<zktest::ZooKeeperEnsemble> zk_;
  std::vector<std::vector<std::unique_ptr<zktest::TcpProxy>>> zkProxies_;  // per agent, per server
  std::vector<std::unique_ptr<HoldProxy>> gatewayProxies_;                 // per agent
  std::unique_ptr<ActiveObserver> observer_;

  std::mutex gatewayMu_;
  std::unique_ptr<zktest::ChildProcess> gateway_;
  std::uint16_t gatewayPort_ = 0;
  int gatewayRuns_ = 0;
  json gatewayRunLog_ = json::array();

  std::vector<std::unique_ptr<std::mutex>> agentMu_;
  std::vector<std::unique_ptr<zktest::ChildProcess>> agents_;
  std::vector<std::uint16_t> agentPorts_;
  std::vector<int> agentRuns_;
  std::vector<AgentStatus> statuses_;
  std::mutex statusMu_;

  std::vector<std::thread> workers_;
  std::vector<std::thread> pollers_;
  std::FILE* zkLog_ = nullptr;  // left open: the C client may log until the process exits
  json events_ = json::array();
  json final_ = json::object();
  std::vector<Event> schedule_;
  std::atomic<bool> stopLoad_{false};
  std::atomic<bool> stopPolling_{false};
  std::mutex opsMu_;
  std::vector<OpRecord> ops_;
};

void Run::startGateway() {
  std::lock_guard lock(gatewayMu_);
  const fs::path log = o_.out / "logs" / ("gateway." + std::to_string(++gatewayRuns_) + ".log");
  // The subscriber listener would default to the next port, which a client's ephemeral port may
  // hold by the time the gateway restarts: any free port (no subscribers in the run).
  std::vector<std::string> args{"--listen", "127.0.0.1:" + std::to_string(gatewayPort_),
                                "--subscribe-listen", "127.0.0.1:0",
                                "--data-dir", (o_.out / "gateway-data").string()};
  if (!o_.breakFencing) {
    // ZooKeeper mode, strict: while its ZooKeeper session is down the gateway refuses (503)
    // rather than falling back to the HWM alone, so every acceptance was checked against active.
    args.insert(args.end(), {"--zk", zk_->connectString(), "--root", kRoot, "--zk-untrusted",
                             "refuse"});
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    spawners_->run([&] {
      gateway_ = std::make_unique<zktest::ChildProcess>(binary("fencing-gateway").string(), args,
                                                        log);
    });
    auto* process = gateway_.get();
    const auto port = awaitListening(log, 30s, [&] { return process->running(); });
    if (port) {
      gatewayPort_ = *port;
      gatewayRunLog_.push_back({{"run", gatewayRuns_}, {"started_ms", now()}, {"port", *port}});
      return;
    }
    gateway_->kill();  // the port may still be held by the killed one: try again
    std::this_thread::sleep_for(200ms);
  }
  throw std::runtime_error("the gateway does not start; see " + log.string());
}

void Run::killGateway() {
  std::lock_guard lock(gatewayMu_);
  if (gateway_) gateway_->kill();
  if (!gatewayRunLog_.empty()) gatewayRunLog_.back()["killed_ms"] = now();
}

void Run::startAgent(int i) {
  std::lock_guard lock(*agentMu_[i]);
  const std::string& id = agentIds_[i];
  std::string hosts;
  for (const auto& proxy : zkProxies_[i]) {
    if (!hosts.empty()) hosts += ',';
    hosts += proxy->connectString();
  }
  json config{
      {"instance_id", id},
      {"zookeeper",
       {{"hosts", hosts},
        {"session_timeout_ms", o_.sessionTimeoutMs},
        {"root", kRoot},
        {"agents_path", kAgentsPath}}},
      {"accounts", accounts_},
      {"gateway",
       {{"url", "http://127.0.0.1:" + std::to_string(gatewayProxies_[i]->port())},
        {"heartbeat_interval_ms", 200},
        {"heartbeat_timeout_ms", 700},
        {"request_timeout_ms", 1000}}},
      {"admin", {{"listen", "127.0.0.1:" + std::to_string(agentPorts_[i])}}},
      // Devices are not part of the run yet; the device endpoint only needs a port of its own.
      {"presence", {{"listen", "127.0.0.1:0"}}},
      {"health", {{"interval_ms", 200}, {"ttl_ms", 1000}}},
      {"lock_delay_ms", o_.breakFencing ? kBreakLockDelayMs : 0},
      {"shutdown_timeout_ms", 3000}};
  const fs::path configPath = o_.out / (id + ".json");
  std::ofstream(configPath) << config.dump(2);
  for (int attempt = 0; attempt < 20; ++attempt) {
    const fs::path log =
        o_.out / "logs" / (id + "." + std::to_string(++agentRuns_[i]) + ".log");
    spawners_->run([&] {
      agents_[i] = std::make_unique<zktest::ChildProcess>(
          binary("zk-agent").string(), std::vector<std::string>{"--config", configPath.string()},
          log);
    });
    auto* process = agents_[i].get();
    const auto port = awaitListening(log, 30s, [&] { return process->running(); });
    if (port) {
      agentPorts_[i] = *port;
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

std::optional<std::size_t> Run::connectedServer(int agent) {
  for (std::size_t s = 0; s < zkProxies_[agent].size(); ++s) {
    if (zkProxies_[agent][s]->openConnections() > 0) return s;
  }
  return std::nullopt;
}

OpRecord Run::sendOp(int agent, zkagent::http::Client& client, const std::string& account,
                     const std::string& opId, bool probe) {
  OpRecord r;
  r.agent = agent;
  r.account = account;
  r.opId = opId;
  r.probe = probe;
  r.invoked = now();
  const auto answer = client.post("/v1/accounts/" + account + "/ops",
                                  json{{"opId", opId}, {"payload", {{"chaos", 1}}}}.dump());
  r.completed = now();
  r.status = answer.status;
  if (!answer.delivered()) {
    // A request that never connected cannot have reached the gateway; anything later can.
    r.outcome = answer.transportError.starts_with("connect") ? "connect_failed" : "timeout";
  } else {
    const auto body = json::parse(answer.body, nullptr, false);
    const auto text = [&](const char* key) {
      return body.is_object() && body.contains(key) && body[key].is_string()
                 ? body[key].get<std::string>()
                 : std::string();
    };
    if (answer.status == 200) {
      r.outcome = "ok";
      if (body.is_object() && body.contains("hwm")) r.token = body["hwm"].get<std::int64_t>();
    } else if (answer.status == 409 || answer.status == 503) {
      r.outcome = !text("reason").empty() ? text("reason") : text("error");
      if (r.outcome.empty()) r.outcome = "http_" + std::to_string(answer.status);
      const std::string detail = text("detail");
      if (detail.starts_with("token ")) r.token = std::atoll(detail.c_str() + 6);
    } else if (answer.status == 502) {
      r.outcome = "gateway_unreachable";
    } else if (answer.status == 404) {
      // The agent's own answer for an account its election group does not hold (yet): refused
      // before anything was forwarded.
      r.outcome = "unknown_account";
    } else {
      r.outcome = "http_" + std::to_string(answer.status);
    }
  }
  std::lock_guard lock(opsMu_);
  ops_.push_back(r);
  return r;
}

void Run::worker(int agent, int index) {
  zkagent::http::ClientOptions options;
  options.port = agentPorts_[agent];
  options.connectTimeout = 500ms;
  options.requestTimeout = 2000ms;
  options.maxIdleConnections = 2;
  zkagent::http::Client client(options);
  std::mt19937_64 rng(o_.seed * 1000003 + static_cast<std::uint64_t>(agent * 64 + index));
  const std::string opPrefix = "c" + std::to_string(agent) + "." + std::to_string(index) + ".";
  for (std::uint64_t n = 0; !stopLoad_; ++n) {
    // Mostly accounts this agent leads (so operations reach the gateway), sometimes any.
    std::string account;
    const auto leading = leadingOf(agent, -1);
    if (!leading.empty() && rng() % 10 < 8) {
      auto it = leading.begin();
      std::advance(it, static_cast<long>(rng() % leading.size()));
      account = it->first;
    } else {
      account = accounts_[rng() % accounts_.size()];
    }
    std::string opId = opPrefix;
    opId += std::to_string(n);
    const auto r = sendOp(agent, client, account, opId, false);
    std::this_thread::sleep_for(milliseconds(r.status == 0 ? 100 : o_.thinkMs));
  }
}

void Run::pollStatus(int agent) {
  zkagent::http::ClientOptions options;
  options.port = agentPorts_[agent];
  options.connectTimeout = 300ms;
  options.requestTimeout = 700ms;
  zkagent::http::Client client(options);
  while (!stopPolling_) {
    const auto asked = now();
    const auto answer = client.get("/v1/status");
    if (answer.delivered() && answer.status == 200) {
      const auto body = json::parse(answer.body, nullptr, false);
      AgentStatus s;
      s.fetchedMs = asked;
      if (body.is_object()) {
        for (const auto& a : body.value("accounts", json::array())) {
          if (a.value("role", "") == "LEADER" && a["token"].is_number_integer())
            s.leading[a["account"].get<std::string>()] = a["token"].get<std::int64_t>();
        }
      }
      std::lock_guard lock(statusMu_);
      statuses_[agent] = std::move(s);
    }
    std::this_thread::sleep_for(150ms);
  }
}

std::map<std::string, std::int64_t> Run::leadingOf(int agent, std::int64_t freshAfter) {
  std::lock_guard lock(statusMu_);
  if (statuses_[agent].fetchedMs <= freshAfter) return {};
  return statuses_[agent].leading;
}

// Every account is led by exactly one agent, by that agent's own status read after
// `freshAfter`, and its token is the seq of the newest active node the observer saw.
bool Run::settled(std::int64_t freshAfter) {
  std::vector<std::map<std::string, std::int64_t>> leading;
  for (int i = 0; i < o_.agents; ++i) {
    if (!agentAlive(i)) return false;
    leading.push_back(leadingOf(i, freshAfter));
    std::lock_guard lock(statusMu_);
    if (statuses_[i].fetchedMs <= freshAfter) return false;
  }
  for (const auto& account : accounts_) {
    const auto active = observer_->latest(account);
    if (!active || !active->present) return false;
    int leaders = 0;
    for (int i = 0; i < o_.agents; ++i) {
      const auto it = leading[i].find(account);
      if (it == leading[i].end()) continue;
      ++leaders;
      if (it->second != active->seq || agentIds_[i] != active->instance) return false;
    }
    if (leaders != 1) return false;
  }
  return true;
}

// For an event that did not settle: each account not led as settled() wants it, with the active
// node the observer saw last and the agents that claim to lead it.
json Run::unsettledAccounts(std::int64_t freshAfter) {
  json out = json::array();
  std::vector<std::map<std::string, std::int64_t>> leading;
  for (int i = 0; i < o_.agents; ++i) leading.push_back(leadingOf(i, freshAfter));
  for (const auto& account : accounts_) {
    const auto active = observer_->latest(account);
    json claims = json::array();
    bool ok = active && active->present;
    int leaders = 0;
    for (int i = 0; i < o_.agents; ++i) {
      const auto it = leading[i].find(account);
      if (it == leading[i].end()) continue;
      ++leaders;
      claims.push_back({{"agent", agentIds_[i]}, {"token", it->second}});
      if (!active || it->second != active->seq || agentIds_[i] != active->instance) ok = false;
    }
    if (ok && leaders == 1) continue;
    out.push_back({{"account", account},
                   {"active", active && active->present
                                  ? json{{"instance", active->instance}, {"seq", active->seq}}
                                  : json(nullptr)},
                   {"leader_claims", claims}});
  }
  return out;
}

json Run::runFault(const Fault& fault, int eventIndex) {
  json record{{"event", eventIndex}, {"kind", std::string(toString(fault.kind))},
              {"agent", fault.agent}, {"duration_ms", fault.durationMs}, {"start_ms", now()}};
  const auto wait = [&](int ms) { std::this_thread::sleep_for(milliseconds(ms)); };
  switch (fault.kind) {
    case FaultKind::agent_kill:
      killAgent(fault.agent);
      wait(fault.durationMs);
      startAgent(fault.agent);
      break;
    case FaultKind::agent_pause:
      agents_[fault.agent]->signal(SIGSTOP);
      wait(fault.durationMs);
      agents_[fault.agent]->signal(SIGCONT);
      break;
    case FaultKind::agent_partition:
      for (auto& p : zkProxies_[fault.agent]) p->setMode(zktest::TcpProxy::Mode::blackhole);
      wait(fault.durationMs);
      for (auto& p : zkProxies_[fault.agent]) p->setMode(zktest::TcpProxy::Mode::pass);
      break;
    case FaultKind::zk_kill_agent_server:
    case FaultKind::zk_kill_leader: {
      std::optional<std::size_t> server;
      if (fault.kind == FaultKind::zk_kill_leader) {
        zk_->awaitQuorum();
        server = zk_->leaderIndex();
      } else {
        server = connectedServer(fault.agent);
      }
      const std::size_t target = server.value_or(static_cast<std::size_t>(eventIndex) % zk_->size());
      record["target"] = "zk-" + std::to_string(target);
      record["target_resolved"] = server.has_value();
      zk_->kill9(target);
      wait(fault.durationMs);
      spawners_->run([&] { zk_->restart(target); });
      break;
    }
    case FaultKind::gateway_kill:
      killGateway();
      wait(fault.durationMs);
      startGateway();
      break;
    case FaultKind::gateway_pause: {
      std::lock_guard lock(gatewayMu_);
      gateway_->signal(SIGSTOP);
      wait(fault.durationMs);
      gateway_->signal(SIGCONT);
      break;
    }
    case FaultKind::stale_delivery: {
      // The agent that leads the most accounts: the most operations in flight to hold.
      int target = 0;
      std::map<std::string, std::int64_t> led;
      for (int i = 0; i < o_.agents; ++i) {
        auto l = leadingOf(i, -1);
        if (l.size() > led.size()) {
          led = std::move(l);
          target = i;
        }
      }
      record["agent"] = target;
      record["accounts_led"] = led.size();
      gatewayProxies_[target]->hold();
      record["held_ms"] = now();  // anything this agent forwards from now on arrives late
      // Cut ZooKeeper before the held heartbeats mark the gateway link down (700 ms), so the
      // agent cannot hand over cleanly: its session must expire and a successor take over.
      wait(150);
      for (auto& p : zkProxies_[target]) p->setMode(zktest::TcpProxy::Mode::blackhole);
      const auto deadline = SteadyClock::now() + milliseconds(2 * o_.sessionTimeoutMs + 5000);
      std::size_t moved = 0;
      while (SteadyClock::now() < deadline) {
        moved = 0;
        for (const auto& [account, token] : led) {
          const auto active = observer_->latest(account);
          if (active && active->present && active->seq != token) ++moved;
        }
        if (!led.empty() && moved == led.size()) break;
        wait(50);
      }
      record["accounts_moved"] = moved;
      // Deliver well after the successors lead (more than the checker's slack), and before a
      // successor's lock delay (negative control) lets its own operations raise the HWM.
      wait(kStaleDeliveryDelayMs);
      record["delivered_ms"] = now();
      gatewayProxies_[target]->release();
      wait(fault.durationMs);
      for (auto& p : zkProxies_[target]) p->setMode(zktest::TcpProxy::Mode::pass);
      break;
    }
  }
  record["heal_ms"] = now();
  return record;
}

void Run::writeHistory() {
  const json planned = scheduleJson(schedule_);
  json meta{{"seed", o_.seed},
            {"events", o_.events},
            {"accounts", accounts_},
            {"agents", agentIds_},
            {"session_timeout_ms", o_.sessionTimeoutMs},
            {"break_fencing", o_.breakFencing},
            {"gateway_mode", o_.breakFencing ? "hwm_only" : "zookeeper (untrusted: refuse)"},
            {"lock_delay_ms", o_.breakFencing ? kBreakLockDelayMs : 0},
            {"root", kRoot},
            {"gateway_data", "gateway-data"},
            {"devices", json::array()},  // hook: simulated devices and their leases, later
            {"ended_ms", now()}};
  const fs::path tmp = o_.out / "history.json.tmp";
  std::ofstream out(tmp);
  out << "{\"meta\":" << meta.dump() << ",\n\"schedule\":" << planned.dump()
      << ",\n\"events\":" << events_.dump() << ",\n\"final\":" << final_.dump()
      << ",\n\"gateway_runs\":" << gatewayRunLog_.dump()
      << ",\n\"observer_fields\":[\"t_ms\",\"server\",\"account\",\"present\",\"seq\",\"instance\","
         "\"session\",\"zxid\"],\n\"observer\":[";
  bool first = true;
  for (const auto& s : observer_ ? observer_->samples() : std::vector<ActiveSample>{}) {
    out << (first ? "\n" : ",\n")
        << json::array({s.tMs, s.server, s.account, s.present, s.seq, s.instance, s.sessionId,
                        s.zxid})
               .dump();
    first = false;
  }
  out << "],\n\"ops_fields\":[\"invoked_ms\",\"completed_ms\",\"agent\",\"account\",\"op_id\","
         "\"status\",\"outcome\",\"token\",\"probe\"],\n\"ops\":[";
  first = true;
  std::lock_guard lock(opsMu_);
  for (const auto& r : ops_) {
    out << (first ? "\n" : ",\n")
        << json::array({r.invoked, r.completed, r.agent, r.account, r.opId, r.status, r.outcome,
                        r.token, r.probe})
               .dump();
    first = false;
  }
  out << "]}\n";
  out.close();
  fs::rename(tmp, o_.out / "history.json");
  for (std::size_t s = 0; zk_ && s < zk_->size(); ++s) {
    std::error_code ignored;
    fs::copy_file(zk_->server(s).directory() / "server.log",
                  o_.out / "logs" / ("zk-" + std::to_string(s) + ".log"),
                  fs::copy_options::overwrite_existing, ignored);
  }
}

int Run::execute() {
  try {
    const int code = runSchedule();
    writeHistory();
    return code;
  } catch (const std::exception& e) {
    final_["error"] = e.what();
    stopThreads();
    try {
      writeHistory();
    } catch (const std::exception&) {
    }
    throw;
  }
}

int Run::runSchedule() {
  fs::remove_all(o_.out / "logs");  // a reused DIR: the logs are of this run only
  fs::create_directories(o_.out / "logs");
  fs::remove_all(o_.out / "gateway-data");
  fs::create_directories(o_.out / "gateway-data");
  spawners_ = std::make_unique<Spawners>(4);
  schedule_ = makeSchedule({o_.seed, o_.events, o_.agents, o_.sessionTimeoutMs, o_.breakFencing});
  const auto& schedule = schedule_;
  note("seed " + std::to_string(o_.seed) + ", " + std::to_string(schedule.size()) + " events, " +
       std::to_string(o_.accounts) + " accounts, " + std::to_string(o_.agents) + " agents" +
       (o_.breakFencing ? ", FENCING BROKEN (negative control)" : ""));

  // The observer's ZooKeeper client logs to a file of its own, warnings and up.
  zkLog_ = std::fopen((o_.out / "logs" / "observer-zk-client.log").c_str(), "a");
  if (zkLog_ != nullptr) zoo_set_log_stream(zkLog_);
  zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
  spawners_->run([&] { zk_ = std::make_unique<zktest::ZooKeeperEnsemble>(3); });
  std::vector<std::string> serverHosts;
  for (std::size_t s = 0; s < zk_->size(); ++s) serverHosts.push_back(zk_->server(s).connectString());
  observer_ = std::make_unique<ActiveObserver>(serverHosts, kRoot, accounts_, t0_);

  startGateway();
  for (int i = 0; i < o_.agents; ++i) {
    std::vector<std::unique_ptr<zktest::TcpProxy>> proxies;
    for (std::size_t s = 0; s < zk_->size(); ++s)
      proxies.push_back(std::make_unique<zktest::TcpProxy>(zk_->server(s).port()));
    zkProxies_.push_back(std::move(proxies));
    gatewayProxies_.push_back(std::make_unique<HoldProxy>(gatewayPort_));
    agentMu_.push_back(std::make_unique<std::mutex>());
    agents_.emplace_back();
    agentPorts_.push_back(0);
    agentRuns_.push_back(0);
    statuses_.emplace_back();
  }
  for (int i = 0; i < o_.agents; ++i) startAgent(i);
  note("ensemble " + zk_->connectString() + ", gateway 127.0.0.1:" + std::to_string(gatewayPort_));

  for (int i = 0; i < o_.agents; ++i) pollers_.emplace_back([this, i] { pollStatus(i); });
  const auto startDeadline = SteadyClock::now() + 60s;
  while (!settled(-1) && SteadyClock::now() < startDeadline) std::this_thread::sleep_for(100ms);
  if (!settled(-1)) throw std::runtime_error("the accounts are not all led 60 s after the start");
  note("every account led; load starts");
  for (int i = 0; i < o_.agents; ++i)
    for (int w = 0; w < o_.workersPerAgent; ++w) workers_.emplace_back([this, i, w] { worker(i, w); });
  std::this_thread::sleep_for(2s);

  auto& events = events_;
  std::int64_t lastHeal = now();
  for (const auto& event : schedule) {
    if (interrupted) {
      note("interrupted: the schedule ends early");
      final_["interrupted_before_event"] = event.index;
      break;
    }
    std::vector<std::future<json>> running;
    const std::int64_t started = now();
    for (const auto& fault : event.faults)
      running.push_back(std::async(std::launch::async, [&, fault] { return runFault(fault, event.index); }));
    json faults = json::array();
    std::int64_t heal = started;
    for (auto& f : running) {
      faults.push_back(f.get());
      heal = std::max(heal, faults.back()["heal_ms"].get<std::int64_t>());
    }
    lastHeal = heal;
    std::string kinds;
    for (const auto& f : faults) {
      if (!kinds.empty()) kinds += '+';
      kinds += f["kind"].get<std::string>();
    }
    if (event.index == schedule.back().index) {
      // The last heal: the final probes below measure from it, at once (check 5).
      events.push_back({{"index", event.index}, {"kinds", kinds}, {"start_ms", started},
                        {"heal_ms", heal}, {"faults", faults}, {"settled_ms", nullptr},
                        {"unsettled", json::array()}, {"reelect_ms", nullptr}, {"last", true}});
      note("event " + std::to_string(event.index) + " " + kinds + ": healed after " +
           std::to_string(heal - started) + " ms (the last)");
      break;
    }
    // Settling: every account led again (the re-election time after this heal).
    const auto deadline = SteadyClock::now() + milliseconds(o_.sessionTimeoutMs + kSettleMarginMs);
    std::optional<std::int64_t> settledAt;
    while (SteadyClock::now() < deadline) {
      if (settled(heal)) {
        settledAt = now();
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    json unsettled = settledAt ? json::array() : unsettledAccounts(heal);
    events.push_back({{"index", event.index}, {"kinds", kinds}, {"start_ms", started},
                      {"heal_ms", heal}, {"faults", faults},
                      {"settled_ms", settledAt ? json(*settledAt) : json(nullptr)},
                      {"unsettled", unsettled},
                      {"reelect_ms", settledAt ? json(*settledAt - heal) : json(nullptr)}});
    note("event " + std::to_string(event.index) + " " + kinds + ": healed after " +
         std::to_string(heal - started) + " ms, " +
         (settledAt ? "led again " + std::to_string(*settledAt - heal) + " ms after the heal"
                    : std::string("NOT led again")));
    std::this_thread::sleep_for(milliseconds(event.calmAfterMs));
  }

  // After the last heal: every account led again, and an operation through its leader succeeds.
  // The workers stop after their current operation (joined later, not to delay the probes).
  stopLoad_ = true;
  std::vector<std::unique_ptr<zkagent::http::Client>> probeClients;
  for (int i = 0; i < o_.agents; ++i) {
    zkagent::http::ClientOptions options;
    options.port = agentPorts_[i];
    options.connectTimeout = 500ms;
    options.requestTimeout = 2000ms;
    probeClients.push_back(std::make_unique<zkagent::http::Client>(options));
  }
  json perAccount = json::object();
  std::set<std::string> pending(accounts_.begin(), accounts_.end());
  // The checker's bound is session timeout + lock delay + 2 s; probing on past it only measures
  // how late an account comes back.
  const auto probeDeadline =
      SteadyClock::now() +
      milliseconds(o_.sessionTimeoutMs + (o_.breakFencing ? kBreakLockDelayMs : 0) + 10000);
  for (int round = 0; !pending.empty() && SteadyClock::now() < probeDeadline; ++round) {
    for (auto it = pending.begin(); it != pending.end();) {
      const auto active = observer_->latest(*it);
      int leader = -1;
      for (int i = 0; i < o_.agents && active && active->present; ++i) {
        if (agentIds_[i] == active->instance) leader = i;
      }
      if (leader >= 0) {
        const auto r = sendOp(leader, *probeClients[leader], *it,
                              "probe." + *it + "." + std::to_string(round), true);
        if (r.status == 200) {
          perAccount[*it] = {{"led_ms", r.completed - lastHeal}, {"agent", agentIds_[leader]},
                             {"token", r.token}};
          it = pending.erase(it);
          continue;
        }
      }
      ++it;
    }
    if (!pending.empty()) std::this_thread::sleep_for(100ms);
  }
  final_["last_heal_ms"] = lastHeal;
  final_["accounts"] = perAccount;
  final_["not_led"] = std::vector<std::string>(pending.begin(), pending.end());
  note(pending.empty() ? "every account led and answering after the last heal"
                       : std::to_string(pending.size()) + " accounts not led after the last heal");

  stopThreads();
  for (int i = 0; i < o_.agents; ++i) killAgent(i);
  {
    std::lock_guard lock(gatewayMu_);
    gateway_->signal(SIGTERM);
    gateway_->wait(10s);
  }
  std::this_thread::sleep_for(300ms);  // the observer sees the last changes
  return 0;
}

}  // namespace
}  // namespace zkagent::chaos

int main(int argc, char** argv) {
  const auto options = zkagent::chaos::parseOptions(argc, argv);
  if (options.printSchedule) {
    std::cout << zkagent::chaos::scheduleJson(zkagent::chaos::makeSchedule(
                     {options.seed, options.events, options.agents, options.sessionTimeoutMs,
                      options.breakFencing}))
                     .dump(1)
              << "\n";
    return 0;
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, zkagent::chaos::onInterrupt);
  ::signal(SIGTERM, zkagent::chaos::onInterrupt);
  try {
    zkagent::chaos::Run run(options);
    return run.execute();
  } catch (const std::exception& e) {
    std::cerr << "chaos-runner: " << e.what() << "\nseed " << options.seed << "; logs kept in "
              << options.out << "\n";
    return 3;
  }
}
