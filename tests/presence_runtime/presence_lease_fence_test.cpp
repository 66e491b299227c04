// Lease writes fenced like operations, on real processes (ZooKeeper, a fencing-gateway with TLS
// client certificates, zk-agent and zk-device processes), in both gateway modes.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "presence_process_support.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace std::chrono_literals;
using namespace zktest::presence_process;
using nlohmann::json;
using std::chrono::milliseconds;
using zktest::ChildProcess;
using zktest::eventually;

// Lease writes fenced like operations, tried as an attacker would: a gateway with TLS client
// certificates (in ZooKeeper mode, and in hwm_only mode where it has no ZooKeeper of its own),
// agents agent-a and agent-b each with its own valid certificate. The test posts lease batches
// itself with an agent's certificate: what a compromised or confused agent could send.
using Checks = zktest::GatewayChecks;
using zktest::AgentProcess;

std::string certFile(const std::string& name) {
  return (zktest::testCertificates() / name).string();
}

std::vector<std::string> gatewayArgs() {
  return {
      "--tls-cert",       certFile("gateway.pem"), "--tls-key",      certFile("gateway.key"),
      "--tls-client-ca",  certFile("ca.pem"),      "--lease-ttl-ms", std::to_string(kLeaseTtlMs),
      "--lease-sweep-ms", std::to_string(kSweepMs)};
}

json entry(const std::string& device, uint64_t token, uint64_t counter) {
  return {{"account", "acct-0"}, {"device", device}, {"token", token}, {"counter", counter}};
}
json removal(const std::string& device, uint64_t token, uint64_t counter) {
  auto removed = entry(device, token, counter);
  removed["reason"] = "close";
  return removed;
}

class LeaseFenceProcess : public zktest::AgentProcessFixture,
                          public ::testing::WithParamInterface<Checks> {
 protected:
  LeaseFenceProcess() : AgentProcessFixture("zk-lease-fence", gatewayArgs(), GetParam()) {}
  void TearDown() override {
    devices_.clear();
    AgentProcessFixture::TearDown();
  }

  // agent-a and agent-b hold the certificates of their own names.
  AgentProcess& startAgent(const std::string& id) {
    const std::string url = "https://localhost:" + std::to_string(gateway_->port());
    return addAgent(zktest::agentConfig(
        {zk_->connectString(), root_, url}, id, {"acct-0"},
        {{"zookeeper", {{"session_timeout_ms", kSessionTimeoutMs}}},
         {"gateway",
          {{"tls",
            {{"ca", certFile("ca.pem")},
             {"cert", certFile(id + ".pem")},
             {"key", certFile(id + ".key")}}}}},
         {"presence",
          {{"listen", "127.0.0.1:" + std::to_string(zktest::freeLoopbackPort())},
           {"heartbeat_ms", kHeartbeatMs},
           {"ping_timeout_ms", kPingTimeoutMs},
           {"renew_interval_ms", kRenewIntervalMs},
           {"lease_ttl_ms", kLeaseTtlMs}}}}));
  }
  ChildProcess& startDevice(const std::vector<std::string>& urls) {
    std::string connect;
    for (const auto& url : urls) connect += (connect.empty() ? "" : ",") + url;
    devices_.push_back(std::make_unique<ChildProcess>(
        zktest::binaryPath("zk-device").string(),
        std::vector<std::string>{"--connect", connect, "--account", "acct-0", "--device", "phone",
                                 "--heartbeat-ms", std::to_string(kHeartbeatMs), "--timeout-ms",
                                 std::to_string(kPingTimeoutMs)}));
    return *devices_.back();
  }

  // A client of the gateway presenting `certificate` (agent-a, agent-b, agent-c).
  zkagent::http::Client as(const std::string& certificate) const {
    return zkagent::http::Client(
        {.port = gateway_->port(),
         .requestTimeout = 3000ms,
         .tls = zkagent::http::ClientTls{.ca = certFile("ca.pem"),
                                         .cert = certFile(certificate + ".pem"),
                                         .key = certFile(certificate + ".key")}});
  }
  json post(const std::string& certificate, const json& batch) const {
    auto answer = as(certificate).post("/v1/presence/leases", batch.dump());
    EXPECT_EQ(answer.status, 200) << answer.body << answer.transportError;
    return answer.status == 200 ? json::parse(answer.body) : json();
  }
  json leaseOf(const std::string& device) const {
    auto r = as("agent-c").get("/v1/presence/acct-0");
    if (r.status != 200) return json();
    for (const auto& d : json::parse(r.body).value("devices", json::array())) {
      if (d["device"] == device) return d;
    }
    return json();
  }
  double gatewaySample(const std::string& sample) const {
    return sampleOf(as("agent-c").get("/metrics").body, sample);
  }
  double renewalsAccepted() const { return gatewaySample(leaseEntries("renew", "accepted")); }
  // Waits until the device's lease is held by `agent` under `epoch`.
  bool leaseHeldBy(const std::string& agent, const Connected& epoch) const {
    return eventually(
        [&] {
          const auto lease = leaseOf("phone");
          return !lease.is_null() && lease["agent"] == agent &&
                 lease["epoch"] == json{{"token", epoch.token}, {"counter", epoch.counter}};
        },
        5s);
  }

  std::vector<std::unique_ptr<ChildProcess>> devices_;
};

