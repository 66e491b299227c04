// zk-agent as operators run it: real ZooKeeper, a real fencing-gateway process, real zk-agent
// processes, real faults (kill -9, SIGSTOP/SIGCONT, a blackholing proxy to the gateway).
#include "zktest/agent_process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_fixtures.hpp"
#include "zkagent/agent.hpp"
#include "zkagent/fencing.hpp"
#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zkagent_test::accountNames;
using zktest::ChildProcess;
using zktest::eventually;

constexpr int kSessionTimeoutMs = 1500;
constexpr std::string_view kAdminToken = "process-test-admin-token";

using zktest::AgentProcess;

class AgentProcessTest : public zktest::AgentProcessFixture {
 protected:
  AgentProcessTest() : AgentProcessFixture("zk-agent-test") {}

  json agentConfig(const std::string& id, const std::vector<std::string>& accounts,
                   uint16_t gatewayPort) {
    return zktest::agentConfig(
        {zk_->connectString(), root_, "http://127.0.0.1:" + std::to_string(gatewayPort)}, id,
        accounts, {{"zookeeper", {{"session_timeout_ms", kSessionTimeoutMs}}}});
  }

  std::filesystem::path writeConfig(const std::string& name, const json& config) {
    return zktest::writeAgentConfig(dir_, name, config);
  }

  // The agent takes its admin token from ZKAGENT_ADMIN_TOKEN, as zk-agentctl does ("": unset).
  AgentProcess& startAgent(const json& config) {
    return startAgentWithAdminToken(config, std::string(kAdminToken));
  }
  AgentProcess& startAgentWithAdminToken(const json& config, const std::string& adminToken) {
    return addAgent(config, {.environmentToken = adminToken, .bearerToken = adminToken});
  }

  AgentProcess& startAgent(const std::string& id, const std::vector<std::string>& accounts) {
    return startAgent(agentConfig(id, accounts, gateway_->port()));
  }

  // Every account is led by exactly one of `agents` (each judged by its own status).
  static bool allLedBy(const std::vector<AgentProcess*>& agents,
                       const std::vector<std::string>& accounts) {
    std::map<std::string, int> leaders;
    for (auto* a : agents) {
      for (const auto& account : a->leading()) ++leaders[account];
    }
    for (const auto& account : accounts) {
      if (leaders[account] != 1) return false;
    }
    return true;
  }

  static bool schedulableAsSeenBy(const AgentProcess& reader, const std::string& peer) {
    for (const auto& p : reader.status().value("peers", json::array())) {
      if (p["instance"] == peer) return p["schedulable"].get<bool>();
    }
    return false;
  }
};

TEST_F(AgentProcessTest, KillNineOfALeaderHasEveryAccountLedAgainWithinTheSessionTimeout) {
  const auto accounts = accountNames(50);
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s))
      << a.status().dump();
  auto& b = startAgent("host-b", accounts);
  auto& c = startAgent("host-c", accounts);
  ASSERT_TRUE(eventually(
      [&] { return schedulableAsSeenBy(a, "host-b") && schedulableAsSeenBy(a, "host-c"); }, 10s));

  a.process->kill();
  // Detection is the session timeout; the margin covers the election and a loaded machine.
  ASSERT_TRUE(eventually(
      [&] {
        return allLedBy({&b, &c}, accounts);
      },
      milliseconds(kSessionTimeoutMs + 6000)))
      << b.status().dump() << c.status().dump();
  EXPECT_EQ(b.op("acct-0", "after-kill").status + c.op("acct-0", "after-kill-c").status, 200 + 409)
      << "exactly one of the survivors leads acct-0 and the gateway accepts its operation";
}

