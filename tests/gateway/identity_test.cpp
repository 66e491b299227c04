// Agent identity at the gateway without sockets: the router gets requests whose peerIdentities
// the TLS layer would have set, and the config's transport rules.
#include "identity.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "in_process_gateway.hpp"
#include "temp_dir.hpp"
#include "zktest/test_certs.hpp"

using namespace zkagent;
using nlohmann::json;

namespace identity_test {
namespace {

std::string op(std::string_view instance, std::string_view opId) {
  return json{{"account", "acc"}, {"token", 5},   {"instanceId", instance},
              {"sessionId", 42},  {"opId", opId}, {"payload", {{"text", "hi"}}}}
      .dump();
}

std::string leases(std::string_view instance) {
  return json{{"instanceId", instance},
              {"sessionId", 42},
              {"renew", {{{"account", "acc"}, {"device", "d1"}, {"token", 5}, {"counter", 1}}}}}
      .dump();
}

class GatewayIdentity : public ::testing::Test {
 protected:
  // With what the test set in config_ before.
  void start(bool clientCertificates) {
    config_.dataDir = dir_.path();
    if (clientCertificates) config_.tlsClientCa = "ca.pem";  // only "is it on" matters here
    gateway_.emplace(config_);
  }
  http::Response post(std::string path, std::string body, std::vector<std::string> names) {
    http::Request request;
    request.method = http::Method::Post;
    request.path = request.target = std::move(path);
    request.body = std::move(body);
    request.peerIdentities = std::move(names);
    return gateway_->handle(std::move(request));
  }