// Agent B, with its own valid certificate and session, posts under A's token: it can neither
// add a device to A's account, nor displace the real device's lease with a newer epoch, nor
// remove it; A's lease stays and A's renewals go on.
TEST_P(LeaseFenceProcess, ANonLeaderAgentCannotRenewOrRemoveTheLeadersLeases) {
  auto& a = startAgent("agent-a");
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("agent-b");
  ASSERT_TRUE(eventually([&] { return b.account("acct-0").value("role", "") == "WAITING"; }, 15s));
  auto& device = startDevice({a.deviceUrl});
  const auto held = parseConnected(device.waitForLine("CONNECTED ", 10s));
  ASSERT_EQ(held.agent, "agent-a");
  ASSERT_TRUE(leaseHeldBy("agent-a", held)) << leaseOf("phone").dump();
  const double renewFencedBefore = gatewaySample(leaseEntries("renew", "fenced"));
  const double removeFencedBefore = gatewaySample(leaseEntries("remove", "fenced"));

  const json attack{{"instanceId", "agent-b"},
                    {"sessionId", b.sessionId()},
                    {"renew", {entry("ghost", held.token, 1), entry("phone", held.token, 1000000)}},
                    {"remove", {removal("phone", held.token, held.counter)}}};
  const auto answer = post("agent-b", attack);
  EXPECT_EQ(answer["renewed"], 0) << answer.dump();
  EXPECT_EQ(answer["removed"], 0) << answer.dump();
  EXPECT_EQ(answer["fenced"],
            (json{{{"account", "acct-0"}, {"token", held.token}, {"superseded", true}}}));
  ASSERT_EQ(answer["refused"].size(), 3u) << answer.dump();
  for (const auto& refused : answer["refused"]) {
    EXPECT_EQ(refused["reason"], "not_current_leader") << answer.dump();
  }
  EXPECT_EQ(gatewaySample(leaseEntries("renew", "fenced")) - renewFencedBefore, 2);
  EXPECT_EQ(gatewaySample(leaseEntries("remove", "fenced")) - removeFencedBefore, 1);
  // B cannot borrow A's instance id either: its certificate names agent-b.
  auto impersonated = attack;
  impersonated["instanceId"] = "agent-a";
  const auto forbidden = as("agent-b").post("/v1/presence/leases", impersonated.dump());
  EXPECT_EQ(forbidden.status, 403) << forbidden.body;
  EXPECT_NE(forbidden.body.find("not the instance of this client certificate"), std::string::npos);

  EXPECT_TRUE(leaseOf("ghost").is_null());
  EXPECT_TRUE(leaseHeldBy("agent-a", held)) << leaseOf("phone").dump();
  const double renewedBefore = renewalsAccepted();
  EXPECT_TRUE(eventually([&] { return renewalsAccepted() > renewedBefore; }, 5s))
      << "the leader's own renewals stopped";
}

// A is paused past its session; B takes over and its lease writes are the only thing the gateway
// hears for the account (no operation flows). They raised the HWM, so the deposed A's writes are
// refused: a renewal of a device no lease covers (which the epoch order alone would take) under
// A's token, and a removal of B's lease under B's token.
TEST_P(LeaseFenceProcess, ADeposedLeadersLeaseWritesAreRefusedOnceTheSuccessorWroteOne) {
  auto& a = startAgent("agent-a");
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("agent-b");
  ASSERT_TRUE(eventually([&] { return b.account("acct-0").value("role", "") == "WAITING"; }, 15s));
  const int64_t sessionA = a.sessionId();
  auto& device = startDevice({a.deviceUrl, b.deviceUrl});
  const auto before = parseConnected(device.waitForLine("CONNECTED ", 10s));
  ASSERT_EQ(before.agent, "agent-a");

  a.process->signal(SIGSTOP);
  const auto after = parseConnected(device.waitForLine(
      [](std::string_view l) {
        return l.starts_with("CONNECTED ") && l.find(" agent-b ") != l.npos;
      },
      milliseconds(kSessionTimeoutMs + 10000), "CONNECTED to agent-b"));
  ASSERT_GT(after.token, before.token);
  ASSERT_TRUE(leaseHeldBy("agent-b", after)) << leaseOf("phone").dump();
  const auto account = as("agent-c").get("/v1/accounts/acct-0");
  ASSERT_EQ(account.status, 200) << account.body;
  EXPECT_EQ(json::parse(account.body)["hwm"], after.token)
      << "the successor's lease write raised the HWM: " << account.body;

  const auto answer = post("agent-a", {{"instanceId", "agent-a"},
                                       {"sessionId", sessionA},
                                       {"renew", {entry("ghost", before.token, 1)}},
                                       {"remove", {removal("phone", after.token, after.counter)}}});
  EXPECT_EQ(answer["renewed"], 0) << answer.dump();
  EXPECT_EQ(answer["removed"], 0) << answer.dump();
  ASSERT_EQ(answer["refused"].size(), 2u) << answer.dump();
  EXPECT_EQ(answer["refused"][0]["reason"], "stale_token") << answer.dump();
  EXPECT_EQ(answer["refused"][1]["reason"], "not_current_leader") << answer.dump();
  EXPECT_TRUE(leaseOf("ghost").is_null());
  EXPECT_TRUE(leaseHeldBy("agent-b", after)) << leaseOf("phone").dump();
  a.process->signal(SIGCONT);
}

INSTANTIATE_TEST_SUITE_P(GatewayModes, LeaseFenceProcess,
                         ::testing::Values(Checks::ZooKeeper, Checks::HwmOnly),
                         [](const ::testing::TestParamInfo<Checks>& mode) {
                           return mode.param == Checks::ZooKeeper ? "ZooKeeper" : "HwmOnly";
                         });

}  // namespace
