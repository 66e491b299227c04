// gateway_cluster_bench: accepted operations/s and lease entries/s through a fencing-gateway
// cluster (docs/gateway-cluster.md) of 1, 2 and 3 gateways on one ZooKeeper (fsync on, the JVM's
// defaults), with real leaders (one zk-elect process leading every account), each request sent
// straight to its account's shard owner as the agents send it; and what one 421 round costs (an
// operation sent to a non-owner and followed once). Prints one row per cluster size and each
// figure's ratio to one gateway times the size (1.0 = linear).
//
//   gateway_cluster_bench [--seconds S] [--clients C] [--accounts A] [--devices D]
//                         [--gateways 1,2,3] [--data-root DIR]
//
// Every gateway fsyncs its own log: run it on the disk you care about (--data-root). On one
// machine the gateways, the clients and ZooKeeper share its cores, so the ratio says how far this
// machine lets a cluster scale, not how far separate hosts would.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/http.hpp"
#include "zkagent/naming.hpp"
#include "zkbench/stats.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/znode.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace naming = zkagent::naming;
namespace fs = std::filesystem;

constexpr std::uint32_t kShards = 12;
constexpr const char* kRoot = "/cluster-bench";
constexpr const char* kLeader = "bench-leader";
constexpr int kLeaseBatch = 500;  // entries per lease request (the agent sends up to 2000)

struct Settings {
  std::chrono::seconds duration{5};
  int clients = 32;
  int accounts = 96;
  int devices = 50;  // per account, for the lease phase
  std::vector<int> sizes{1, 2, 3};
  fs::path dataRoot = fs::current_path();
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "gateway_cluster_bench: %s\nusage: gateway_cluster_bench [--seconds S] [--clients "
               "C] [--accounts A] [--devices D] [--gateways 1,2,3] [--data-root DIR]\n",
               error.c_str());
  std::exit(2);
}

int positive(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || n <= 0 || n > 1'000'000) {
    usage(flag + " must be a positive integer, got '" + value + "'");
  }
  return static_cast<int>(n);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value for " + flag);
    const std::string value = argv[i + 1];
    if (flag == "--seconds") {
      s.duration = std::chrono::seconds(positive(flag, value));
    } else if (flag == "--clients") {
      s.clients = positive(flag, value);
    } else if (flag == "--accounts") {
      s.accounts = positive(flag, value);
    } else if (flag == "--devices") {
      s.devices = positive(flag, value);
    } else if (flag == "--data-root") {
      s.dataRoot = value;
    } else if (flag == "--gateways") {
      s.sizes.clear();
      std::stringstream in(value);
      for (std::string item; std::getline(in, item, ',');) {
        const int n = positive(flag, item);
        if (n > 3) usage("--gateways: at most 3 gateways, got " + item);
        s.sizes.push_back(n);
      }
    } else {
      usage("unknown argument '" + flag + "'");
    }
  }
  return s;
}

std::string accountId(int i) {
  char id[16];
  std::snprintf(id, sizeof id, "acc-%04d", i);
  return id;
}

// The leader of one account as its `active` node names it.
struct Holder {
  int64_t token = -1;
  int64_t session = 0;
};

std::map<std::string, Holder> readHolders(const std::string& zk,
                                          const std::vector<std::string>& accounts) {
  std::vector<std::string> paths;
  for (const auto& a : accounts) paths.push_back(naming::activePath(kRoot, a));
  std::map<std::string, Holder> holders;
  const auto nodes = zktest::readZNodes(zk, paths);
  for (size_t i = 0; i < accounts.size(); ++i) {
    if (nodes[i].state != zktest::ZNode::State::found) continue;
    const auto active = json::parse(nodes[i].data);
    if (active.value("instanceId", std::string()) != kLeader) continue;
    holders[accounts[i]] = {active.value("seq", int64_t{-1}),
                            active.value("sessionId", int64_t{0})};
  }
  return holders;
}

// The owner URL each shard's `active` node names ("" for none).
std::vector<std::string> shardOwners(const std::string& zk) {
  std::vector<std::string> paths;
  for (std::uint32_t s = 0; s < kShards; ++s) {
    paths.push_back(naming::activePath(naming::gatewayShardsRoot(kRoot), naming::shardId(s)));
  }
  std::vector<std::string> owners;
  for (const auto& node : zktest::readZNodes(zk, paths)) {
    owners.push_back(node.state == zktest::ZNode::State::found
                         ? json::parse(node.data).value("endpoint", std::string())
                         : std::string());
  }
  return owners;
}

