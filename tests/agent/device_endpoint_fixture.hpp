// The device endpoint's process-test fixture: a real fencing-gateway (short lease TTL and sweep),
// zk-agent processes with short presence timings, and the gateway's leases as the tests read them.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/deadline.hpp"

namespace zktest {

class DeviceEndpointTest : public AgentProcessFixture {
 protected:
  using json = nlohmann::json;
  using Agent = AgentProcess;

  DeviceEndpointTest()
      : DeviceEndpointTest({"--lease-ttl-ms", "1200", "--lease-sweep-ms", "100"}) {}
  explicit DeviceEndpointTest(std::vector<std::string> gatewayArgs)
      : AgentProcessFixture("zk-device-endpoint-test", std::move(gatewayArgs)) {}
  void SetUp() override {
    AgentProcessFixture::SetUp();
    zkagent::http::ClientOptions options;
    options.port = gateway_->port();
    gatewayClient_ = std::make_unique<zkagent::http::Client>(options);
  }

  json config(const std::string& id, const std::vector<std::string>& accounts) const {
    return zktest::agentConfig(site(), id, accounts,
                               {// No admin token: the resign tests need the explicit opt-out.
                                {"admin", {{"open_operator_actions", true}}},
                                {"presence",
                                 {{"heartbeat_ms", 200},
                                  {"ping_timeout_ms", 0},  // tests that want the check turn it on
                                  {"check_interval_ms", 100},
                                  {"renew_interval_ms", 400},
                                  {"lease_ttl_ms", 1200}}}});
  }

  Agent& startAgent(const json& cfg) { return addAgent(cfg); }
  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts) {
    return startAgent(config(id, accounts));
  }

  // host-a leading acct-0 and host-b, which stands for it too, knowing host-a leads.
  std::pair<Agent&, Agent&> leaderAndFollower() {
    auto& a = startAgent("host-a", {"acct-0"});
    EXPECT_TRUE(eventually([&] { return a.leads("acct-0"); }, std::chrono::seconds(15)));
    auto& b = startAgent("host-b", {"acct-0"});
    EXPECT_TRUE(eventually(
        [&] {
          return b.account("acct-0")["leader"].is_object() &&
                 b.account("acct-0")["leader"]["instance"] == "host-a";
        },
        std::chrono::seconds(10)))
        << b.status().dump();
    return {a, b};
  }

  // The gateway's leases of `account`: device -> {agent, token, counter}.
  json leases(const std::string& account) const {
    auto r = gatewayClient_->get("/v1/presence/" + account);
    if (r.status != 200) return json();
    json out = json::object();
    for (const auto& d : json::parse(r.body).value("devices", json::array())) {
      out[d["device"].get<std::string>()] = {{"agent", d["agent"]},
                                             {"token", d["epoch"]["token"]},
                                             {"counter", d["epoch"]["counter"]}};
    }
    return out;
  }

  std::unique_ptr<zkagent::http::Client> gatewayClient_;
};
}  // namespace zktest
