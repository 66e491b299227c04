// presence_lease_bench: lease renewals through the real fencing-gateway process over HTTP
// keep-alive, for N connections over M accounts, batched as the agent sends them (up to 2000
// entries per request) and one request per connection (the design the batching replaces).
// Prints requests/s, entries/s, the time one renewal round of every connection takes and the
// request latency.
//
//   presence_lease_bench [--connections N] [--accounts M] [--batch B] [--seconds S]
//
// Bodies are built before the clock starts, so the figures are the gateway's (and the HTTP
// client's) cost, not JSON building; client and gateway share the machine's cores.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/http.hpp"
#include "zkagent/naming.hpp"
#include "zkbench/stats.hpp"
#include "zktest/child_process.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Settings {
  int connections = 50000;
  int accounts = 1000;
  int batch = 2000;
  std::chrono::seconds duration{5};
};

struct Result {
  double requestsPerSecond = 0;
  double entriesPerSecond = 0;
  double roundMs = 0;  // time to renew every connection once
  double p50Ms = 0;
  double p99Ms = 0;
  size_t failures = 0;
};

// The renewal bodies of every connection, `perRequest` entries each.
std::vector<std::string> bodies(const Settings& settings, int perRequest) {
  std::vector<std::string> result;
  nlohmann::json renew = nlohmann::json::array();
  for (int i = 0; i < settings.connections; ++i) {
    renew.push_back({{"account", "acc-" + std::to_string(i % settings.accounts)},
                     {"device", "device-" + std::to_string(i)},
                     {"token", 1},
                     {"counter", i}});
    if (static_cast<int>(renew.size()) == perRequest || i + 1 == settings.connections) {
      result.push_back(
          nlohmann::json{{"instanceId", "bench-agent"}, {"sessionId", 1}, {"renew", renew}}.dump());
      renew = nlohmann::json::array();
    }
  }
  return result;
}

Result measure(const Settings& settings, int perRequest, int clients) {
  auto dataDir = std::filesystem::temp_directory_path() /
                 ("presence-lease-bench-" + std::to_string(perRequest) + "-" +
                  std::to_string(clients) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dataDir);
  zktest::ChildProcess gateway(
      zktest::binaryPath("fencing-gateway").string(),
      {"--listen", "127.0.0.1:0", "--data-dir", dataDir.string(), "--log-level", "warn"});
  auto line = gateway.waitForLine("LISTENING 127.0.0.1:", 20s);
  const uint16_t port = zkagent::naming::trailingPort(line).value();
  const auto all = bodies(settings, perRequest);

  // Clients take the next body of the round in turn; a round ends when every body was sent.
  std::atomic<size_t> next{0};
  std::vector<std::vector<double>> latencies(clients);
  std::vector<size_t> failures(clients, 0);
  std::atomic<size_t> entriesSent{0};
  const auto started = Clock::now();
  const auto end = started + settings.duration;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      zkagent::http::Client client(zkagent::http::ClientOptions{.port = port});
      while (Clock::now() < end) {
        const size_t n = next.fetch_add(1);
        const auto& body = all[n % all.size()];
        auto sent = Clock::now();
        auto response = client.post("/v1/presence/leases", body);
        if (response.status != 200) {
          ++failures[c];
          continue;
        }
        latencies[c].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
        entriesSent += static_cast<size_t>(std::min(
            perRequest, settings.connections - static_cast<int>(n % all.size()) * perRequest));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  gateway.kill();
  std::filesystem::remove_all(dataDir);

  std::vector<double> merged;
  Result result;
  for (int c = 0; c < clients; ++c) {
    merged.insert(merged.end(), latencies[c].begin(), latencies[c].end());
    result.failures += failures[c];
  }
  std::sort(merged.begin(), merged.end());
  result.requestsPerSecond = static_cast<double>(merged.size()) / seconds;
  result.entriesPerSecond = static_cast<double>(entriesSent.load()) / seconds;
  result.roundMs =
      result.entriesPerSecond > 0 ? 1000.0 * settings.connections / result.entriesPerSecond : 0;
  result.p50Ms = zkbench::quantileOfSorted(merged, 0.50);
  result.p99Ms = zkbench::quantileOfSorted(merged, 0.99);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (value <= 0) {
      std::fprintf(stderr, "%s: must be a positive integer\n", flag.c_str());
      return 2;
    }
    if (flag == "--connections") {
      settings.connections = value;
    } else if (flag == "--accounts") {
      settings.accounts = value;
    } else if (flag == "--batch") {
      settings.batch = value;
    } else if (flag == "--seconds") {
      settings.duration = std::chrono::seconds(value);
    } else {
      std::fprintf(stderr,
                   "usage: presence_lease_bench [--connections N] [--accounts M] [--batch B] "
                   "[--seconds S]\n");
      return 2;
    }
  }
  std::printf("%d connections over %d accounts, %lds per row\n", settings.connections,
              settings.accounts, static_cast<long>(settings.duration.count()));
  std::printf("%-22s %7s %9s %11s %11s %10s %8s %8s %8s\n", "mode", "clients", "entries/r",
              "requests/s", "entries/s", "round_ms", "p50_ms", "p99_ms", "failures");
  struct Row {
    const char* mode;
    int perRequest;
    int clients;
  };
  const Row rows[] = {{"batched", settings.batch, 1},
                      {"batched", settings.batch, 4},
                      {"one per connection", 1, 1},
                      {"one per connection", 1, 64}};
  for (const auto& row : rows) {
    auto result = measure(settings, row.perRequest, row.clients);
    std::printf("%-22s %7d %9d %11.0f %11.0f %10.0f %8.3f %8.3f %8zu\n", row.mode, row.clients,
                row.perRequest, result.requestsPerSecond, result.entriesPerSecond, result.roundMs,
                result.p50Ms, result.p99Ms, result.failures);
    std::fflush(stdout);
  }
  return 0;
}
