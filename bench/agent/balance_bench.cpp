// balance_bench: leadership balance on real processes (ZooKeeper, fencing-gateway, zk-agents
// started together), printed as one JSON object:
//
//   time to all led      every account has a leader (the agents' LEADER gauges sum to K);
//   time to balanced     every agent within share +- max(1, 10%) and no move in flight;
//   moves vs minimum     handovers the agents started, against the least that reaches the
//                        targets from the counts the first move started from;
//   operation errors     operations sent all along to the accounts' leaders (following the
//                        agents' 409 leader hints): answered 200 or not within three attempts.
//
// usage: balance_bench [--accounts K] [--agents M] [--settle-ms S] [--moves-in-flight N]
//                      [--clients C] [--op-accounts A] [--limit-s L]
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "balance_cluster.hpp"
#include "zkagent/balance.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using zkagent_test::accountNames;
using zkagent_test::BalanceAgent;

struct Options {
  size_t accounts = 10000;
  size_t agents = 5;
  int settleMs = 3000;
  int movesInFlight = 16;
  int clients = 4;
  size_t opAccounts = 200;
  int limitS = 600;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

json run(const Options& o) {
  zktest::ZooKeeperServer zk;
  zkagent_test::BalanceCluster cluster(
      zk.connectString(), "/balance-bench",
      std::filesystem::temp_directory_path() / ("balance-bench-" + std::to_string(::getpid())));
  const auto accounts = accountNames(o.accounts);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < o.agents; ++i) {
    auto config = cluster.config("agent-" + std::to_string(i), accounts, o.settleMs);
    config["balance"]["max_moves_in_flight"] = o.movesInFlight;
    config["zookeeper"]["session_timeout_ms"] = 10000;
    // Loaded by 10 000 elections on two cores: a late heartbeat or report is not a departure.
    config["health"] = {{"interval_ms", 500}, {"ttl_ms", 5000}};
    config["gateway"]["heartbeat_interval_ms"] = 500;
    config["gateway"]["heartbeat_timeout_ms"] = 3000;
    cluster.start(config);
  }
  const auto agents = cluster.running();
  const std::vector<std::string> opAccounts(
      accounts.begin(), accounts.begin() + static_cast<std::ptrdiff_t>(o.opAccounts));
  zkagent_test::OperationLoad load(cluster, opAccounts, o.clients);

  auto leading = [&] {
    std::map<std::string, size_t> counts;
    for (const auto& a : agents) {
      counts[a->id] = static_cast<size_t>(a->metric("zkagent_accounts", "role=\"LEADER\""));
    }
    return counts;
  };
  auto moves = [&] {
    double sum = 0;
    for (const auto& a : agents) sum += a->metric("zkagent_balance_moves_total", "started");
    return static_cast<long>(sum);
  };
  auto inFlight = [&] {
    double sum = 0;
    for (const auto& a : agents) sum += a->metric("zkagent_balance_moves_in_flight");
    return static_cast<long>(sum);
  };
  const double share = static_cast<double>(o.accounts) / static_cast<double>(o.agents);
  const double band = std::max(1.0, std::floor(0.1 * share));

  std::optional<double> allLed, firstMove, balanced;
  std::map<std::string, size_t> before, after;
  long polls = 0;
  while (!balanced) {
    if (Clock::now() - t0 > std::chrono::seconds(o.limitS))
      throw std::runtime_error("not balanced within " + std::to_string(o.limitS) + " s");
    const auto counts = leading();
    size_t sum = 0;
    bool inBand = true;
    for (const auto& [id, n] : counts) {
      sum += n;
      inBand = inBand && std::fabs(static_cast<double>(n) - share) <= band;
    }
    const long started = moves();
    if (!allLed && sum == o.accounts) allLed = seconds(Clock::now() - t0);
    if (started == 0 && sum == o.accounts) before = counts;
    if (started > 0 && !firstMove) {
      firstMove = seconds(Clock::now() - t0);
      load.count(true);
    }
    if (inBand && sum == o.accounts && inFlight() == 0 && (started > 0 || firstMove)) {
      balanced = seconds(Clock::now() - t0);
      after = counts;
    }
    if (inBand && sum == o.accounts && started == 0 && allLed &&
        seconds(Clock::now() - t0) > *allLed + 3.0 * o.settleMs / 1000.0) {
      balanced = seconds(Clock::now() - t0);  // balanced by the election alone
      after = counts;
    }
    if (++polls % 20 == 0) {
      std::cerr << "t=" << seconds(Clock::now() - t0) << "s leading " << json(counts).dump()
                << " moves " << started;
      for (const auto& a : agents) {
        std::cerr << " " << a->id << ":" << a->metric("zkagent_balance_target") << "/"
                  << a->metric("zkagent_balance_moves_in_flight");
      }
      std::cerr << "\n";
    }
    std::this_thread::sleep_for(100ms);
  }
  load.count(false);
  // Moves after the band was reached, while the agents finish their rows (none should follow).
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * o.settleMs));
  load.stop();
  const long total = moves();
  const auto minimum = zkagent::balance::planBalance(before, 0, 0.1, true).excess;
  return {
      {"accounts", o.accounts},
      {"agents", o.agents},
      {"settle_ms", o.settleMs},
      {"max_moves_in_flight", o.movesInFlight},
      {"all_led_s", allLed ? json(*allLed) : json(nullptr)},
      {"first_move_s", firstMove ? json(*firstMove) : json(nullptr)},
      {"balanced_s", *balanced},
      {"moving_s", firstMove ? json(*balanced - *firstMove) : json(nullptr)},
      {"counts_before", before},
      {"counts_balanced", after},
      {"counts_end", leading()},
      {"moves", total},
      {"minimum_moves", minimum},
      {"moves_over_minimum", minimum ? json(static_cast<double>(total) / minimum) : json(nullptr)},
      {"ops_during_moves", load.result()}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const long value = std::stol(args[i + 1]);
    if (args[i] == "--accounts" && value > 0)
      o.accounts = static_cast<size_t>(value);
    else if (args[i] == "--agents" && value > 0)
      o.agents = static_cast<size_t>(value);
    else if (args[i] == "--settle-ms" && value >= 0)
      o.settleMs = static_cast<int>(value);
    else if (args[i] == "--moves-in-flight" && value > 0)
      o.movesInFlight = static_cast<int>(value);
    else if (args[i] == "--clients" && value >= 0)
      o.clients = static_cast<int>(value);
    else if (args[i] == "--op-accounts" && value > 0)
      o.opAccounts = static_cast<size_t>(value);
    else if (args[i] == "--limit-s" && value > 0)
      o.limitS = static_cast<int>(value);
    else {
      std::cerr << "usage: balance_bench [--accounts K] [--agents M] [--settle-ms S] "
                   "[--moves-in-flight N] [--clients C] [--op-accounts A] [--limit-s L]\n";
      return 2;
    }
  }
  o.opAccounts = std::min(o.opAccounts, o.accounts);
  try {
    std::cout << run(o).dump(2) << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "balance_bench: " << e.what() << "\n";
    return 1;
  }
}
