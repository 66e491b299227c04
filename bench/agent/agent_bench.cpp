// agent_bench: whole-system numbers for zk-agent (real ZooKeeper, fencing-gateway, zk-agent
// processes), printed as one JSON object:
//
//   ops        gated operations per second through agent -> gateway, and the same load sent
//              straight to the gateway (the peer in the same run) as the ratio's denominator;
//   failover   time from kill -9 / SIGTERM of the leader of N accounts until the standby leads
//              all of them (as its /v1/status says);
//   memory     agent RSS with 10 and with M accounts, and the difference per account.
//
// usage: agent_bench [--accounts-failover N] [--accounts-memory M] [--seconds S] [--clients C]
//                    [--ops-only 1] [--rounds R]
// The ops phase alternates agent and direct runs (R rounds each) so both see the same machine
// load; it reports the best and the median ratio, and p50/p99 latency per path.
#include <signal.h>

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
#include <string>
#include <thread>
#include <vector>

#include "agent_fixtures.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using zkagent_test::accountNames;
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
};

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const auto at = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
  return v[at];
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

long rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
  }
  return -1;
}

class Bench {
 public:
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

  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts) {
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
        zktest::binaryPath("zk-agent").string(),
        std::vector<std::string>{"--config", path.string()}, dir_ / (id + ".log"));
    auto port = zktest::awaitListeningPort(dir_ / (id + ".log"), 30s);
    if (!port) throw std::runtime_error("zk-agent " + id + " did not start");
    agents_.push_back(std::make_unique<Agent>(Agent{std::move(process), *port, clientFor(*port)}));
    return *agents_.back();
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
  // every answered request.
  Load opsPerSecond(uint16_t port, const std::function<std::string(int, long)>& target,
                    const std::function<std::string(int, long)>& body) {
    std::atomic<long> ok{0}, bad{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    std::vector<std::vector<double>> latencies(static_cast<size_t>(options_.clients));
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
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    Load load;
    load.refused = bad;
    load.perSecond =
        static_cast<double>(ok) / std::chrono::duration<double>(Clock::now() - started).count();
    load.p50Ms = percentile(all, 0.50);
    load.p99Ms = percentile(all, 0.99);
    return load;
  }

  static json toJson(const Load& l) {
    return {
        {"per_s", l.perSecond}, {"p50_ms", l.p50Ms}, {"p99_ms", l.p99Ms}, {"refused", l.refused}};
  }

  json run() {
    json out;
    // ---- ops/s
    {
      const auto accounts = accountNames(static_cast<size_t>(options_.clients));
      auto& agent = startAgent("ops-agent", accounts);
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
            });
      };
      auto direct = [&] {
        return opsPerSecond(
            gatewayPort_, [](int, long) { return std::string("/v1/ops"); },
            [&](int c, long i) {
              const auto& a = tokens[accounts[static_cast<size_t>(c)]];
              return json{
                  {"account", a["account"]},   {"token", a["token"]},
                  {"instanceId", "ops-agent"}, {"sessionId", std::stoll(sessionId, nullptr, 16)},
                  {"opId", opId('d', c, i)},   {"payload", "x"}}
                  .dump();
            });
      };
      json rounds = json::array();
      std::vector<double> ratios;
      for (int r = 0; r < options_.rounds; ++r) {
        const Load a = viaAgent();
        const Load d = direct();
        ratios.push_back(d.perSecond > 0 ? a.perSecond / d.perSecond : 0.0);
        rounds.push_back({{"via_agent", toJson(a)},
                          {"direct_to_gateway", toJson(d)},
                          {"ratio_agent_over_direct", ratios.back()},
                          {"added_p99_ms", a.p99Ms - d.p99Ms}});
        std::cerr << "ops round " << r + 1 << ": agent " << a.perSecond << "/s p99 " << a.p99Ms
                  << " ms, direct " << d.perSecond << "/s p99 " << d.p99Ms << " ms, ratio "
                  << ratios.back() << "\n";
      }
      std::vector<double> sorted = ratios;
      std::sort(sorted.begin(), sorted.end());
      out["ops"] = {{"clients", options_.clients},
                    {"seconds", options_.seconds},
                    {"rounds", rounds},
                    {"ratio_median", sorted[sorted.size() / 2]},
                    {"ratio_best", sorted.back()}};
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