struct Gateway {
  std::uint16_t port = 0;
  std::unique_ptr<zktest::ChildProcess> process;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

struct Figures {
  int gateways = 0;
  double opsPerSecond = 0, p50Ms = 0, p99Ms = 0;
  size_t opFailures = 0;
  double entriesPerSecond = 0;
  size_t leaseFailures = 0;
  // One client, alternating: an operation sent to its owner, and one sent to another gateway
  // whose 421 is followed once to the owner (what an agent pays for a stale map), p50 ms each.
  double directP50Ms = 0, misdirectedP50Ms = 0;
};

// C clients, each with one kept-alive connection per gateway, send `work(client, n)`'s request
// to its owner until the time is up; returns the seconds taken.
template <typename Work>
double drive(const Settings& settings, const std::map<std::string, std::uint16_t>& ports,
             std::vector<std::vector<double>>& latencies, std::vector<size_t>& failures,
             Work work) {
  latencies.assign(settings.clients, {});
  failures.assign(settings.clients, 0);
  const auto started = Clock::now();
  const auto end = started + settings.duration;
  std::vector<std::thread> threads;
  for (int c = 0; c < settings.clients; ++c) {
    threads.emplace_back([&, c] {
      std::map<std::string, std::unique_ptr<zkagent::http::Client>> clients;
      for (const auto& [url, port] : ports) {
        clients[url] = std::make_unique<zkagent::http::Client>(
            zkagent::http::ClientOptions{.port = port, .requestTimeout = 10s});
      }
      for (uint64_t n = 0; Clock::now() < end; ++n) {
        const auto [url, path, body] = work(c, n);
        const auto sent = Clock::now();
        const auto answer = clients.at(url)->post(path, body);
        if (answer.status != 200) {
          ++failures[c];
          continue;
        }
        latencies[c].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return std::chrono::duration<double>(Clock::now() - started).count();
}

Figures measure(const Settings& settings, const std::string& zk, int size,
                const std::vector<std::string>& accounts,
                const std::map<std::string, Holder>& holders) {
  std::vector<Gateway> gateways(size);
  for (int g = 0; g < size; ++g) {
    auto& gateway = gateways[g];
    gateway.port = zktest::freeLoopbackPort();
    const auto id = "gw-" + std::to_string(size) + "-" + std::to_string(g + 1);
    const auto dataDir = settings.dataRoot / ("gateway-cluster-bench-" + id);
    fs::remove_all(dataDir);
    gateway.process = std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(),
        std::vector<std::string>{"--listen",
                                 "127.0.0.1:" + std::to_string(gateway.port),
                                 "--data-dir",
                                 dataDir.string(),
                                 "--zk",
                                 zk,
                                 "--root",
                                 kRoot,
                                 "--zk-session-timeout-ms",
                                 "4000",
                                 "--cluster-shards",
                                 std::to_string(kShards),
                                 "--gateway-id",
                                 id,
                                 "--advertise-url",
                                 gateway.url(),
                                 "--subscribe-listen",
                                 "127.0.0.1:0",
                                 "--log-level",
                                 "warn"});
  }
  std::map<std::string, std::uint16_t> ports;
  for (auto& gateway : gateways) {
    gateway.process->waitForLine("LISTENING 127.0.0.1:", 30s);
    ports[gateway.url()] = gateway.port;
  }
  // Every shard owned by one of these gateways, spread evenly (the balance settles in seconds).
  std::vector<std::string> owners;
  const bool settled = zktest::eventually(
      [&] {
        owners = shardOwners(zk);
        std::map<std::string, int> count;
        for (const auto& owner : owners) {
          if (!ports.contains(owner)) return false;
          ++count[owner];
        }
        const auto [low, high] = std::minmax_element(
            count.begin(), count.end(), [](auto& a, auto& b) { return a.second < b.second; });
        return static_cast<int>(count.size()) == size && high->second - low->second <= 1;
      },
      60s, 100ms);
  if (!settled) throw std::runtime_error("the shards were not spread over the gateways in 60 s");
  std::map<std::string, std::string> ownerOf;  // account -> its owner's URL
  for (const auto& a : accounts) ownerOf[a] = owners[naming::shardOf(a, kShards)];

  auto opBody = [&](const std::string& account, const std::string& opId) {
    const auto& h = holders.at(account);
    return json{{"account", account},     {"token", h.token}, {"instanceId", kLeader},
                {"sessionId", h.session}, {"opId", opId},     {"payload", {{"text", "hello"}}}}
        .dump();
  };
  // An owner that has just taken a shard fences first: wait until each account is accepted.
  for (const auto& a : accounts) {
    zkagent::http::Client client(zkagent::http::ClientOptions{.port = ports.at(ownerOf[a])});
    int n = 0;
    if (!zktest::eventually(
            [&] {
              return client.post("/v1/ops", opBody(a, "warm-" + std::to_string(++n))).status == 200;
            },
            20s, 50ms)) {
      throw std::runtime_error(a + ": no operation accepted by its owner in 20 s");
    }
  }

  Figures f;
  f.gateways = size;
  std::vector<std::vector<double>> latencies;
  std::vector<size_t> failures;
  const std::string tag = std::to_string(size);
  double seconds = drive(settings, ports, latencies, failures, [&](int c, uint64_t n) {
    const auto& account =
        accounts[(static_cast<size_t>(c) + n * settings.clients) % accounts.size()];
    return std::tuple{ownerOf[account], std::string("/v1/ops"),
                      opBody(account, tag + "-" + std::to_string(c) + "-" + std::to_string(n))};
  });
  std::vector<double> merged;
  for (int c = 0; c < settings.clients; ++c) {
    merged.insert(merged.end(), latencies[c].begin(), latencies[c].end());
    f.opFailures += failures[c];
  }
  std::sort(merged.begin(), merged.end());
  f.opsPerSecond = static_cast<double>(merged.size()) / seconds;
  f.p50Ms = zkbench::quantileOfSorted(merged, 0.50);
  f.p99Ms = zkbench::quantileOfSorted(merged, 0.99);

  // The 421 round, with two gateways or more.
  if (size > 1) {
    std::map<std::string, std::unique_ptr<zkagent::http::Client>> clients;
    for (const auto& [url, port] : ports) {
      clients[url] = std::make_unique<zkagent::http::Client>(
          zkagent::http::ClientOptions{.port = port, .requestTimeout = 10s});
    }
    std::vector<double> direct, misdirected;
    for (int n = 0; n < 2000; ++n) {
      const auto& account = accounts[static_cast<size_t>(n) % accounts.size()];
      const auto& owner = ownerOf[account];
      const auto other = std::find_if(ports.begin(), ports.end(),
                                      [&](const auto& entry) { return entry.first != owner; });
      const bool viaOther = n % 2 == 1;
      const auto body = opBody(account, tag + "-421-" + std::to_string(n));
      const auto sent = Clock::now();
      auto answer = clients.at(viaOther ? other->first : owner)->post("/v1/ops", body);
      if (viaOther && answer.status == 421) {
        answer = clients.at(json::parse(answer.body).value("owner", owner))->post("/v1/ops", body);
      }
      if (answer.status != 200) continue;
      (viaOther ? misdirected : direct)
          .push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
    }
    std::sort(direct.begin(), direct.end());
    std::sort(misdirected.begin(), misdirected.end());
    f.directP50Ms = zkbench::quantileOfSorted(direct, 0.50);
    f.misdirectedP50Ms = zkbench::quantileOfSorted(misdirected, 0.50);
  }

  // Leases: every owner's renewals in batches of its own accounts' devices, built before the clock.
  struct Batch {
    std::string owner, body;
    size_t entries = 0;
  };
  std::vector<Batch> batches;
  std::map<std::string, json> pending;  // owner -> entries not in a batch yet
  auto flush = [&](const std::string& owner) {
    auto& entries = pending[owner];
    if (entries.empty()) return;
    // The leader's instance and session are the same for every account (one zk-elect).
    const auto& h = holders.begin()->second;
    batches.push_back(
        {owner, json{{"instanceId", kLeader}, {"sessionId", h.session}, {"renew", entries}}.dump(),
         entries.size()});
    entries = json::array();
  };
  for (const auto& a : accounts) {
    auto& entries = pending.try_emplace(ownerOf[a], json::array()).first->second;
    for (int d = 0; d < settings.devices; ++d) {
      entries.push_back({{"account", a},
                         {"device", "device-" + std::to_string(d)},
                         {"token", holders.at(a).token},
                         {"counter", d}});
      if (static_cast<int>(entries.size()) == kLeaseBatch) flush(ownerOf[a]);
    }
  }
  for (const auto& [owner, port] : ports) flush(owner);
  std::atomic<size_t> next{0};
  std::vector<size_t> entriesBy(settings.clients, 0);
  seconds = drive(settings, ports, latencies, failures, [&](int c, uint64_t) {
    const auto& batch = batches[next.fetch_add(1) % batches.size()];
    entriesBy[c] += batch.entries;  // counted when sent; failures are subtracted below
    return std::tuple{batch.owner, std::string("/v1/presence/leases"), batch.body};
  });
  size_t entries = 0;
  for (int c = 0; c < settings.clients; ++c) {
    entries += entriesBy[c];
    f.leaseFailures += failures[c];
  }
  // A failed request's entries were not accepted: every batch is kLeaseBatch but the last of each
  // owner, so this overstates the loss slightly, never the rate.
  entries -= std::min(entries, f.leaseFailures * static_cast<size_t>(kLeaseBatch));
  f.entriesPerSecond = static_cast<double>(entries) / seconds;

  for (auto& gateway : gateways) gateway.process->signal(SIGTERM);
  for (auto& gateway : gateways) gateway.process->wait(30s);
  for (int g = 0; g < size; ++g) {
    fs::remove_all(settings.dataRoot /
                   ("gateway-cluster-bench-gw-" + tag + "-" + std::to_string(g + 1)));
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings settings = parse(argc, argv);
  zktest::ZooKeeperOptions zkOptions;
  zkOptions.serverDefaults = true;  // fsync on, the JVM's defaults
  zktest::ZooKeeperServer zookeeper(zkOptions);
  const std::string zk = zookeeper.connectString();

  std::vector<std::string> accounts;
  std::string list;
  for (int i = 0; i < settings.accounts; ++i) {
    accounts.push_back(accountId(i));
    list += (i ? "," : "") + accounts.back();
  }
  zktest::ChildProcess leader(zktest::binaryPath("zk-elect").string(),
                              {"--zk", zk, "--root", kRoot, "--instance-id", kLeader, "--accounts",
                               list, "--session-timeout-ms", "10000"});
  std::map<std::string, Holder> holders;
  if (!zktest::eventually(
          [&] {
            holders = readHolders(zk, accounts);
            return holders.size() == accounts.size();
          },
          60s, 200ms)) {
    throw std::runtime_error("zk-elect did not lead every account in 60 s");
  }

  std::vector<Figures> rows;
  for (const int size : settings.sizes) {
    std::fprintf(stderr, "gateway_cluster_bench: %d gateway(s), %d clients, %lld s per phase\n",
                 size, settings.clients, static_cast<long long>(settings.duration.count()));
    rows.push_back(measure(settings, zk, size, accounts, holders));
  }
  const Figures* one = nullptr;
  for (const auto& r : rows) {
    if (r.gateways == 1) one = &r;
  }
  std::printf(
      "%d accounts over %u shards, %d clients, %d devices per account, %lld s per phase; "
      "ZooKeeper fsync on; ratio = figure / (one gateway's x gateways)\n",
      settings.accounts, kShards, settings.clients, settings.devices,
      static_cast<long long>(settings.duration.count()));
  std::printf(
      "| gateways | ops/s | ratio | p50 / p99 ms | failed ops | lease entries/s | ratio | failed "
      "lease requests | one client p50 ms: to the owner / through a 421 |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : rows) {
    char opsRatio[16] = "-", leaseRatio[16] = "-";
    if (one != nullptr && one->opsPerSecond > 0 && one->entriesPerSecond > 0) {
      std::snprintf(opsRatio, sizeof opsRatio, "%.2f",
                    r.opsPerSecond / (one->opsPerSecond * r.gateways));
      std::snprintf(leaseRatio, sizeof leaseRatio, "%.2f",
                    r.entriesPerSecond / (one->entriesPerSecond * r.gateways));
    }
    char round[48] = "-";
    if (r.gateways > 1) {
      std::snprintf(round, sizeof round, "%.2f / %.2f", r.directP50Ms, r.misdirectedP50Ms);
    }
    std::printf("| %d | %.0f | %s | %.2f / %.2f | %zu | %.0f | %s | %zu | %s |\n", r.gateways,
                r.opsPerSecond, opsRatio, r.p50Ms, r.p99Ms, r.opFailures, r.entriesPerSecond,
                leaseRatio, r.leaseFailures, round);
  }
  leader.signal(SIGTERM);
  leader.wait(30s);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gateway_cluster_bench: %s\n", e.what());
  return 1;
}