TEST_F(AgentProcessTest, SigtermHandsEveryAccountOverWithoutWaitingForTheSessionToExpire) {
  const auto accounts = accountNames(50);
  auto config = [&](const std::string& id) {
    auto c = agentConfig(id, accounts, gateway_->port());
    c["zookeeper"]["session_timeout_ms"] =
        20000;  // a handover that waited for expiry would time out below
    return c;
  };
  auto& a = startAgent(config("host-a"));
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));
  auto& b = startAgent(config("host-b"));
  auto& c = startAgent(config("host-c"));
  ASSERT_TRUE(eventually(
      [&] { return schedulableAsSeenBy(a, "host-b") && schedulableAsSeenBy(a, "host-c"); }, 10s));

  a.process->signal(SIGTERM);
  EXPECT_TRUE(a.process->wait(5s).exitedWith(0)) << a.process->transcript();
  EXPECT_NE(a.process->stderrText().find("stopped instance=host-a"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return allLedBy({&b, &c}, accounts); }, 5s)) << b.status().dump();
}

TEST_F(AgentProcessTest, PausedLeaderResumedAfterExpiryHasNoOperationAccepted) {
  const std::vector<std::string> accounts{"acct-0", "acct-1", "acct-2"};
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));
  ASSERT_EQ(a.op("acct-0", "before-pause").status, 200);
  auto bConfig = agentConfig("host-b", accounts, gateway_->port());
  bConfig["lock_delay_ms"] = 300;
  auto& b = startAgent(bConfig);
  ASSERT_TRUE(eventually([&] { return schedulableAsSeenBy(a, "host-b"); }, 10s));

  a.process->signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return b.leading().size() == accounts.size(); }, 10s))
      << b.status().dump();
  a.process->signal(SIGCONT);

  // Whatever the resumed agent sends now, with its old tokens, the gateway must refuse.
  int answered = 0;
  zktest::Deadline deadline(2000ms);
  for (int i = 0; !deadline.passed(); ++i) {
    for (const auto& account : accounts) {
      auto r = a.op(account, "resumed-" + std::to_string(i) + "-" + account);
      if (!r.delivered()) continue;
      ++answered;
      EXPECT_NE(r.status, 200) << "an operation of the paused leader was accepted: " << r.body;
    }
  }
  EXPECT_GT(answered, 0) << "the resumed agent answered nothing";
  // The successor took over from an expired session: lock-delay applied, then its ops pass.
  EXPECT_NE(b.process->stderrText().find("lock delay account="), std::string::npos);
  // Each takeover from the lost session is one failover observation.
  EXPECT_EQ(zktest::metricSample(b.metrics(), "zkagent_failover_duration_seconds_count"), 3);
}

TEST_F(AgentProcessTest, SuccessorOfAnExpiredLeaderHasItsOperationsAccepted) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leading().size() == 1; }, 15s));
  ASSERT_EQ(a.op("acct-0", "first-leader").status, 200)
      << "the gateway now watches acct-0's active node";
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return schedulableAsSeenBy(a, "host-b"); }, 10s));

  a.process->signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return b.leading().size() == 1; }, 10s)) << b.status().dump();
  int attempt = 0;
  zkagent::http::ClientResponse last;
  EXPECT_TRUE(eventually(
      [&] {
        last = b.op("acct-0", "successor-" + std::to_string(attempt++));
        return last.status == 200;
      },
      3s, 100ms))
      << "the gateway must follow active from the expired leader to the successor: " << last.body;
  a.process->kill();
}

TEST_F(AgentProcessTest, DrainWithoutSuccessorBlocksWithReasonsThenHandsOverWhenOneAppears) {
  const std::vector<std::string> accounts{"acct-0", "acct-1", "acct-2"};
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));

  ChildProcess ctl("env", {"ZKAGENT_ADMIN_TOKEN=" + std::string(kAdminToken),
                           zktest::binaryPath("zk-agentctl").string(), "--admin",
                           "127.0.0.1:" + std::to_string(a.adminPort), "drain"});
  ASSERT_TRUE(ctl.wait(10s).exitedWith(0)) << ctl.transcript();

  // Fail closed: nobody to hand over to, so it keeps leading and says why.
  ASSERT_TRUE(eventually(
      [&] {
        const auto acct = a.account("acct-1");
        return acct.is_object() && acct["blocked_reasons"] == json::array({"no_successor"});
      },
      5s))
      << a.status().dump();
  EXPECT_EQ(a.status()["lifecycle"], "leaving");
  EXPECT_EQ(a.leading().size(), accounts.size());
  EXPECT_EQ(a.op("acct-1", "while-draining").status, 200) << "a blocked drain keeps serving";

  auto& b = startAgent("host-b", accounts);
  ASSERT_TRUE(eventually([&] { return b.leading().size() == accounts.size(); }, 10s))
      << a.status().dump();
  ASSERT_TRUE(eventually([&] { return a.status()["lifecycle"] == "drained"; }, 5s))
      << a.status().dump();
  EXPECT_TRUE(a.leading().empty());
}

