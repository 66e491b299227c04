// The real fencing-gateway process over HTTP: authentication, limits, metrics, kill -9 during a
// burst of concurrent clients, and the ZooKeeper check against leaders elected by zk-elect.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "temp_dir.hpp"
#include "zkagent/fencing.hpp"
#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"
#include "zktest/raw_connection.hpp"
#include "zktest/small_filesystem.hpp"
#include "zktest/znode.hpp"
#include "zktest/zookeeper_server.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// fencing-gateway on 127.0.0.1:<free port>, killed with its process group at the end.
class GatewayProcess {
 public:
  GatewayProcess(const std::filesystem::path& dataDir, std::vector<std::string> extraArgs = {},
                 std::string token = {}) {
    std::vector<std::string> args = {"ZKAGENT_GATEWAY_TOKEN=" + token,
                                     zktest::binaryPath("fencing-gateway").string(),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--data-dir",
                                     dataDir.string()};
    for (const auto& arg : extraArgs) {  // NAME=value goes to the environment, before the binary
      args.insert(arg.find('=') != std::string::npos && !arg.starts_with("--") ? args.begin() + 1
                                                                               : args.end(),
                  arg);
    }
    process_ = std::make_unique<zktest::ChildProcess>("env", args);
    auto line = process_->waitForLine("LISTENING 127.0.0.1:", 20s);
    port_ = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  }

  http::Client client(std::string token = {}) const {
    return http::Client(http::ClientOptions{.port = port_, .bearerToken = token});
  }
  zktest::ChildProcess& process() { return *process_; }
  uint16_t port() const { return port_; }

 private:
  std::unique_ptr<zktest::ChildProcess> process_;
  uint16_t port_ = 0;
};

std::string op(std::string_view account, uint64_t token, std::string_view opId,
               std::string_view instance = "host", int64_t session = 1) {
  return json{{"account", account},   {"token", token}, {"instanceId", instance},
              {"sessionId", session}, {"opId", opId},   {"payload", {{"n", opId}}}}
      .dump();
}

// The account's active node as ZooKeeper holds it.
json activeNode(const std::string& connect, const std::string& root, const std::string& account) {
  const auto node = zktest::readZNode(connect, root + "/" + account + "/active");
  return node.state == zktest::ZNode::State::found ? json::parse(node.data) : json();
}

// The token printed by zk-elect in "LEADER <account> <token> <unix_ns>".
uint64_t leaderToken(const std::string& line) {
  auto afterAccount = line.find(' ', std::string("LEADER ").size()) + 1;
  return std::stoull(line.substr(afterAccount, line.find(' ', afterAccount) - afterAccount));
}

}  // namespace

TEST(GatewayProcess, BearerTokenFromTheEnvironmentIsRequiredOnEveryRequest) {
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {}, "s3cret");
  auto anonymous = gateway.client();
  EXPECT_EQ(anonymous.post("/v1/ops", op("acc", 1, "op-1")).status, 401);
  EXPECT_EQ(anonymous.get("/healthz").status, 401);
  EXPECT_EQ(gateway.client("wrong").get("/metrics").status, 401);
  auto client = gateway.client("s3cret");
  EXPECT_EQ(client.get("/v1/accounts/acc").status, 404);  // the refused op left no trace
  EXPECT_EQ(client.post("/v1/ops", op("acc", 1, "op-1")).status, 200);
  EXPECT_EQ(client.get("/healthz").status, 200);
}

// Agents' token and operator token from the environment: the agents' token opens agent routes
// only, the operator token operator actions only, and neither appears in the log or /metrics.
TEST(GatewayProcess, TheOperatorTokenFromTheEnvironmentIsTheOnlyKeyToOperatorActions) {
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {"ZKAGENT_GATEWAY_OPERATOR_TOKEN=op-7f3a"}, "agent-91c2");
  auto agent = gateway.client("agent-91c2");
  ASSERT_EQ(agent.post("/v1/ops", op("acc", 4, "op-1")).status, 200);
  const std::string reset = R"({"hwm":0,"reason":"test","actor":"alice"})";
  EXPECT_EQ(agent.post("/v1/accounts/acc/reset-hwm", reset).status, 401);
  auto operatorClient = gateway.client("op-7f3a");
  EXPECT_EQ(operatorClient.post("/v1/ops", op("acc", 5, "op-2")).status, 401);
  EXPECT_EQ(operatorClient.post("/v1/accounts/acc/reset-hwm", reset).status, 200);
  auto metrics = agent.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const auto& secret : {"op-7f3a", "agent-91c2"}) {
    EXPECT_EQ(metrics.body.find(secret), std::string::npos) << secret;
    EXPECT_EQ(gateway.process().stderrText().find(secret), std::string::npos) << secret;
  }
}

