// zk-agent and fencing-gateway processes over TLS with client certificates, and the agent's
// operator token: real ZooKeeper, real processes, certificates from scripts/make-test-certs.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"
#include "zktest/zookeeper_server.hpp"

namespace security_process_test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using zktest::AgentProcess;

std::string certFile(const std::string& name) {
  return (zktest::testCertificates() / name).string();
}

constexpr std::string_view kAdminToken = "admin-token-7f3a";

class SecureCluster : public zktest::AgentProcessFixture {
 protected:
  SecureCluster()
      : AgentProcessFixture("zk-agent-security",
                            {"--tls-cert", certFile("gateway.pem"), "--tls-key",
                             certFile("gateway.key"), "--tls-client-ca", certFile("ca.pem")}) {}
  void SetUp() override {
    AgentProcessFixture::SetUp();
    std::ofstream(dir_ / "admin.token") << kAdminToken << "\n";
  }

  // An agent `id` leading `account`, presenting `certificate`'s certificate to the gateway.
  AgentProcess& startAgent(const std::string& id, const std::string& certificate,
                           const std::string& account, bool digest = false,
                           bool waitForLeadership = true) {
    json config = zktest::agentConfig(
        {zk_->connectString(), root_, "https://localhost:" + std::to_string(gateway_->port())}, id,
        {account},
        {{"gateway",
          {{"tls",
            {{"ca", certFile("ca.pem")},
             {"cert", certFile(certificate + ".pem")},
             {"key", certFile(certificate + ".key")}}},
           {"request_timeout_ms", nullptr}}},
         {"admin", {{"token_file", "admin.token"}}},
         // These agents run on the defaults of the gateway request timeout and of health.
         {"health", nullptr}});
    if (digest) {
      std::ofstream(dir_ / "zk.digest") << "zkagent:" << kAdminToken << "\n";
      config["zookeeper"]["auth"] = {{"digest_file", "zk.digest"}};
    }
    auto& agent = addAgent(config, {.bearerToken = std::string(kAdminToken)});
    if (waitForLeadership) {
      EXPECT_TRUE(zktest::eventually([&] { return agent.leads(account); }, 20s))
          << id << " never led " << account << "\n"
          << agent.process->transcript();
    }
    return agent;
  }

  static zkagent::http::ClientResponse op(AgentProcess& agent, const std::string& account,
                                          const std::string& opId) {
    return agent.op(account, opId, {{"text", "hi"}});
  }
};

TEST_F(SecureCluster, AnAgentWithItsOwnCertificateHasItsOperationsAccepted) {
  auto& agent = startAgent("agent-a", "agent-a", "acct-a");
  ASSERT_TRUE(zktest::eventually([&] { return op(agent, "acct-a", "warm-up").status == 200; }, 10s))
      << op(agent, "acct-a", "warm-up").body << "\n"
      << agents_.back()->process->transcript();
}

TEST_F(SecureCluster, AnAgentPresentingAnotherInstancesCertificateIsRefusedByTheGateway) {
  // Instance agent-b leads acct-b in ZooKeeper but holds agent-a's certificate.
  auto& impostor = startAgent("agent-b", "agent-a", "acct-b");
  auto refused = op(impostor, "acct-b", "b-1");
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_NE(refused.body.find("not the instance of this client certificate"), std::string::npos)
      << refused.body;
}

TEST_F(SecureCluster, OperatorEndpointsNeedTheAdminTokenWhichIsNeverShown) {
  auto& agent = startAgent("agent-a", "agent-a", "acct-a");
  for (std::string token : {"", "wrong-token"}) {
    zkagent::http::Client stranger(
        zkagent::http::ClientOptions{.port = agents_.back()->adminPort, .bearerToken = token});
    EXPECT_EQ(stranger.post("/v1/drain", "").status, 401) << "token '" << token << "'";
    EXPECT_EQ(stranger.post("/v1/accounts/acct-a/resign", "").status, 401);
    EXPECT_EQ(stranger.get("/v1/status").status, 401);
    EXPECT_EQ(stranger.get("/healthz").status, 200);  // probes stay public
  }
  auto status = agent.admin->get("/v1/status");
  ASSERT_EQ(status.status, 200);
  EXPECT_EQ(status.body.find(kAdminToken), std::string::npos);
  EXPECT_EQ(agent.admin->get("/metrics").body.find(kAdminToken), std::string::npos);
  EXPECT_EQ(agents_.back()->process->stderrText().find(kAdminToken), std::string::npos);
  // Nothing the strangers sent was acted on: not drained, still leading.
  const auto body = json::parse(status.body);
  EXPECT_EQ(body.value("lifecycle", ""), "active") << status.body;
  EXPECT_EQ(body["accounts"][0]["role"], "LEADER") << status.body;
}

// With zookeeper.auth the election tree belongs to the agents: a client without the credentials
// cannot remove the leader's active node, and the agents still fail over among themselves.
TEST_F(SecureCluster, WithDigestAclsAStrangerCannotRemoveActiveAndAgentsStillFailOver) {
  startAgent("agent-a", "agent-a", "acct-1", true);
  startAgent("agent-b", "agent-b", "acct-1", true, false);
  zhandle_t* stranger =
      zookeeper_init(zk_->connectString().c_str(), nullptr, 10000, nullptr, nullptr, 0);
  ASSERT_TRUE(zktest::eventually([&] { return zoo_state(stranger) == ZOO_CONNECTED_STATE; }, 10s));
  const std::string active = root_ + "/accounts/acct-1/active";
  EXPECT_EQ(zoo_delete(stranger, active.c_str(), -1), ZNOAUTH);
  EXPECT_EQ(zoo_set(stranger, active.c_str(), "{}", 2, -1), ZNOAUTH);
  zookeeper_close(stranger);

  agents_[0]->process->kill();  // kill -9: agent-b takes over one session timeout later
  auto& b = *agents_[1];
  EXPECT_TRUE(zktest::eventually([&] { return b.leads("acct-1"); }, 20s))
      << agents_[1]->process->transcript();
}

}  // namespace
}  // namespace security_process_test
