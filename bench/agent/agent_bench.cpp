// agent_bench: whole-system numbers for zk-agent (real ZooKeeper, fencing-gateway, zk-agent
// processes), printed as one JSON object:
//
//   ops        gated operations per second through agent -> gateway, the same load sent
//              straight to the gateway (the peer in the same run) as the ratio's denominator,
//              and through HAProxy (when installed) as the proxy a user would put in the agent's
//              place; the agent and HAProxy pinned to the same CPU, with their CPU per operation;
//   failover   time from kill -9 / SIGTERM of the leader of N accounts until the standby leads
//              all of them (as its /v1/status says);
//   memory     agent RSS with 10 and with M accounts, and the difference per account.
//
// usage: agent_bench [--accounts-failover N] [--accounts-memory M] [--seconds S] [--clients C]
//                    [--ops-only 1] [--rounds R]
// The ops phase alternates agent, HAProxy and direct runs (R rounds each) so all see the same
// machine load; it reports the best and the median ratio, p50/p99 latency per path, the latency
// each proxy adds over direct in the same round, and its CPU per forwarded operation.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent_fixtures.hpp"
#include "zkagent/http.hpp"
#include "zkbench/process.hpp"
#include "zkbench/stats.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using zkagent_test::accountNames;
using zkbench::cpuSeconds;
using zkbench::rssKiB;
using zktest::ChildProcess;

struct Options {
  size_t failoverAccounts = 1000;
  size_t memoryAccounts = 10000;
  int seconds = 5;
  int clients = 8;
  int sessionTimeoutMs = 2000;
  bool opsOnly = false;
  int rounds = 3;
};

struct Load {
  double perSecond = 0;
  double p50Ms = 0, p99Ms = 0;
  long refused = 0;
  std::optional<double> cpuMicrosPerOp;  // of the process forwarding the load, if any
};

