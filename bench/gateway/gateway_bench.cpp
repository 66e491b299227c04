// gateway_bench: accepted operations per second and p50/p99 latency through the real
// fencing-gateway process over HTTP keep-alive, with durable group commit and with one fsync per
// operation (the baseline), at 1 and 64 concurrent clients; prints a table and the ratios.
//
//   gateway_bench [--seconds N] [--data-root DIR]
//
// The data directories go under --data-root (default: the current directory); run it on the
// disk you care about (fsync on tmpfs costs nothing and the ratio means nothing there).
#include <algorithm>
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

struct Result {
  double opsPerSecond = 0;
  double p50Ms = 0;
  double p99Ms = 0;
  size_t failures = 0;
};

Result measure(const std::filesystem::path& dataRoot, const std::string& commitMode, int clients,
               std::chrono::seconds duration) {
  auto dataDir = dataRoot / ("gateway-bench-" + commitMode + "-" + std::to_string(clients));
  std::filesystem::remove_all(dataDir);
  zktest::ChildProcess gateway(zktest::binaryPath("fencing-gateway").string(),
                               {"--listen", "127.0.0.1:0", "--data-dir", dataDir.string(),
                                "--commit-mode", commitMode, "--log-level", "warn"});
  auto line = gateway.waitForLine("LISTENING 127.0.0.1:", 20s);
  const uint16_t port = zkagent::naming::trailingPort(line).value();

  std::vector<std::vector<double>> latencies(clients);
  std::vector<size_t> failures(clients, 0);
  auto end = Clock::now() + duration;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      zkagent::http::Client client(zkagent::http::ClientOptions{.port = port});
      auto account = "acc-" + std::to_string(c % 16);
      for (uint64_t n = 0; Clock::now() < end; ++n) {
        auto body = nlohmann::json{{"account", account},
                                   {"token", 1},
                                   {"instanceId", "bench"},
                                   {"sessionId", 1},
                                   {"opId", std::to_string(c) + "-" + std::to_string(n)},
                                   {"payload", {{"text", "hello"}}}}
                        .dump();
        auto started = Clock::now();
        auto response = client.post("/v1/ops", std::move(body));
        if (response.status != 200) {
          ++failures[c];
          continue;
        }
        latencies[c].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - started).count());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  gateway.kill();
  std::filesystem::remove_all(dataDir);

  std::vector<double> all;
  Result result;
  for (int c = 0; c < clients; ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    result.failures += failures[c];
  }
  std::sort(all.begin(), all.end());
  result.opsPerSecond = static_cast<double>(all.size()) / static_cast<double>(duration.count());
  result.p50Ms = zkbench::quantileOfSorted(all, 0.50);
  result.p99Ms = zkbench::quantileOfSorted(all, 0.99);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::chrono::seconds duration{5};
  std::filesystem::path dataRoot = std::filesystem::current_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--seconds") {
      duration = std::chrono::seconds(std::stoi(argv[i + 1]));
    } else if (flag == "--data-root") {
      dataRoot = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: gateway_bench [--seconds N] [--data-root DIR]\n");
      return 2;
    }
  }
  std::printf("%-14s %8s %12s %9s %9s %9s\n", "commit", "clients", "accepted/s", "p50_ms", "p99_ms",
              "failures");
  for (int clients : {1, 64}) {
    Result group, perOperation;
    for (const char* mode : {"group", "per_operation"}) {
      auto result = measure(dataRoot, mode, clients, duration);
      (std::string(mode) == "group" ? group : perOperation) = result;
      std::printf("%-14s %8d %12.0f %9.3f %9.3f %9zu\n", mode, clients, result.opsPerSecond,
                  result.p50Ms, result.p99Ms, result.failures);
      std::fflush(stdout);
    }
    std::printf("ratio group/per_operation at %d clients: %.2fx throughput\n", clients,
                perOperation.opsPerSecond > 0 ? group.opsPerSecond / perOperation.opsPerSecond : 0);
  }
  return 0;
}