// Drain and resign are operator actions: an agent without an admin token refuses them with 403
// naming the setting (and acts on neither); admin.open_operator_actions is the explicit opt-out.
TEST_F(AgentProcessTest, WithoutAnAdminTokenDrainAndResignAreRefusedUnlessOpened) {
  auto& a = startAgentWithAdminToken(agentConfig("host-a", {"acct-0"}, gateway_->port()), "");
  ASSERT_TRUE(eventually([&] { return a.leading().size() == 1; }, 15s));
  auto drain = a.admin->post("/v1/drain", "");
  EXPECT_EQ(drain.status, 403) << drain.body;
  EXPECT_NE(drain.body.find("set admin.token, admin.token_file or ZKAGENT_ADMIN_TOKEN"),
            std::string::npos)
      << drain.body;
  EXPECT_EQ(a.admin->post("/v1/accounts/acct-0/resign", "").status, 403);
  EXPECT_EQ(a.status()["lifecycle"], "active");
  EXPECT_EQ(a.leading().size(), 1u);
  EXPECT_NE(a.process->stderrText().find("no admin token: drain and resign are refused"),
            std::string::npos);

  auto opened = agentConfig("host-b", {"acct-1"}, gateway_->port());
  opened["admin"]["open_operator_actions"] = true;
  auto& b = startAgentWithAdminToken(opened, "");
  ASSERT_TRUE(eventually([&] { return b.leading().size() == 1; }, 15s));
  EXPECT_EQ(b.admin->post("/v1/accounts/acct-1/resign", "").status, 202);
}

TEST_F(AgentProcessTest, AnAdminTokenInTheEnvironmentAndTheConfigIsAStartError) {
  auto config = agentConfig("host-a", {"acct-0"}, gateway_->port());
  config["admin"]["token"] = "from-the-file";
  ChildProcess agent(
      "env", {"ZKAGENT_ADMIN_TOKEN=from-the-environment", zktest::binaryPath("zk-agent").string(),
              "--config", writeConfig("host-a", config).string()});
  EXPECT_EQ(agent.wait(10s).code, 2) << agent.transcript();
  EXPECT_NE(agent.stderrText().find("admin.token: set it, token_file or ZKAGENT_ADMIN_TOKEN"),
            std::string::npos)
      << agent.transcript();
  EXPECT_EQ(agent.stderrText().find("from-the-"), std::string::npos) << "no token in the error";
}