  fencing::testing::TempDir dir_;
  gateway::Config config_;
  std::optional<gateway::testing::InProcessGateway> gateway_;
};

const std::vector<std::string> kAgentA = {"agent-a", "zkagent:instance:agent-a"};

TEST_F(GatewayIdentity, AnAgentsCertificateCannotSubmitForAnotherInstance) {
  start(true);
  auto foreign = post("/v1/ops", op("agent-b", "op-1"), kAgentA);
  EXPECT_EQ(foreign.status, 403) << foreign.body;
  EXPECT_NE(foreign.body.find("agent-b"), std::string::npos);
  EXPECT_EQ(post("/v1/ops", op("agent-b", "op-1"), {}).status, 403);  // no certificate names
  EXPECT_EQ(post("/v1/ops", op("agent-a", "op-1"), kAgentA).status, 200);
  // The refused operation left nothing behind: its opId is still free.
  EXPECT_EQ(gateway_->validator().status("acc")->accepted, 1u);
}

TEST_F(GatewayIdentity, TheUriNameAloneNamesTheInstance) {
  start(true);
  EXPECT_EQ(post("/v1/ops", op("agent-a", "op-1"), {"zkagent:instance:agent-a"}).status, 200);
  EXPECT_EQ(post("/v1/ops", op("agent-a", "op-2"), {"zkagent:instance:agent-ab"}).status, 403);
  EXPECT_EQ(post("/v1/ops", op("agent-a", "op-3"), {"zkagent:instance:"}).status, 403);
}

TEST_F(GatewayIdentity, AnAgentsCertificateCannotWriteLeasesForAnotherInstance) {
  start(true);
  EXPECT_EQ(post("/v1/presence/leases", leases("agent-b"), kAgentA).status, 403);
  // A second instanceId key would win in the batch parser: every one must be the certificate's.
  std::string smuggled = leases("agent-a");
  smuggled.insert(1, R"("instanceId":"agent-b",)");
  EXPECT_EQ(post("/v1/presence/leases", smuggled, kAgentA).status, 403);
  auto own = post("/v1/presence/leases", leases("agent-a"), kAgentA);
  EXPECT_EQ(own.status, 200) << own.body;
}

TEST_F(GatewayIdentity, WithoutClientCertificatesNoInstanceIsChecked) {
  start(false);
  EXPECT_EQ(post("/v1/ops", op("agent-b", "op-1"), {}).status, 200);
}

TEST_F(GatewayIdentity, PrivacyRulesCannotBeChangedWithoutAnOperatorToken) {
  start(false);
  http::Request request;
  request.method = http::Method::Put;
  request.path = request.target = "/v1/presence/privacy/acc";
  request.body = "{}";
  auto refused = gateway_->handle(request);
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_NE(refused.body.find("operator token"), std::string::npos);
}

TEST_F(GatewayIdentity, PrivacyRulesNeedTheRightOperatorToken) {
  config_.operatorToken = "operator-secret";
  start(false);
  http::Request request;
  request.method = http::Method::Put;
  request.path = request.target = "/v1/presence/privacy/acc";
  request.body = "{}";
  EXPECT_EQ(gateway_->handle(request).status, 401);
  request.headers.emplace_back("authorization", "Bearer operator-secreT");
  EXPECT_EQ(gateway_->handle(request).status, 401);
  request.headers.back().second = "Bearer operator-secret";
  EXPECT_NE(gateway_->handle(request).status, 401);
}

// The agents' token (what every agent holds) is not the operator token: with both configured, an
// agent's credentials pass on agent routes and get 401 on every operator action.
TEST_F(GatewayIdentity, TheAgentsTokenAllowsNoOperatorAction) {
  config_.bearerToken = "agent-secret";
  config_.operatorToken = "operator-secret";
  start(false);
  auto send = [&](http::Method method, std::string path, std::string body, std::string token) {
    http::Request request;
    request.method = method;
    request.path = request.target = std::move(path);
    request.body = std::move(body);
    request.headers.emplace_back("authorization", "Bearer " + token);
    return gateway_->handle(request);
  };
  ASSERT_EQ(send(http::Method::Post, "/v1/ops", op("agent-a", "op-1"), "agent-secret").status, 200);
  const std::string reset = R"({"hwm":0,"reason":"x"})";
  EXPECT_EQ(send(http::Method::Post, "/v1/accounts/acc/reset-hwm", reset, "agent-secret").status,
            401);
  EXPECT_EQ(send(http::Method::Put, "/v1/presence/privacy/acc", "{}", "agent-secret").status, 401);
  EXPECT_EQ(send(http::Method::Post, "/v1/ops", op("agent-a", "op-2"), "operator-secret").status,
            401);
  EXPECT_EQ(send(http::Method::Post, "/v1/accounts/acc/reset-hwm", reset, "operator-secret").status,
            200);
  auto put = send(http::Method::Put, "/v1/presence/privacy/acc", "{}", "operator-secret");
  EXPECT_NE(put.status, 401) << put.body;  // past the authentication: the handler answers
  EXPECT_NE(put.status, 403) << put.body;
}

TEST(GatewayIdentityParsing, TopLevelInstanceIdsAreFoundWhereverTheyStand) {
  using gateway::topLevelInstanceIds;
  EXPECT_EQ(topLevelInstanceIds(R"({"a":{"instanceId":"x"},"instanceId":"y"})"),
            std::vector<std::string>{"y"});
  EXPECT_EQ(topLevelInstanceIds(R"({"instanceId":"x","instanceId":"y"})"),
            (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(topLevelInstanceIds(R"({"instanceId":"x")").empty());
  EXPECT_TRUE(topLevelInstanceIds("[\"instanceId\",\"x\"]").empty());
  EXPECT_EQ(topLevelInstanceIds(R"({"instanceId":7})").size(), 0u);
}

gateway::CommandLine parse(std::vector<std::string> args) {
  return gateway::parseCommandLine(args, std::nullopt);
}

TEST(GatewayTransportConfig, PlainHttpOffLoopbackNeedsInsecure) {
  auto refused = parse({"--listen", "0.0.0.0:9000", "--data-dir", "/d"});
  ASSERT_FALSE(refused.config);
  EXPECT_NE(refused.message.find("tls.cert (--tls-cert)"), std::string::npos) << refused.message;
  auto insecure = parse({"--listen", "0.0.0.0:9000", "--insecure", "--data-dir", "/d"});
  ASSERT_TRUE(insecure.config) << insecure.message;
  EXPECT_TRUE(insecure.config->insecure);
  EXPECT_TRUE(parse({"--listen", "127.0.0.1:9000", "--data-dir", "/d"}).config);
  EXPECT_TRUE(parse({"--listen", "[::1]:9000", "--data-dir", "/d"}).config);
}

// The subscriber WebSocket is wss:// with the gateway's certificate; without one it is plain
// ws://, and off loopback that needs insecure.
TEST(GatewayTransportConfig, SubscribersOffLoopbackNeedTlsOrInsecure) {
  auto refused = parse({"--subscribe-listen", "0.0.0.0:9001", "--data-dir", "/d"});
  ASSERT_FALSE(refused.config);
  EXPECT_NE(refused.message.find("presence.subscribe_listen (--subscribe-listen): is 0.0.0.0: "
                                 "without tls.cert (--tls-cert) the subscriber WebSocket is plain"),
            std::string::npos)
      << refused.message;
  const auto& certs = zktest::testCertificates();
  const std::vector<std::string> tls{"--tls-cert",      (certs / "gateway.pem").string(),
                                     "--tls-key",       (certs / "gateway.key").string(),
                                     "--tls-client-ca", (certs / "ca.pem").string()};
  std::vector<std::string> tlsArgs{"--listen", "0.0.0.0:0", "--data-dir", "/d"};
  tlsArgs.insert(tlsArgs.end(), tls.begin(), tls.end());
  auto tlsDefault = parse(tlsArgs);
  // Without subscriber tokens the default subscriber listener stays on loopback.
  ASSERT_TRUE(tlsDefault.config) << tlsDefault.message;
  EXPECT_EQ(tlsDefault.config->subscribeAddress, "127.0.0.1");
  // Off loopback, a claimed viewer is never trusted, insecure or not: viewer tokens are required.
  auto claimed = parse({"--subscribe-listen", "0.0.0.0:9001", "--insecure", "--data-dir", "/d"});
  ASSERT_FALSE(claimed.config);
  EXPECT_NE(claimed.message.find("presence.viewer_auth: is required"), std::string::npos)
      << claimed.message;
  fencing::testing::TempDir dir;
  const auto file = dir.path() / "gateway.json";
  std::ofstream(file) << R"({"presence":{"viewer_auth":{"keys":[{"alg":"HS256","file":")"
                      << (certs / "tokens" / "hs256.secret").string() << R"("}]}}})";
  auto withViewerKeys =
      parse({"--config", file.string(), "--listen", "0.0.0.0:0", "--insecure", "--data-dir", "/d"});
  ASSERT_TRUE(withViewerKeys.config) << withViewerKeys.message;
  EXPECT_EQ(withViewerKeys.config->subscribeAddress, "0.0.0.0");
  EXPECT_EQ(withViewerKeys.config->viewerAuth->keys.size(), 1u);
  EXPECT_TRUE(parse({"--subscribe-listen", "127.0.0.1:9001", "--data-dir", "/d"}).config);
  // With the certificate (wss://) and viewer tokens, off loopback needs no insecure: explicitly,
  // and as the default next to a TLS HTTP listener off loopback.
  std::vector<std::string> secure{"--config",     file.string(), "--subscribe-listen",
                                  "0.0.0.0:9001", "--data-dir",  "/d"};
  secure.insert(secure.end(), tls.begin(), tls.end());
  auto wss = parse(secure);
  ASSERT_TRUE(wss.config) << wss.message;
  EXPECT_FALSE(wss.config->insecure);
  std::vector<std::string> byDefault{"--config",     file.string(), "--listen",
                                     "0.0.0.0:9000", "--data-dir",  "/d"};
  byDefault.insert(byDefault.end(), tls.begin(), tls.end());
  auto wssDefault = parse(byDefault);
  ASSERT_TRUE(wssDefault.config) << wssDefault.message;
  EXPECT_EQ(wssDefault.config->subscribeAddress, "0.0.0.0");
  EXPECT_EQ(wssDefault.config->subscribePort, 9001);
}