// Per connection: beyond --max-requests-per-second a request gets 429 with Retry-After, counted
// in zkagent_gateway_rate_limited_requests_total; other connections are served meanwhile.
TEST(GatewayProcess, AConnectionOverTheRequestRateGets429AndIsCounted) {
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {"--max-requests-per-second", "3"});
  http::Client flooding(http::ClientOptions{.port = gateway.port(), .maxIdleConnections = 1});
  int limited = 0;
  for (int i = 0; i < 20; ++i) limited += flooding.get("/healthz").status == 429;
  EXPECT_GE(limited, 10);
  auto metrics = gateway.client().get("/metrics");  // a connection of its own
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(zktest::metricSample(metrics.body, "zkagent_gateway_rate_limited_requests_total"),
            limited)
      << metrics.body;
}

TEST(GatewayProcess, OversizedBodyGets413AndChangesNothing) {
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path());
  auto client = gateway.client();
  auto huge = op("acc", 1, "op-1");
  huge.insert(huge.size() - 1,
              ",\"pad\":\"" + std::string(fencing::kMaxOperationBytes, 'x') + "\"");
  auto response = client.post("/v1/ops", huge);
  ASSERT_TRUE(response.delivered()) << response.transportError;
  EXPECT_EQ(response.status, 413);
  EXPECT_EQ(client.get("/v1/accounts/acc").status, 404);
  EXPECT_EQ(client.post("/v1/ops", op("acc", 1, "op-2")).status, 200);
}

TEST(GatewayProcess, MetricsEndpointPassesPromtoolAndSigtermExitsCleanly) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool absent";
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path());
  auto client = gateway.client();
  client.post("/v1/ops", op("acc", 5, "op-1"));
  client.post("/v1/ops", op("acc", 4, "op-2"));
  client.post("/v1/ops", "{broken");
  auto metrics = client.get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.contentType, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(
      zktest::metricSample(metrics.body,
                           R"(zkagent_gateway_ops_total{result="stale_token",check="hwm_only"})"),
      1);
  auto file = dir.path() / "metrics.prom";
  std::ofstream(file) << metrics.body;
  EXPECT_EQ(std::system(("promtool check metrics < " + file.string()).c_str()), 0) << metrics.body;
  gateway.process().signal(SIGTERM);
  EXPECT_TRUE(gateway.process().wait(10s).exitedWith(0));
}