// A plain (no presence.tls) device endpoint off loopback: the agent starts only with
// presence.insecure, and says so at start.
TEST_F(AgentProcessTest, APlainDeviceEndpointOffLoopbackNeedsPresenceInsecureAndIsLogged) {
  auto config = agentConfig("host-a", {"acct-0"}, gateway_->port());
  config["presence"]["listen"] = "0.0.0.0:0";
  ChildProcess refused(zktest::binaryPath("zk-agent").string(),
                       {"--config", writeConfig("host-a", config).string()});
  EXPECT_EQ(refused.wait(10s).code, 2) << refused.transcript();
  EXPECT_NE(
      refused.stderrText().find("presence.listen: '0.0.0.0:0': plain ws:// is served on loopback "
                                "only; set presence.tls"),
      std::string::npos)
      << refused.transcript();
  config["presence"]["insecure"] = true;
  // Plain ws:// allowed, but off loopback device tokens are required too (or the explicit flag).
  ChildProcess noTokens(zktest::binaryPath("zk-agent").string(),
                        {"--config", writeConfig("host-a", config).string()});
  EXPECT_EQ(noTokens.wait(10s).code, 2) << noTokens.transcript();
  EXPECT_NE(noTokens.stderrText().find("presence.auth: is required when presence.listen"),
            std::string::npos)
      << noTokens.transcript();
  config["presence"]["insecure_no_device_auth"] = true;
  ChildProcess check(zktest::binaryPath("zk-agent").string(),
                     {"--config", writeConfig("host-a", config).string(), "--check-config"});
  EXPECT_EQ(check.wait(10s).code, 0) << check.transcript();
  EXPECT_NE(check.stderrText().find("warning: presence.insecure_no_device_auth"), std::string::npos)
      << check.transcript();
  auto& a = startAgent(config);
  EXPECT_TRUE(eventually(
      [&] {
        const auto text = a.process->stderrText();
        return text.find("presence.insecure: devices connect over plain ws://") !=
                   std::string::npos &&
               text.find("presence.insecure_no_device_auth: devices connect without a token") !=
                   std::string::npos;
      },
      5s))
      << a.process->transcript();
}

TEST_F(AgentProcessTest, DrainFailsClosedWhileTheSuccessorsHealthIsStale) {
  const std::vector<std::string> accounts{"acct-0", "acct-1"};
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));
  auto bConfig = agentConfig("host-b", accounts, gateway_->port());
  bConfig["zookeeper"]["session_timeout_ms"] = 8000;  // its member nodes outlive its stale report
  auto& b = startAgent(bConfig);
  ASSERT_TRUE(eventually(
      [&] { return schedulableAsSeenBy(a, "host-b") && b.account("acct-0")["standing"] == true; },
      10s));

  b.process->signal(SIGSTOP);  // its report stops changing: stale on A's clock after the TTL
  ASSERT_TRUE(eventually([&] { return !schedulableAsSeenBy(a, "host-b"); }, 5s));
  EXPECT_EQ(a.admin->post("/v1/drain", "").status, 202);
  ASSERT_TRUE(eventually(
      [&] {
        const auto acct = a.account("acct-0");
        return acct["blocked_by_health"] == true &&
               acct["blocked_reasons"] ==
                   json::array({"successor_unschedulable", "successor_health_stale"});
      },
      5s))
      << a.status().dump();
  EXPECT_GT(a.account("acct-0")["health_report_age_ms"].get<int64_t>(), 1000);
  EXPECT_EQ(a.leading().size(), accounts.size()) << "no handover to an agent with stale health";

  b.process->signal(SIGCONT);
  ASSERT_TRUE(eventually([&] { return a.status()["lifecycle"] == "drained"; }, 10s))
      << a.status().dump();
  EXPECT_TRUE(eventually([&] { return b.leading().size() == accounts.size(); }, 5s));
}

TEST_F(AgentProcessTest, DrainHandsEveryAccountToTheSchedulableSuccessor) {
  const auto accounts = accountNames(10);
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));
  auto& b = startAgent("host-b", accounts);
  ASSERT_TRUE(eventually([&] { return schedulableAsSeenBy(a, "host-b"); }, 10s));

  EXPECT_EQ(a.admin->post("/v1/drain", "").status, 202);
  ASSERT_TRUE(eventually([&] { return a.status()["lifecycle"] == "drained"; }, 10s))
      << a.status().dump();
  EXPECT_TRUE(a.leading().empty());
  EXPECT_TRUE(eventually([&] { return b.leading().size() == accounts.size(); }, 5s));
  const auto refused = a.op("acct-0", "drained-op");
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(json::parse(refused.body)["leader"]["instance"], "host-b") << refused.body;
  EXPECT_EQ(a.admin->get("/readyz").status, 503);
}