// The operator token from a file, the config or ZKAGENT_GATEWAY_OPERATOR_TOKEN, one of them; never
// the agents' token.
TEST(GatewayTransportConfig, TheOperatorTokenComesFromOnePlaceAndDiffersFromTheAgentsToken) {
  fencing::testing::TempDir dir;
  const auto file = (dir.path() / "operator.token").string();
  std::ofstream(file) << "op-secret\n";
  auto fromFile = parse({"--data-dir", "/d", "--operator-token-file", file});
  ASSERT_TRUE(fromFile.config) << fromFile.message;
  EXPECT_EQ(fromFile.config->operatorToken, "op-secret");
  auto fromEnvironment =
      gateway::parseCommandLine({"--data-dir", "/d"}, std::nullopt, "env-secret");
  ASSERT_TRUE(fromEnvironment.config) << fromEnvironment.message;
  EXPECT_EQ(fromEnvironment.config->operatorToken, "env-secret");
  auto both = gateway::parseCommandLine({"--data-dir", "/d", "--operator-token-file", file},
                                        std::nullopt, "env-secret");
  ASSERT_FALSE(both.config);
  EXPECT_NE(both.message.find("ZKAGENT_GATEWAY_OPERATOR_TOKEN: set either it or"),
            std::string::npos)
      << both.message;
  auto same =
      gateway::parseCommandLine({"--data-dir", "/d", "--operator-token-file", file}, "op-secret");
  ASSERT_FALSE(same.config);
  EXPECT_NE(same.message.find("operator_token: must differ from token"), std::string::npos)
      << same.message;
  EXPECT_EQ(gateway::parseConfigJson(json{{"operator_token_file", file}}.dump()).operatorToken,
            "op-secret");
  EXPECT_THROW(
      gateway::parseConfigJson(json{{"operator_token", "a"}, {"operator_token_file", file}}.dump()),
      std::invalid_argument);
}