TEST(GatewayProcess, KillNineDuringABurstLosesNoAcknowledgedAndKeepsNoRejectedOperation) {
  fencing::testing::TempDir dir;
  auto gateway = std::make_unique<GatewayProcess>(dir.path());

  // 16 keep-alive clients on 4 accounts; client i sends token 1 + i/4, so the accounts' HWMs
  // rise while lower tokens keep arriving: the burst gets both 200s and 409s.
  constexpr int kClients = 16;
  constexpr int kAccounts = 4;
  struct Answer {
    std::string opId;
    std::string account;
    uint64_t token;
    int status;
  };
  std::vector<std::vector<Answer>> answers(kClients);
  std::atomic<int> answered{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      auto client = gateway->client();
      std::string account = "acc-" + std::to_string(i % kAccounts);
      uint64_t token = 1 + i / kAccounts;
      for (int n = 0; !stop; ++n) {
        // (appended, not "c" + ...: GCC 12 warns falsely on prepending to a temporary string)
        std::string opId = "c";
        opId.append(std::to_string(i)).append("-").append(std::to_string(n));
        auto response = client.post("/v1/ops", op(account, token, opId));
        if (!response.delivered()) return;  // the gateway died: the answer is unknown
        answers[i].push_back({opId, account, token, response.status});
        ++answered;
      }
    });
  }
  EXPECT_TRUE(zktest::eventually([&] { return answered >= 400; }, 30s));
  gateway->process().kill();
  stop = true;
  for (auto& client : clients) client.join();

  std::set<std::string> logged;
  for (const auto& entry : fencing::readLoggedOperations(dir.path())) {
    logged.insert(entry.operation.opId);
  }
  std::map<std::string, uint64_t> highestAccepted;
  std::map<std::string, uint64_t> acceptedCount;
  int ok = 0, conflicts = 0;
  for (const auto& perClient : answers) {
    for (const auto& answer : perClient) {
      if (answer.status == 200) {
        ++ok;
        EXPECT_TRUE(logged.contains(answer.opId)) << answer.opId << " was acknowledged but lost";
        highestAccepted[answer.account] = std::max(highestAccepted[answer.account], answer.token);
        ++acceptedCount[answer.account];
      } else {
        ++conflicts;
        EXPECT_EQ(answer.status, 409);
        EXPECT_FALSE(logged.contains(answer.opId)) << answer.opId << " was rejected but logged";
      }
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(conflicts, 0);

  gateway = std::make_unique<GatewayProcess>(dir.path());
  auto client = gateway->client();
  for (const auto& [account, hwm] : highestAccepted) {
    auto status = json::parse(client.get("/v1/accounts/" + account).body);
    EXPECT_GE(status["hwm"].get<uint64_t>(), hwm) << account;
    EXPECT_GE(status["accepted"].get<uint64_t>(), acceptedCount[account]) << account;
  }
  // A client that never saw its answer retries after the restart: first answer, not applied twice.
  const Answer* lastAccepted = nullptr;
  for (const auto& answer : answers[kClients - 1]) {
    if (answer.status == 200) lastAccepted = &answer;
  }
  ASSERT_NE(lastAccepted, nullptr);
  auto before = fencing::readLoggedOperations(dir.path()).size();
  auto retry =
      client.post("/v1/ops", op(lastAccepted->account, lastAccepted->token, lastAccepted->opId));
  EXPECT_EQ(retry.status, 200);
  EXPECT_EQ(json::parse(retry.body)["replayed"], true);
  EXPECT_EQ(fencing::readLoggedOperations(dir.path()).size(), before);
}

TEST(GatewayProcess, PausedOldLeaderAndForgedTokenAreRejectedOnceTheSuccessorHoldsActive) {
  auto& zookeeper = zktest::sharedZooKeeper();
  auto root = zktest::uniqueTestRoot();
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {"--zk", zookeeper.connectString(), "--root", root});
  auto client = gateway.client();
  auto elect = [&](const std::string& instance) {
    return std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-elect").string(),
        std::vector<std::string>{"--zk", zookeeper.connectString(), "--root", root, "--instance-id",
                                 instance, "--accounts", "acc", "--session-timeout-ms", "1000"});
  };
  auto oldLeader = elect("host-a");
  uint64_t oldToken = leaderToken(oldLeader->waitForLine("LEADER acc ", 20s));
  const auto oldHolder = activeNode(zookeeper.connectString(), root, "acc");
  const auto oldSession = oldHolder.value("sessionId", int64_t{0});
  auto successor = elect("host-b");
  successor->waitForLine("READY", 20s);
  // The token alone is not enough: the operation must come from the holder's instance and session.
  auto stranger = client.post("/v1/ops", op("acc", oldToken, "x-1", "host-b", oldSession));
  EXPECT_EQ(stranger.status, 409) << stranger.body;
  EXPECT_EQ(json::parse(stranger.body)["reason"], "not_current_leader");
  EXPECT_EQ(client.post("/v1/ops", op("acc", oldToken, "x-2", "host-a", oldSession + 1)).status,
            409);
  ASSERT_EQ(client.post("/v1/ops", op("acc", oldToken, "a-1", "host-a", oldSession)).status, 200);

  oldLeader->signal(SIGSTOP);  // paused past its session timeout: ZooKeeper expires it
  uint64_t newToken = leaderToken(successor->waitForLine("LEADER acc ", 30s));
  ASSERT_GT(newToken, oldToken);
  EXPECT_TRUE(zktest::eventually(
      [&] {
        auto status = json::parse(client.get("/v1/accounts/acc").body);
        return status.value("activeSeq", json()) == json(newToken);
      },
      10s))
      << "the gateway's cache never saw the successor's active node";

  // The successor has sent nothing yet, so the HWM alone would still let the old leader in.
  auto paused = client.post("/v1/ops", op("acc", oldToken, "a-2", "host-a", oldSession));
  EXPECT_EQ(paused.status, 409);
  EXPECT_EQ(json::parse(paused.body)["reason"], "not_current_leader");
  auto forged = client.post("/v1/ops", op("acc", newToken + 100, "forged-1"));
  EXPECT_EQ(forged.status, 409);
  EXPECT_EQ(json::parse(forged.body)["reason"], "not_current_leader");
  EXPECT_EQ(json::parse(client.get("/v1/accounts/acc").body)["hwm"], oldToken);
  const auto newHolder = activeNode(zookeeper.connectString(), root, "acc");
  EXPECT_EQ(client
                .post("/v1/ops", op("acc", newToken, "b-1", "host-b",
                                    newHolder.value("sessionId", int64_t{0})))
                .status,
            200);
  oldLeader->signal(SIGCONT);
}