std::optional<std::string> haproxyPath() {
  for (const char* path : {"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return std::nullopt;
}

// The proxy a user would put where the agent is: HTTP mode, one thread, kept-alive connections
// to the gateway shared between clients, no logging (the agent logs at warn only).
std::string haproxyConfig(uint16_t listen, uint16_t gateway) {
  return "global\n"
         "  nbthread 1\n"
         "  maxconn 4096\n"
         "defaults\n"
         "  mode http\n"
         "  option http-keep-alive\n"
         "  http-reuse always\n"
         "  timeout connect 2s\n"
         "  timeout client 30s\n"
         "  timeout server 30s\n"
         "frontend ops\n"
         "  bind 127.0.0.1:" +
         std::to_string(listen) +
         "\n"
         "  default_backend gateway\n"
         "backend gateway\n"
         "  server gateway 127.0.0.1:" +
         std::to_string(gateway) + "\n";
}

std::unique_ptr<zkagent::http::Client> clientFor(uint16_t port,
                                                 std::chrono::milliseconds timeout = 10000ms) {
  zkagent::http::ClientOptions o;
  o.port = port;
  o.requestTimeout = timeout;
  return std::make_unique<zkagent::http::Client>(o);
}

std::string opId(char prefix, int client, long i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%c%d-%ld", prefix, client, i);
  return buf;
}

class Bench {
 public:
  // The CPU the agent and HAProxy share in the ops phase (load and gateway run anywhere).
  static constexpr const char* kPinnedCpu = "1";

  explicit Bench(Options options) : options_(options) {
    dir_ = std::filesystem::temp_directory_path() / ("agent-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_ / "gateway");
    gateway_ = std::make_unique<ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(),
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--data-dir",
                                 (dir_ / "gateway").string(), "--zk", zk_.connectString(), "--root",
                                 "/bench/accounts"},
        dir_ / "gateway.log");
    auto port = zktest::awaitListeningPort(dir_ / "gateway.log", 30s);
    if (!port) throw std::runtime_error("fencing-gateway did not start");
    gatewayPort_ = *port;
  }
  ~Bench() {
    haproxy_.reset();
    agents_.clear();
    gateway_.reset();
    std::filesystem::remove_all(dir_);
  }

  struct Agent {
    std::unique_ptr<ChildProcess> process;
    uint16_t port;
    std::unique_ptr<zkagent::http::Client> client;
    // From /v1/status: exact at the moment of the call (failover timing).
    size_t leading() const {
      auto r = client->get("/v1/status");
      if (!r.delivered()) return 0;
      auto s = json::parse(r.body, nullptr, false);
      return s.is_object() ? s.value("leading", size_t{0}) : 0;
    }
    // From /metrics: updated every placement pass (up to 500 ms late), but a small answer, so
    // polling it does not inflate the memory being measured.
    size_t leadingFromMetrics() const {
      auto r = client->get("/metrics");
      const std::string series = "zkagent_accounts{role=\"LEADER\"} ";
      const auto at = r.body.find(series);
      return at == std::string::npos ? 0 : std::stoul(r.body.substr(at + series.size()));
    }
  };

  // `pinned`: on kPinnedCpu, beside HAProxy (the ops phase compares the two on equal terms).
  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts,
                    bool pinned = false) {
    json config{{"instance_id", id},
                {"zookeeper",
                 {{"hosts", zk_.connectString()},
                  {"session_timeout_ms", options_.sessionTimeoutMs},
                  {"root", "/bench/accounts"},
                  {"agents_path", "/bench/agents"}}},
                {"accounts", accounts},
                {"gateway", {{"url", "http://127.0.0.1:" + std::to_string(gatewayPort_)}}},
                {"admin", {{"listen", "127.0.0.1:0"}}},
                {"presence", {{"listen", "127.0.0.1:0"}}},
                {"health", {{"interval_ms", 500}, {"ttl_ms", 3000}}},
                {"log", {{"level", "warn"}}}};
    const auto path = dir_ / (id + ".json");
    std::ofstream(path) << config.dump();
    auto process = std::make_unique<ChildProcess>(
        pinned ? "taskset" : zktest::binaryPath("zk-agent").string(),
        pinned ? std::vector<std::string>{"-c", kPinnedCpu, zktest::binaryPath("zk-agent").string(),
                                          "--config", path.string()}
               : std::vector<std::string>{"--config", path.string()},
        dir_ / (id + ".log"));
    auto port = zktest::awaitListeningPort(dir_ / (id + ".log"), 30s);
    if (!port) throw std::runtime_error("zk-agent " + id + " did not start");
    agents_.push_back(std::make_unique<Agent>(Agent{std::move(process), *port, clientFor(*port)}));
    return *agents_.back();
  }

  // HAProxy in front of the gateway, pinned like the agent; returns once it forwards.
  uint16_t startHaproxy(const std::string& program) {
    const uint16_t port = zktest::freeLoopbackPort();  // HAProxy is told its port
    const auto config = dir_ / "haproxy.cfg";
    std::ofstream(config) << haproxyConfig(port, gatewayPort_);
    haproxy_ = std::make_unique<ChildProcess>(
        "taskset",
        std::vector<std::string>{"-c", kPinnedCpu, program, "-f", config.string(), "-db"},
        dir_ / "haproxy.log");
    auto client = clientFor(port, 1000ms);
    const auto from = Clock::now();
    while (client->get("/healthz").status != 200) {
      if (Clock::now() - from > 10s) throw std::runtime_error("haproxy did not forward in time");
      std::this_thread::sleep_for(50ms);
    }
    return port;
  }

  // Seconds until `agent` leads `n` accounts; throws past `limit`.
  static double awaitLeading(const Agent& agent, size_t n, Clock::time_point from,
                             std::chrono::seconds limit = 120s, bool viaMetrics = false) {
    while ((viaMetrics ? agent.leadingFromMetrics() : agent.leading()) < n) {
      if (Clock::now() - from > limit) throw std::runtime_error("accounts not led in time");
      std::this_thread::sleep_for(20ms);
    }
    return std::chrono::duration<double>(Clock::now() - from).count();
  }

  // Closed-loop load: `clients` threads, each with its own keep-alive connection; the latency of
  // every answered request, and the CPU `forwarder` (if any) used per answered operation.
  Load opsPerSecond(uint16_t port, const std::function<std::string(int, long)>& target,
                    const std::function<std::string(int, long)>& body,
                    std::optional<pid_t> forwarder = std::nullopt) {
    Load load;
    std::atomic<long> ok{0}, bad{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    std::vector<std::vector<double>> latencies(static_cast<size_t>(options_.clients));
    const double cpuBefore = forwarder ? cpuSeconds(*forwarder) : 0;
    for (int c = 0; c < options_.clients; ++c) {
      threads.emplace_back([&, c] {
        auto client = clientFor(port);
        auto& mine = latencies[static_cast<size_t>(c)];
        for (long i = 0; !stop; ++i) {
          const auto sent = Clock::now();
          auto r = client->post(target(c, i), body(c, i));
          mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
          (r.status == 200 ? ok : bad)++;
        }
      });
    }
    const auto started = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(options_.seconds));
    stop = true;
    for (auto& t : threads) t.join();
    if (forwarder && ok > 0) {
      load.cpuMicrosPerOp =
          (cpuSeconds(*forwarder) - cpuBefore) * 1e6 / static_cast<double>(ok.load());
    }
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    load.refused = bad;
    load.perSecond =
        static_cast<double>(ok) / std::chrono::duration<double>(Clock::now() - started).count();
    load.p50Ms = zkbench::quantile(all, 0.50);
    load.p99Ms = zkbench::quantileOfSorted(all, 0.99);
    return load;
  }

  // A path's figures; a proxy's also what it adds over `direct` (the same round).
  static json toJson(const Load& l, const Load* direct = nullptr) {
    json out{
        {"per_s", l.perSecond}, {"p50_ms", l.p50Ms}, {"p99_ms", l.p99Ms}, {"refused", l.refused}};
    if (l.cpuMicrosPerOp) out["cpu_us_per_op"] = *l.cpuMicrosPerOp;
    if (direct != nullptr) {
      out["added_p50_ms"] = l.p50Ms - direct->p50Ms;
      out["added_p99_ms"] = l.p99Ms - direct->p99Ms;
    }
    return out;
  }

  static double median(std::vector<double> values) { return zkbench::quantile(values, 0.5); }

  json run() {
    json out;
    // ---- ops/s
    {
      const auto accounts = accountNames(static_cast<size_t>(options_.clients));
      auto& agent = startAgent("ops-agent", accounts, true);
      awaitLeading(agent, accounts.size(), Clock::now());
      // The peer: the same operations straight to the gateway with the leader's token.
      auto status = json::parse(agent.client->get("/v1/status").body);
      std::map<std::string, json> tokens;
      for (const auto& a : status["accounts"]) tokens[a["account"]] = a;
      const std::string sessionId = status["session"]["id"];
      auto viaAgent = [&] {
        return opsPerSecond(
            agent.port,
            [&](int c, long) {
              return "/v1/accounts/" + accounts[static_cast<size_t>(c)] + "/ops";
            },
            [](int c, long i) {
              return json{{"opId", opId('a', c, i)}, {"payload", "x"}}.dump();
            },
            agent.process->pid());
      };
      // The operation as the agent would forward it, the token already in it.
      auto tokenedBody = [&](char prefix) {
        return [&, prefix](int c, long i) {
          const auto& a = tokens[accounts[static_cast<size_t>(c)]];
          return json{
              {"account", a["account"]},    {"token", a["token"]},
              {"instanceId", "ops-agent"},  {"sessionId", std::stoll(sessionId, nullptr, 16)},
              {"opId", opId(prefix, c, i)}, {"payload", "x"}}
              .dump();
        };
      };
      const auto opsTarget = [](int, long) { return std::string("/v1/ops"); };
      auto direct = [&] { return opsPerSecond(gatewayPort_, opsTarget, tokenedBody('d')); };
      const auto haproxy = haproxyPath();
      const uint16_t haproxyPort = haproxy ? startHaproxy(*haproxy) : 0;
      auto viaHaproxy = [&] {
        return opsPerSecond(haproxyPort, opsTarget, tokenedBody('h'), haproxy_->pid());
      };
      json rounds = json::array();
      std::vector<double> ratios, agentCpu, haproxyCpu, agentAddedP50, haproxyAddedP50;
      for (int r = 0; r < options_.rounds; ++r) {
        const Load a = viaAgent();
        const std::optional<Load> h = haproxy_ ? std::optional(viaHaproxy()) : std::nullopt;
        const Load d = direct();
        ratios.push_back(d.perSecond > 0 ? a.perSecond / d.perSecond : 0.0);
        json round{{"via_agent", toJson(a, &d)},
                   {"direct_to_gateway", toJson(d)},
                   {"ratio_agent_over_direct", ratios.back()}};
        agentCpu.push_back(a.cpuMicrosPerOp.value_or(0));
        agentAddedP50.push_back(a.p50Ms - d.p50Ms);
        std::cerr << "ops round " << r + 1 << ": agent " << a.perSecond << "/s p50 " << a.p50Ms
                  << " p99 " << a.p99Ms << " ms " << agentCpu.back() << " us/op";
        if (h) {
          round["via_haproxy"] = toJson(*h, &d);
          haproxyCpu.push_back(h->cpuMicrosPerOp.value_or(0));
          haproxyAddedP50.push_back(h->p50Ms - d.p50Ms);
          std::cerr << ", haproxy " << h->perSecond << "/s p50 " << h->p50Ms << " p99 " << h->p99Ms
                    << " ms " << haproxyCpu.back() << " us/op";
        }
        std::cerr << ", direct " << d.perSecond << "/s p50 " << d.p50Ms << " p99 " << d.p99Ms
                  << " ms\n";
        rounds.push_back(std::move(round));
      }
      out["ops"] = {{"clients", options_.clients},
                    {"seconds", options_.seconds},
                    {"pinned_cpu", kPinnedCpu},
                    {"rounds", rounds},
                    {"ratio_median", median(ratios)},
                    {"ratio_best", *std::max_element(ratios.begin(), ratios.end())},
                    {"agent_cpu_us_per_op_median", median(agentCpu)},
                    {"agent_added_p50_ms_median", median(agentAddedP50)}};
      if (haproxy_) {
        // The targets: CPU per operation at most HAProxy's; added p50 within HAProxy's + 0.1 ms.
        out["ops"]["haproxy_cpu_us_per_op_median"] = median(haproxyCpu);
        out["ops"]["haproxy_added_p50_ms_median"] = median(haproxyAddedP50);
        out["ops"]["cpu_agent_over_haproxy"] = median(agentCpu) / median(haproxyCpu);
        out["ops"]["added_p50_agent_minus_haproxy_ms"] =
            median(agentAddedP50) - median(haproxyAddedP50);
        haproxy_->signal(SIGTERM);
        haproxy_->wait(10s);
      } else {
        out["ops"]["via_haproxy"] = "not run: haproxy is not installed";
      }
      agent.process->signal(SIGTERM);
      agent.process->wait(10s);
    }
    if (options_.opsOnly) return out;
    // ---- failover of N accounts
    {
      const auto accounts = accountNames(options_.failoverAccounts);
      auto& a = startAgent("fail-a", accounts);
      const double firstElection = awaitLeading(a, accounts.size(), Clock::now());
      auto& b = startAgent("fail-b", accounts);
      std::this_thread::sleep_for(3s);  // b stands for every account and a sees its report
      auto t0 = Clock::now();
      a.process->signal(SIGTERM);
      const double sigterm = awaitLeading(b, accounts.size(), t0);
      a.process->wait(10s);
      auto& c = startAgent("fail-c", accounts);
      std::this_thread::sleep_for(3s);
      t0 = Clock::now();
      b.process->kill();
      const double kill9 = awaitLeading(c, accounts.size(), t0);
      out["failover"] = {{"accounts", accounts.size()},
                         {"session_timeout_ms", options_.sessionTimeoutMs},
                         {"initial_election_s", firstElection},
                         {"sigterm_s", sigterm},
                         {"kill9_s", kill9}};
      c.process->signal(SIGTERM);
      c.process->wait(10s);
    }
    // ---- memory per account
    {
      auto& small = startAgent("mem-small", accountNames(10));
      awaitLeading(small, 10, Clock::now(), 120s, true);
      std::this_thread::sleep_for(1s);
      const long smallKiB = rssKiB(small.process->pid());
      const auto names = accountNames(options_.memoryAccounts, "mem-");
      const auto t0 = Clock::now();
      auto& big = startAgent("mem-big", names);
      const double joined = awaitLeading(big, names.size(), t0, 600s, true);
      std::this_thread::sleep_for(1s);
      const long bigKiB = rssKiB(big.process->pid());
      out["memory"] = {{"accounts", names.size()},
                       {"rss_kib_10_accounts", smallKiB},
                       {"rss_kib_many_accounts", bigKiB},
                       {"bytes_per_account", static_cast<double>(bigKiB - smallKiB) * 1024.0 /
                                                 static_cast<double>(names.size() - 10)},
                       {"time_to_lead_all_s", joined}};
    }
    return out;
  }

 private:
  Options options_;
  zktest::ZooKeeperServer zk_;
  std::filesystem::path dir_;
  std::unique_ptr<ChildProcess> gateway_;
  std::unique_ptr<ChildProcess> haproxy_;
  uint16_t gatewayPort_ = 0;
  std::vector<std::unique_ptr<Agent>> agents_;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const long value = std::stol(args[i + 1]);
    if (args[i] == "--accounts-failover")
      options.failoverAccounts = static_cast<size_t>(value);
    else if (args[i] == "--accounts-memory")
      options.memoryAccounts = static_cast<size_t>(value);
    else if (args[i] == "--seconds")
      options.seconds = static_cast<int>(value);
    else if (args[i] == "--clients")
      options.clients = static_cast<int>(value);
    else if (args[i] == "--ops-only")
      options.opsOnly = value != 0;
    else if (args[i] == "--rounds" && value > 0)
      options.rounds = static_cast<int>(value);
    else {
      std::cerr << "usage: agent_bench [--accounts-failover N] [--accounts-memory M] [--seconds S] "
                   "[--clients C] [--ops-only 1] [--rounds R]\n";
      return 2;
    }
  }
  try {
    Bench bench(options);
    std::cout << bench.run().dump(2) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "agent_bench: " << e.what() << "\n";
    return 1;
  }
}