TEST(GatewayTransportConfig, TheRequestRateIsConfigurable) {
  EXPECT_EQ(parse({"--data-dir", "/d"}).config->maxRequestsPerSecond, 10000u);
  EXPECT_EQ(
      parse({"--data-dir", "/d", "--max-requests-per-second", "0"}).config->maxRequestsPerSecond,
      0u);
  EXPECT_EQ(gateway::parseConfigJson(R"({"maxRequestsPerSecond":50})").maxRequestsPerSecond, 50u);
  auto bad = parse({"--data-dir", "/d", "--max-requests-per-second", "-1"});
  ASSERT_FALSE(bad.config);
  EXPECT_NE(bad.message.find("--max-requests-per-second: must be"), std::string::npos);
}

TEST(GatewayTransportConfig, TlsSettingsComeTogetherAndMustBeReadable) {
  const auto& certs = zktest::testCertificates();
  const std::string cert = (certs / "gateway.pem").string(), key = (certs / "gateway.key").string(),
                    ca = (certs / "ca.pem").string();
  auto partial = parse({"--data-dir", "/d", "--tls-cert", cert, "--tls-key", key});
  ASSERT_FALSE(partial.config);
  EXPECT_NE(partial.message.find("tls.client_ca (--tls-client-ca)"), std::string::npos);
  auto unreadable = parse(
      {"--data-dir", "/d", "--tls-cert", cert, "--tls-key", "/nope/k.pem", "--tls-client-ca", ca});
  ASSERT_FALSE(unreadable.config);
  EXPECT_NE(unreadable.message.find("tls.key (--tls-key): cannot read /nope/k.pem"),
            std::string::npos)
      << unreadable.message;
  auto full = parse({"--listen", "0.0.0.0:0", "--subscribe-listen", "127.0.0.1:0", "--data-dir",
                     "/d", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca});
  ASSERT_TRUE(full.config) << full.message;
  EXPECT_EQ(full.config->tlsClientCa, ca);
}

// Found by gateway_config_fuzzer: nlohmann throws out_of_range, not parse_error, for a number
// beyond a double, and it escaped parseCommandLine (the gateway aborted at start).
TEST(GatewayTransportConfig, ANumberBeyondADoubleIsAConfigErrorNotACrash) {
  try {
    gateway::parseConfigJson("-1221.44e44444");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("config: not valid JSON"), std::string::npos);
  }
}

TEST(GatewayTransportConfig, TheConfigFileTakesTlsInsecureAndATokenFile) {
  fencing::testing::TempDir dir;
  std::ofstream(dir.path() / "token") << "s3cret\n";
  auto config = gateway::parseConfigJson(json{
      {"tls", {{"cert", "c.pem"}, {"key", "k.pem"}, {"client_ca", "ca.pem"}}},
      {"insecure", true},
      {"tokenFile",
       (dir.path() / "token").string()}}.dump());
  EXPECT_EQ(config.tlsCert, "c.pem");
  EXPECT_EQ(config.tlsKey, "k.pem");
  EXPECT_EQ(config.tlsClientCa, "ca.pem");
  EXPECT_TRUE(config.insecure);
  EXPECT_EQ(config.bearerToken, "s3cret");  // without the newline
  EXPECT_THROW(gateway::parseConfigJson(R"({"tls":{"certificate":"c"}})"), std::invalid_argument);
  try {
    gateway::parseConfigJson(R"({"tokenFile":"/nope/token"})");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("tokenFile: cannot read"), std::string::npos);
  }
}

}  // namespace
}  // namespace identity_test