// The gateway itself paused (SIGSTOP, a stalled VM) while leadership moves: the old leader's
// operation waits in the gateway's socket, and on SIGCONT the gateway must decide it on ZooKeeper
// as it is then, not on its cache from before the pause (the deletion and the successor's
// `active` arrive as watch events that may still be queued when the request is read).
TEST(GatewayProcess, APausedGatewayDecidesWaitingRequestsOnZooKeeperAsItIsWhenItResumes) {
  auto& zookeeper = zktest::sharedZooKeeper();
  auto root = zktest::uniqueTestRoot();
  fencing::testing::TempDir dir;
  GatewayProcess gateway(
      dir.path(), {"--zk", zookeeper.connectString(), "--root", root, "--zk-untrusted", "refuse"});
  auto client = gateway.client();
  auto elect = [&](const std::string& instance) {
    return std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-elect").string(),
        std::vector<std::string>{"--zk", zookeeper.connectString(), "--root", root, "--instance-id",
                                 instance, "--accounts", "acc"});
  };
  auto oldLeader = elect("host-a");
  const uint64_t oldToken = leaderToken(oldLeader->waitForLine("LEADER acc ", 20s));
  const auto oldSession =
      activeNode(zookeeper.connectString(), root, "acc").value("sessionId", int64_t{0});
  auto successor = elect("host-b");
  successor->waitForLine("READY", 20s);
  ASSERT_EQ(client.post("/v1/ops", op("acc", oldToken, "a-1", "host-a", oldSession)).status, 200);

  gateway.process().signal(SIGSTOP);
  oldLeader->signal(SIGTERM);  // hands over at once: the successor holds `active` within ms
  const uint64_t newToken = leaderToken(successor->waitForLine("LEADER acc ", 20s));
  ASSERT_GT(newToken, oldToken);
  // Sent while the gateway is stopped: the connect and the request complete in its kernel.
  const std::string body = op("acc", oldToken, "a-2", "host-a", oldSession);
  zktest::RawConnection late(gateway.port());
  ASSERT_TRUE(late.connected());
  ASSERT_TRUE(
      late.send("POST /v1/ops HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                "application/json\r\nConnection: close\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body));
  // The fault is a stall longer than the gateway's freshness bound (50 ms, the most its view of
  // ZooKeeper may lag a decision; a shorter stall is within it, like a watch event in flight).
  std::this_thread::sleep_for(300ms);
  gateway.process().signal(SIGCONT);

  const auto answer = late.readAll(10s);
  EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 409") << answer;
  EXPECT_NE(answer.find("not_current_leader"), std::string::npos) << answer;
  EXPECT_EQ(json::parse(client.get("/v1/accounts/acc").body)["hwm"], oldToken);
}