TEST_F(AgentProcessTest, LeaderThatLosesTheGatewayHandsOverOnlyToAReadyAgent) {
  const std::vector<std::string> accounts{"acct-0", "acct-1", "acct-2", "acct-3"};
  zktest::TcpProxy proxy(gateway_->port());
  auto& a = startAgent(agentConfig("host-a", accounts, proxy.port()));
  ASSERT_TRUE(eventually([&] { return a.leading().size() == accounts.size(); }, 15s));

  // No ready successor: a leader that lost its gateway keeps leading and says why.
  proxy.setMode(zktest::TcpProxy::Mode::blackhole);
  ASSERT_TRUE(eventually([&] { return a.admin->get("/readyz").status == 503; }, 5s));
  ASSERT_TRUE(eventually(
      [&] { return a.account("acct-0")["blocked_reasons"] == json::array({"no_successor"}); }, 5s))
      << a.status().dump();
  EXPECT_EQ(a.leading().size(), accounts.size());

  auto& b = startAgent("host-b", accounts);
  ASSERT_TRUE(eventually([&] { return b.leading().size() == accounts.size(); }, 10s))
      << a.status().dump();
  EXPECT_TRUE(a.leading().empty());
  const auto health = a.status()["health"];
  EXPECT_NE(health["blocked_reasons"].dump().find("runtime_not_ready"), std::string::npos)
      << health.dump();
  EXPECT_EQ(b.op("acct-0", "via-b").status, 200);

  // Link back: A stands again, at the back of the queue; B keeps leading.
  proxy.setMode(zktest::TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually([&] { return a.account("acct-0")["standing"] == true; }, 10s))
      << a.status().dump();
  EXPECT_EQ(b.leading().size(), accounts.size());
}

TEST_F(AgentProcessTest, StatusReportsEveryDocumentedFieldAndMetricsPassPromtool) {
  auto config = agentConfig("host-a", {"acct-0", "acct-1"}, gateway_->port());
  config["gate"] = "strict";
  config["log"] = {{"format", "json"}};
  auto& a = startAgent(config);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == 2; }, 15s));
  const auto first = a.op("acct-0", "one");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_FALSE(json::parse(first.body).contains("replayed")) << first.body;
  // A retried opId gets the first answer, marked as a replay, and is not applied again: the
  // gateway's log holds the operation once.
  const auto retried = a.op("acct-0", "one");
  EXPECT_EQ(retried.status, 200) << retried.body;
  EXPECT_EQ(json::parse(retried.body).value("replayed", false), true) << retried.body;
  const auto logged = zkagent::fencing::readLoggedOperations(dir_ / "gateway");
  EXPECT_EQ(std::count_if(logged.begin(), logged.end(),
                          [](const auto& entry) { return entry.operation.opId == "one"; }),
            1)
      << logged.size() << " operations logged";
  EXPECT_EQ(a.op("nope", "x").status, 404);
  EXPECT_EQ(a.admin->post("/v1/accounts/acct-0/ops", "[1,2]").status, 400);

  const auto s = a.status();
  for (const char* key :
       {"instance", "session", "lifecycle", "health", "gateway", "peers", "accounts"}) {
    EXPECT_TRUE(s.contains(key)) << key;
  }
  EXPECT_EQ(s["session"]["state"], "connected");
  EXPECT_TRUE(s["session"]["timeout_ms"].is_number());
  EXPECT_EQ(s["lifecycle"], "active");
  EXPECT_EQ(s["health"]["freshness"], "fresh");
  EXPECT_EQ(s["health"]["status"], "alive");
  const auto acct = a.account("acct-0");
  for (const char* key : {"role", "seq", "token", "leader", "since", "last_reason",
                          "blocked_by_health", "health_report_age_ms", "blocked_reasons"}) {
    EXPECT_TRUE(acct.contains(key)) << key;
  }
  EXPECT_EQ(acct["token"], acct["seq"]);
  EXPECT_EQ(acct["leader"]["instance"], "host-a");
  EXPECT_EQ(a.admin->get("/readyz").status, 200);
  EXPECT_EQ(a.admin->get("/healthz").status, 200);

  ChildProcess ctl(zktest::binaryPath("zk-agentctl").string(),
                   {"--admin", "127.0.0.1:" + std::to_string(a.adminPort), "--token",
                    std::string(kAdminToken), "leaders"});
  EXPECT_TRUE(ctl.wait(10s).exitedWith(0)) << ctl.transcript();
  const auto lines = ctl.stdoutLines();
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.starts_with("acct-0 ") && l.find("LEADER") != std::string::npos &&
           l.find("host-a") != std::string::npos;
  })) << ctl.transcript();

  const auto metrics = a.admin->get("/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* family :
       {"zkagent_accounts", "zkagent_leadership_transitions_total", "zkagent_session_state",
        "zkagent_session_expirations_total", "zkagent_gate_decisions_total",
        "zkagent_forwarded_ops_total", "zkagent_failover_duration_seconds_bucket",
        "zkagent_health_report_age_seconds", "zkagent_lifecycle"}) {
    EXPECT_TRUE(zktest::hasMetricFamily(metrics.body, family)) << family;
  }
  EXPECT_EQ(zktest::metricSample(metrics.body, R"(zkagent_accounts{role="LEADER"})"), 2);
  EXPECT_EQ(zktest::metricSample(metrics.body, R"(zkagent_lifecycle{lifecycle="active"})"), 1);
  EXPECT_GE(zktest::metricSample(metrics.body, R"(zkagent_gate_decisions_total{result="executed"})")
                .value_or(0),
            1);
  EXPECT_EQ(metrics.body.find("acct-0"), std::string::npos) << "no account ids as labels";
  const auto file = dir_ / "metrics.txt";
  std::ofstream(file) << metrics.body;
  ChildProcess promtool("/bin/sh", {"-c", "promtool check metrics < " + file.string()});
  EXPECT_TRUE(promtool.wait(30s).exitedWith(0)) << promtool.transcript();

  // JSON logs: every line is one object; the leadership line (account, role, seq, reason) is
  // among them.
  std::istringstream logs(a.process->stderrText());
  bool sawLeaderLine = false;
  for (std::string line; std::getline(logs, line);) {
    const auto entry = json::parse(line, nullptr, false);
    ASSERT_TRUE(entry.is_object()) << line;
    sawLeaderLine |= entry["msg"].get<std::string>().starts_with("leader changed account=acct-0 ");
  }
  EXPECT_TRUE(sawLeaderLine) << a.process->stderrText();
}

