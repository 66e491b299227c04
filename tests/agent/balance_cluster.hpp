// A fencing-gateway and zk-agent processes with balancing on, over a ZooKeeper the caller owns,
// and a leadership sampler: shared by the balance process tests and the balance benchmark.
#pragma once

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_fixtures.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"

namespace zkagent_test {

struct BalanceAgent : zktest::AgentProcess {
  using AgentProcess::AgentProcess;

  std::atomic<bool> alive{true};  // false from the kill on (the sampler stops reading it)

  // account -> token of every account this agent leads, by its own status (empty when it does
  // not answer).
  std::map<std::string, int64_t> leaderTokens() const {
    std::map<std::string, int64_t> out;
    const auto s = status();
    if (!s.is_object()) return out;
    for (const auto& a : s["accounts"]) {
      if (a["role"] == "LEADER") out[a["account"].get<std::string>()] = a.value("token", -1);
    }
    return out;
  }
  // The sum of a counter's samples whose label text contains `labels`.
  double metric(const std::string& family, const std::string& labels = "") const {
    double sum = 0;
    std::istringstream in(metrics());
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with(family) || line.find(labels) == std::string::npos) continue;
      if (line.size() > family.size() && line[family.size()] != '{' && line[family.size()] != ' ')
        continue;
      sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
  }
};

class BalanceCluster {
 public:
  static constexpr const char* kAdminToken = "balance-admin-token";

  BalanceCluster(std::string zkHosts, std::string root, std::filesystem::path dir)
      : zkHosts_(std::move(zkHosts)), root_(std::move(root)), dir_(std::move(dir)) {
    gateway_ = std::make_unique<zktest::GatewayProcess>(dir_, zkHosts_, root_);
  }
  ~BalanceCluster() {
    agents_.clear();
    gateway_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Short timings, so the tests see settle windows, expiries and health in seconds.
  nlohmann::json config(const std::string& id, const std::vector<std::string>& accounts,
                        int settleMs) const {
    return zktest::agentConfig({zkHosts_, root_, gateway_->url()}, id, accounts,
                               {{"zookeeper", {{"session_timeout_ms", 2000}}},
                                {"gateway", {{"request_timeout_ms", 2000}}},
                                {"admin", {{"token", kAdminToken}}},
                                {"balance", {{"settle_ms", settleMs}, {"max_moves_in_flight", 16}}},
                                {"shutdown_timeout_ms", 5000}});
  }

  // Starts the agent (again, when one with that id ran before) and returns once it listens.
  BalanceAgent& start(const nlohmann::json& config) {
    auto agent = std::make_shared<BalanceAgent>(
        dir_, config,
        zktest::AgentStartOptions{.bearerToken = kAdminToken,
                                  .requestTimeout = std::chrono::milliseconds(5000)});
    agent->awaitListening();
    std::lock_guard lock(mu_);
    for (auto& a : agents_) {
      if (a->id == agent->id) {
        a = std::move(agent);
        return *a;
      }
    }
    agents_.push_back(std::move(agent));
    return *agents_.back();
  }

  // Every agent that still runs (shared: a restart replaces one while a sampler reads it).
  std::vector<std::shared_ptr<BalanceAgent>> running() {
    std::lock_guard lock(mu_);
    std::vector<std::shared_ptr<BalanceAgent>> out;
    for (auto& a : agents_) {
      if (a->alive) out.push_back(a);
    }
    return out;
  }

  // Leader count per running agent, each by its own status.
  std::map<std::string, size_t> counts() {
    std::map<std::string, size_t> out;
    for (const auto& a : running()) out[a->id] = a->leading().size();
    return out;
  }

  void kill9(BalanceAgent& agent) {
    agent.alive = false;
    agent.process->kill();
  }

  uint16_t gatewayPort() const { return gateway_->port(); }

 private:
  std::string zkHosts_, root_;
  std::filesystem::path dir_;
  std::unique_ptr<zktest::GatewayProcess> gateway_;
  std::mutex mu_;
  std::vector<std::shared_ptr<BalanceAgent>> agents_;
};

// Samples every running agent's status in turn until stopped. A leadership (agent, account,
// token) seen at two sample times held in between (its token is its member node, gone once it
// stops leading), so two such intervals of different agents overlapping for one account are
// two leaders at once; and per account the tokens must grow in the order leaderships begin.
// A stop flag a worker can pause on: the pause ends early once stop() is called.
class StopSignal {
 public:
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    changed_.notify_all();
  }
  bool stopped() const { return stopped_; }
  // Waits up to `pause`; true when stopped.
  bool waitFor(std::chrono::milliseconds pause) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, pause, [&] { return stopped_.load(); });
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::atomic<bool> stopped_{false};
};

// What a leadership sampler saw of one account: per holder (agent, token), the first and the
// last time it was seen leading.
using LeadershipHolder = std::pair<std::string, int64_t>;  // agent, token
using LeadershipInterval = std::pair<std::chrono::steady_clock::time_point,
                                     std::chrono::steady_clock::time_point>;  // first, last seen
using LeadershipSeen = std::map<std::string, std::map<LeadershipHolder, LeadershipInterval>>;