// ZooKeeper's own `active` node falls below the HWM (its data restored from an old backup): the
// gateway fences the account, and only after it has read the node again after a sync (the cache
// alone may lag behind ZooKeeper's leader, and a fence holds until an operator lifts it).
TEST(GatewayProcess, AnActiveSeqBelowTheHwmInZooKeeperFencesTheAccountOnAReadAfterASync) {
  auto& zookeeper = zktest::sharedZooKeeper();
  auto root = zktest::uniqueTestRoot();
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {"--zk", zookeeper.connectString(), "--root", root});
  auto client = gateway.client();
  const auto holder = [](uint64_t seq) {
    return json{{"seq", seq}, {"instanceId", "host"}, {"sessionId", 1}}.dump();
  };
  const std::string active = root + "/acc/active";
  ASSERT_TRUE(zktest::writeZNode(zookeeper.connectString(), active, holder(40)));
  ASSERT_EQ(client.post("/v1/ops", op("acc", 40, "a-1")).status, 200);

  ASSERT_TRUE(zktest::writeZNode(zookeeper.connectString(), active, holder(2)));
  ASSERT_TRUE(zktest::eventually(
      [&] {
        return json::parse(client.get("/v1/accounts/acc").body).value("activeSeq", json()) ==
               json(2);
      },
      10s))
      << "the gateway's cache never saw the new active node";
  auto fenced = client.post("/v1/ops", op("acc", 2, "a-2"));
  EXPECT_EQ(fenced.status, 409) << fenced.body;
  EXPECT_EQ(json::parse(fenced.body)["reason"], "account_fenced");
  const auto metrics = client.get("/metrics").body;
  EXPECT_EQ(zktest::metricSample(metrics,
                                 R"(zkagent_gateway_view_reconfirmations_total{result="fenced"})"),
            1);
  EXPECT_EQ(zktest::metricSample(metrics, "zkagent_gateway_fenced_accounts"), 1);
  EXPECT_EQ(client.post("/v1/ops", op("acc", 40, "a-3")).status, 409) << "fenced until reset";
}

// The gateway's disk fills up: what it acknowledged stays in its log, it refuses (503) while it
// cannot persist, and once space returns it recovers in place, with no restart, and nothing it
// refused is in its log.
TEST(GatewayProcess, AFullDiskRefusesWritesAndTheGatewayRecoversInPlaceWhenSpaceReturns) {
  fencing::testing::TempDir dir;
  std::optional<zktest::SmallFilesystem> disk;
  try {
    disk.emplace(dir.path() / "disk", 1 << 20);
  } catch (const std::runtime_error& error) {
    GTEST_SKIP() << error.what();
  }
  const auto dataDir = dir.path() / "disk" / "data";
  GatewayProcess gateway(dataDir);
  auto client = gateway.client();
  std::set<std::string> acknowledged, refused;
  auto post = [&](uint64_t token, const std::string& opId) {
    auto answer = client.post("/v1/ops", op("acc", token, opId));
    (answer.status == 200 ? acknowledged : refused).insert(opId);
    return answer;
  };
  ASSERT_EQ(post(5, "a-1").status, 200);

  disk->fill();
  // Appends go on while the log's last page has room: the first one that needs a page fails.
  auto full = post(5, "a-2");
  for (int i = 3; i < 100 && full.status != 503; ++i) full = post(5, "a-" + std::to_string(i));
  ASSERT_EQ(full.status, 503) << full.body;
  EXPECT_NE(full.body.find("durable log failed"), std::string::npos) << full.body;
  EXPECT_EQ(post(6, "c-1").status, 503) << "refused while it cannot persist";
  EXPECT_EQ(client.get("/healthz").status, 503);
  EXPECT_GE(
      zktest::metricSample(client.get("/metrics").body, "zkagent_gateway_storage_errors_total"), 1);
  EXPECT_EQ(zktest::metricSample(client.get("/metrics").body, "zkagent_gateway_storage_failed"), 1);

  disk->free();
  int attempt = 0;
  EXPECT_TRUE(zktest::eventually(
      [&] { return post(6, "b-" + std::to_string(++attempt)).status == 200; }, 10s))
      << "the gateway did not take operations again once space returned";
  EXPECT_EQ(client.get("/healthz").status, 200);
  EXPECT_GE(
      zktest::metricSample(client.get("/metrics").body, "zkagent_gateway_storage_recoveries_total"),
      1);
  EXPECT_EQ(zktest::metricSample(client.get("/metrics").body, "zkagent_gateway_storage_failed"), 0);
  EXPECT_EQ(json::parse(client.get("/v1/accounts/acc").body)["hwm"], 6);

  gateway.process().signal(SIGTERM);
  ASSERT_TRUE(gateway.process().wait(10s).exitedWith(0));
  std::set<std::string> logged;
  for (const auto& entry : fencing::readLoggedOperations(dataDir))
    logged.insert(entry.operation.opId);
  EXPECT_EQ(logged, acknowledged) << refused.size() << " refused";
}