TEST_F(AgentProcessTest, BadConfigsAreRejectedNamingTheField) {
  struct Case {
    std::function<void(json&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](json& c) { c["health"]["ttl_ms"] = 100; }, "health.ttl_ms"},
      {[](json& c) {
         c["accounts"] = {"ok", "no/slash"};
       },
       "accounts[1]"},
      {[](json& c) { c["gateway"].erase("url"); }, "gateway.url"},
      {[](json& c) { c["zookeeper"]["hosts"] = "zk-without-port"; }, "zookeeper.hosts"},
  };
  for (const auto& bad : cases) {
    auto config = agentConfig("host-bad", {"acct-0"}, gateway_->port());
    bad.mutate(config);
    ChildProcess agent(zktest::binaryPath("zk-agent").string(),
                       {"--config", writeConfig("bad", config).string()});
    EXPECT_TRUE(agent.wait(10s).exitedWith(2)) << bad.field;
    EXPECT_NE(agent.stderrText().find(bad.field + ":"), std::string::npos) << agent.stderrText();
    EXPECT_TRUE(agent.stdoutLines().empty()) << "it must not start half-configured";
  }
  ChildProcess check(
      zktest::binaryPath("zk-agent").string(),
      {"--config",
       writeConfig("good", agentConfig("host-ok", {"acct-0"}, gateway_->port())).string(),
       "--check-config"});
  EXPECT_TRUE(check.wait(10s).exitedWith(0)) << check.transcript();
  ChildProcess version(zktest::binaryPath("zk-agent").string(), {"--version"});
  EXPECT_EQ(version.readLine(10s).rfind("zk-agent ", 0), 0u);
}

