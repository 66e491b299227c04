// An agent set-up with device tokens (presence.auth with the keys of scripts/make-test-certs),
// short presence timings, a gateway whose leases can be read, and tokens minted for it: shared
// by the tests that try device identity and the tests with clients nobody here wrote.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "zkagent/auth.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/test_certs.hpp"

namespace zktest {

struct Mint {
  std::string subject = "phone";
  std::string account = "acct-0";
  std::string scope = "device";
  std::string audience = "zkagent";
  int64_t ttl = 600;  // seconds from now; negative: already expired
  std::string secret = "hs256.secret";
};

inline std::string mint(const Mint& m) {
  zkagent::auth::SigningKey key{"k1", zkagent::auth::Algorithm::HS256, zktest::tokenKey(m.secret)};
  return zkagent::auth::mint(key, {.subject = m.subject,
                                   .account = m.account,
                                   .scope = m.scope,
                                   .audience = m.audience,
                                   .expiresAt = zkagent::auth::unixNow() + m.ttl,
                                   .notBefore = std::nullopt});
}

class DeviceAuthTest : public zktest::AgentProcessFixture {
 protected:
  DeviceAuthTest()
      : AgentProcessFixture("zk-device-auth-test",
                            {"--lease-ttl-ms", "1200", "--lease-sweep-ms", "100"}) {}
  void SetUp() override {
    AgentProcessFixture::SetUp();
    zkagent::http::ClientOptions options;
    options.port = gateway_->port();
    gatewayClient_ = std::make_unique<zkagent::http::Client>(options);
  }

  nlohmann::json config(const std::string& id, const std::vector<std::string>& accounts,
                        int leeway = 30) {
    const auto tokens = zktest::testCertificates() / "tokens";
    return zktest::agentConfig(
        site(), id, accounts,
        {{"admin", {{"open_operator_actions", true}}},
         {"presence",
          {{"heartbeat_ms", 200},
           {"ping_timeout_ms", 0},
           {"check_interval_ms", 100},
           {"renew_interval_ms", 400},
           {"lease_ttl_ms", 1200},
           {"auth",
            {{"keys",
              {{{"kid", "k1"}, {"alg", "HS256"}, {"file", (tokens / "hs256.secret").string()}},
               {{"kid", "e1"}, {"alg", "ES256"}, {"file", (tokens / "es256.pub").string()}}}},
             {"audience", "zkagent"},
             {"leeway", leeway}}}}}});
  }

  // The gateway's lease of `device` in acct-0: {agent, token, counter}, or null.
  nlohmann::json lease(const std::string& device) const {
    auto r = gatewayClient_->get("/v1/presence/acct-0");
    if (r.status != 200) return nlohmann::json();
    for (const auto& d : nlohmann::json::parse(r.body).value("devices", nlohmann::json::array())) {
      if (d["device"] == device) {
        return {{"agent", d["agent"]},
                {"token", d["epoch"]["token"]},
                {"counter", d["epoch"]["counter"]}};
      }
    }
    return nlohmann::json();
  }

  std::unique_ptr<zkagent::http::Client> gatewayClient_;
};

}  // namespace zktest