TEST(GatewayProcess, PresenceLeaseBatchOfTwoThousandEntriesIsHeldThenExpires) {
  fencing::testing::TempDir dir;
  GatewayProcess gateway(dir.path(), {"--lease-ttl-ms", "600", "--lease-sweep-ms", "50"});
  auto client = gateway.client();
  json renew = json::array();
  for (int i = 0; i < 2000; ++i) {
    renew.push_back({{"account", "acc-" + std::to_string(i % 10)},
                     {"device", "device-" + std::to_string(i)},
                     {"token", 4},
                     {"counter", i}});
  }
  auto body = json{{"instanceId", "host-a"}, {"sessionId", 1}, {"renew", renew}}.dump();
  ASSERT_GT(body.size(), fencing::kMaxOperationBytes) << "the batch must exceed an op's limit";
  auto answer = client.post("/v1/presence/leases", body);
  ASSERT_EQ(answer.status, 200) << answer.body << answer.transportError;
  EXPECT_EQ(json::parse(answer.body)["renewed"], 2000);
  auto shown = json::parse(client.get("/v1/presence/acc-3").body);
  EXPECT_EQ(shown["online"], true);
  ASSERT_EQ(shown["devices"].size(), 200u);
  EXPECT_EQ(shown["devices"][0]["agent"], "host-a");
  EXPECT_EQ(shown["devices"][0]["epoch"]["token"], 4);
  EXPECT_EQ(zktest::metricSample(client.get("/metrics").body, "zkagent_gateway_presence_leases"),
            2000);
  EXPECT_TRUE(zktest::eventually(
      [&] { return json::parse(client.get("/v1/presence/acc-3").body)["devices"].empty(); }, 10s))
      << "the leases never expired";
  EXPECT_EQ(zktest::metricSample(client.get("/metrics").body,
                                 "zkagent_gateway_presence_lease_expirations_total"),
            2000);
  // Over the 1 MiB body limit: refused by the server before any parsing.
  auto huge = client.post("/v1/presence/leases", std::string(1024 * 1024 + 1, ' '));
  ASSERT_TRUE(huge.delivered()) << huge.transportError;
  EXPECT_EQ(huge.status, 413);
  // The store's sweep timers do not keep a stopping gateway alive.
  gateway.process().signal(SIGTERM);
  EXPECT_TRUE(gateway.process().wait(10s).exitedWith(0));
}

// A gateway serving two accounts: a batch that also names a third gets that entry refused and the
// others applied.
TEST(GatewayProcess, ALeaseBatchNamingAnAccountNotServedAppliesTheOtherEntries) {
  fencing::testing::TempDir dir;
  const auto config = dir.path() / "gateway.json";
  std::ofstream(config) << R"({"accounts":["acc-1","acc-2"]})";
  GatewayProcess gateway(dir.path() / "data", {"--config", config.string()});
  auto client = gateway.client();
  json renew = json::array();
  for (const char* account : {"acc-1", "acc-9", "acc-2"}) {
    renew.push_back({{"account", account}, {"device", "phone"}, {"token", 4}, {"counter", 1}});
  }
  auto answer =
      client.post("/v1/presence/leases",
                  json{{"instanceId", "host-a"}, {"sessionId", 1}, {"renew", renew}}.dump());
  ASSERT_EQ(answer.status, 200) << answer.body << answer.transportError;
  const auto counts = json::parse(answer.body);
  EXPECT_EQ(counts["renewed"], 2) << answer.body;
  EXPECT_EQ(
      counts["refused"],
      (json{
          {{"index", 1}, {"list", "renew"}, {"account", "acc-9"}, {"reason", "unknown_account"}}}))
      << answer.body;
  EXPECT_EQ(json::parse(client.get("/v1/presence/acc-2").body)["online"], true);
}