TEST_F(AgentProcessTest, SigtermExitsWithinTheBoundEvenWhenZooKeeperIsUnreachable) {
  zktest::TcpProxy zkProxy(zk_->port());
  auto config = agentConfig("host-a", {"acct-0", "acct-1"}, gateway_->port());
  config["zookeeper"]["hosts"] = zkProxy.connectString();
  config["zookeeper"]["session_timeout_ms"] = 20000;
  config["shutdown_timeout_ms"] = 1000;
  auto& a = startAgent(config);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == 2; }, 15s));

  zkProxy.setMode(zktest::TcpProxy::Mode::blackhole);
  a.process->signal(SIGTERM);
  // shutdown_timeout_ms plus process exit; far below the 20 s session timeout.
  EXPECT_TRUE(a.process->wait(6s).exitedWith(0)) << a.process->transcript();
}

TEST_F(AgentProcessTest, ZooKeeperBlipShorterThanTheSessionKeepsLeadershipWithTheSameToken) {
  zktest::TcpProxy zkProxy(zk_->port());
  auto config = agentConfig("host-a", {"acct-0"}, gateway_->port());
  config["zookeeper"]["hosts"] = zkProxy.connectString();
  config["zookeeper"]["session_timeout_ms"] = 6000;
  auto& a = startAgent(config);
  ASSERT_TRUE(eventually([&] { return a.leading().size() == 1; }, 15s));
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return schedulableAsSeenBy(a, "host-b"); }, 10s));
  const auto token = a.account("acct-0")["token"];

  zkProxy.setMode(zktest::TcpProxy::Mode::close);
  ASSERT_TRUE(eventually([&] { return a.status()["session"]["state"] != "connected"; }, 5s));
  EXPECT_EQ(a.op("acct-0", "during-blip").status, 503) << "suspended: the gate is closed";
  zkProxy.setMode(zktest::TcpProxy::Mode::pass);

  ASSERT_TRUE(eventually([&] { return a.status()["session"]["state"] == "connected"; }, 10s));
  ASSERT_TRUE(eventually([&] { return a.account("acct-0")["role"] == "LEADER"; }, 5s))
      << a.status().dump();
  EXPECT_EQ(a.account("acct-0")["token"], token) << "the same session resumed; no re-registration";
  EXPECT_TRUE(b.leading().empty());
}

TEST_F(AgentProcessTest, EmbeddedGateRunsTheOperationOnlyWhileLeadingWithTheFencingToken) {
  auto config = zkagent::agent::parseConfig(
      agentConfig("host-embedded", {"acct-0"}, gateway_->port()).dump());
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  zkagent::agent::Agent agent(io, config);
  agent.start();
  std::thread runner([&io] { io.run(); });

  std::optional<zkagent::fencing::FencingToken> seen;
  auto run = [&](const std::string& account) {
    return agent.gate().execute(account,
                                [&](const zkagent::fencing::FencingToken& t) { seen = t; });
  };
  ASSERT_TRUE(eventually([&] { return run("acct-0").executed(); }, 15s)) << agent.statusJson();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->account, "acct-0");
  EXPECT_EQ(seen->instanceId, "host-embedded");
  EXPECT_NE(seen->sessionId, 0);
  const auto status = json::parse(agent.statusJson());
  EXPECT_EQ(status["accounts"][0]["token"].get<int64_t>(), static_cast<int64_t>(seen->token));

  seen.reset();
  EXPECT_EQ(run("acct-unknown").result, zkagent::agent::Gate::Result::UnknownAccount);
  EXPECT_FALSE(seen) << "a refused operation never runs";

  std::atomic<bool> stopped{false};
  agent.shutdown([&] { stopped = true; });
  ASSERT_TRUE(eventually([&] { return stopped.load(); }, 10s));
  EXPECT_EQ(run("acct-0").result, zkagent::agent::Gate::Result::Stopping);
  EXPECT_FALSE(seen);
  work.reset();
  io.stop();
  runner.join();
}

}  // namespace