// Descriptions of every violation in `seen` (empty: none): two holders of one account whose
// intervals overlap (led at once), or a holder that started leading after another one with a
// token that is not higher. Every pair of an account's holders is compared, not only neighbours
// in start order: a long interval can overlap one that starts after a short one between them.
inline std::vector<std::string> leadershipViolations(const LeadershipSeen& seen) {
  std::vector<std::string> out;
  for (const auto& [account, held] : seen) {
    std::vector<std::pair<LeadershipInterval, LeadershipHolder>> byStart;
    for (const auto& [holder, interval] : held) byStart.emplace_back(interval, holder);
    std::sort(byStart.begin(), byStart.end());
    for (size_t i = 0; i < byStart.size(); ++i) {
      for (size_t j = i + 1; j < byStart.size(); ++j) {
        const auto& [before, prev] = byStart[i];
        const auto& [after, next] = byStart[j];
        if (prev.first != next.first && after.first < before.second)
          out.push_back(account + ": " + prev.first + " (token " + std::to_string(prev.second) +
                        ") and " + next.first + " (token " + std::to_string(next.second) +
                        ") led at once");
        if (next.second <= prev.second)
          out.push_back(account + ": token " + std::to_string(next.second) + " after " +
                        std::to_string(prev.second));
      }
    }
  }
  return out;
}

class LeadershipSampler {
 public:
  explicit LeadershipSampler(BalanceCluster& cluster) : cluster_(cluster) {
    thread_ = std::thread([this] {
      do {
        for (const auto& agent : cluster_.running()) {
          const auto now = std::chrono::steady_clock::now();
          for (const auto& [account, token] : agent->leaderTokens()) {
            std::lock_guard lock(mu_);
            auto& held = seen_[account][{agent->id, token}];
            if (held.first == std::chrono::steady_clock::time_point{}) held.first = now;
            held.second = now;
          }
        }
        ++rounds_;
      } while (!stop_.waitFor(std::chrono::milliseconds(10)));  // leave the agents some air
    });
  }
  ~LeadershipSampler() { stop(); }
  void stop() {
    stop_.stop();
    if (thread_.joinable()) thread_.join();
  }
  size_t rounds() const { return rounds_; }

  // Descriptions of every violation seen over the whole run (empty: none).
  std::vector<std::string> violations() {
    std::lock_guard lock(mu_);
    return leadershipViolations(seen_);
  }

 private:
  BalanceCluster& cluster_;
  StopSignal stop_;
  std::atomic<size_t> rounds_{0};
  std::mutex mu_;
  LeadershipSeen seen_;
  std::thread thread_;
};

// Operations to `accounts` from `clients` threads, each sent to the agent the last answer named
// (a 409 names the leader); counted while `count(true)`: answered 200, or not within three
// attempts.
class OperationLoad {
 public:
  OperationLoad(BalanceCluster& cluster, std::vector<std::string> accounts, int clients)
      : cluster_(cluster), accounts_(std::move(accounts)) {
    for (int c = 0; c < clients; ++c) threads_.emplace_back([this, c] { run(c); });
  }
  ~OperationLoad() { stop(); }
  void stop() {
    stop_.stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  void count(bool on) { counting_ = on; }
  long ok() const { return ok_; }
  long failed() const { return failed_; }
  nlohmann::json result() const {
    return {{"ok", ok_.load()},
            {"failed", failed_.load()},
            {"redirects", redirects_.load()},
            {"refused_by_gateway", refused_.load()}};
  }

 private:
  void run(int client) {
    std::map<std::string, std::string> leaderOf;  // account -> instance last named
    for (long i = 0; !stop_.stopped(); ++i) {
      const auto& account = accounts_[static_cast<size_t>(i * 7919 + client) % accounts_.size()];
      std::string at = leaderOf[account];
      bool done = false;
      for (int attempt = 0; attempt < 3 && !done && !stop_.stopped(); ++attempt) {
        auto agent = agentNamed(at);
        if (!agent) break;
        char opId[48];
        std::snprintf(opId, sizeof opId, "c%d-%ld", client, i);
        const auto r = agent->op(account, opId, "x");
        if (r.status == 200) {
          done = true;
          break;
        }
        const auto body = nlohmann::json::parse(r.body, nullptr, false);
        if (r.status == 409 && body.is_object() && body.value("error", "") == "not_leader") {
          if (counting_) ++redirects_;
          const auto& leader = body["leader"];
          at = leader.is_object() ? leader.value("instance", "") : "";
          continue;
        }
        if (r.status == 409 && counting_) ++refused_;
        if (stop_.waitFor(std::chrono::milliseconds(5))) break;  // suspended, busy: again soon
      }
      leaderOf[account] = at;
      if (counting_) ++(done ? ok_ : failed_);
    }
  }
  // The running agent with that id, else the first running one.
  std::shared_ptr<BalanceAgent> agentNamed(const std::string& id) {
    auto agents = cluster_.running();
    for (auto& a : agents) {
      if (a->id == id) return a;
    }
    return agents.empty() ? nullptr : agents.front();
  }

  BalanceCluster& cluster_;
  std::vector<std::string> accounts_;
  std::vector<std::thread> threads_;
  StopSignal stop_;
  std::atomic<bool> counting_{false};
  std::atomic<long> ok_{0}, failed_{0}, redirects_{0}, refused_{0};
};

}  // namespace zkagent_test
