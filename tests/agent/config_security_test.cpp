// The agent's secrets and TLS settings: token files, gateway.tls, and what describe() shows.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "zkagent/agent/config.hpp"
#include "zktest/test_certs.hpp"

namespace config_security_test {
namespace {

using nlohmann::json;
using zkagent::agent::ConfigError;
using zkagent::agent::parseConfig;

json baseConfig(json gateway) {
  return {{"instance_id", "agent-a"},
          {"zookeeper", {{"hosts", "127.0.0.1:2181"}}},
          {"accounts", {"acct-1"}},
          {"gateway", std::move(gateway)}};
}

json tlsGateway() {
  const auto& certs = zktest::testCertificates();
  return {{"url", "https://127.0.0.1:8480"},
          {"tls",
           {{"ca", (certs / "ca.pem").string()},
            {"cert", (certs / "agent-a.pem").string()},
            {"key", (certs / "agent-a.key").string()}}}};
}

std::string rejectedField(const json& config, const std::filesystem::path& baseDir = {}) {
  try {
    parseConfig(config.dump(), baseDir);
    return "";
  } catch (const ConfigError& e) {
    return e.field();
  }
}

TEST(AgentSecurityConfig, AnHttpsGatewayTakesItsTlsFiles) {
  const auto config = parseConfig(baseConfig(tlsGateway()).dump());
  ASSERT_TRUE(config.gateway.tls);
  EXPECT_NE(config.gateway.tls->cert.find("agent-a.pem"), std::string::npos);
  EXPECT_EQ(config.gateway.address.port, 8480);
  EXPECT_NE(describe(config).find("https://127.0.0.1:8480"), std::string::npos);
}

// --check-config prints what the agent will use: an unset advertise is the listen address, not "".
TEST(AgentSecurityConfig, TheEffectiveConfigShowsTheDefaultAdvertisedEndpoints) {
  auto input = baseConfig(tlsGateway());
  input["admin"] = {{"listen", "127.0.0.1:8471"}, {"token", "t0ken-t0ken"}};
  input["presence"] = {{"listen", "127.0.0.1:8472"}};
  const auto shown = json::parse(describe(parseConfig(input.dump())));
  EXPECT_EQ(shown["admin"]["advertise"], "http://127.0.0.1:8471");
  EXPECT_EQ(shown["presence"]["advertise"], "ws://127.0.0.1:8472");
  input["presence"]["advertise"] = "ws://devices.example:443";
  EXPECT_EQ(json::parse(describe(parseConfig(input.dump())))["presence"]["advertise"],
            "ws://devices.example:443");
}

TEST(AgentSecurityConfig, BadTlsSettingsAreRejectedNamingTheField) {
  auto noTls = tlsGateway();
  noTls.erase("tls");
  EXPECT_EQ(rejectedField(baseConfig(noTls)), "gateway.tls");
  auto plainWithTls = tlsGateway();
  plainWithTls["url"] = "http://127.0.0.1:8480";
  EXPECT_EQ(rejectedField(baseConfig(plainWithTls)), "gateway.tls");
  auto noCa = tlsGateway();
  noCa["tls"].erase("ca");
  EXPECT_EQ(rejectedField(baseConfig(noCa)), "gateway.tls.ca");
  auto keyless = tlsGateway();
  keyless["tls"].erase("key");
  EXPECT_EQ(rejectedField(baseConfig(keyless)), "gateway.tls.key");
  auto missing = tlsGateway();
  missing["tls"]["cert"] = "/nonexistent/agent.pem";
  EXPECT_EQ(rejectedField(baseConfig(missing)), "gateway.tls.cert");
  auto typo = tlsGateway();
  typo["tls"]["certificate"] = "x";
  EXPECT_EQ(rejectedField(baseConfig(typo)), "gateway.tls.certificate");
  EXPECT_EQ(rejectedField(baseConfig({{"url", "ftp://127.0.0.1:8480"}})), "gateway.url");
}

TEST(AgentSecurityConfig, TokensComeFromFilesAndAreNeverShown) {
  const auto dir = std::filesystem::temp_directory_path() / "zkagent-token-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "admin.token") << "admin-s3cret\n";
  std::ofstream(dir / "gateway.token") << "gateway-s3cret";
  std::ofstream(dir / "empty.token") << "\n";
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}, {"token_file", "gateway.token"}});
  config["admin"] = {{"listen", "0.0.0.0:8470"}, {"token_file", "admin.token"}};
  const auto parsed = parseConfig(config.dump(), dir);  // relative to the config's directory
  EXPECT_EQ(parsed.admin.token, "admin-s3cret");
  EXPECT_EQ(parsed.gateway.token, "gateway-s3cret");
  const auto shown = describe(parsed);
  EXPECT_EQ(shown.find("s3cret"), std::string::npos) << shown;

  auto both = config;
  both["admin"]["token"] = "inline";
  EXPECT_EQ(rejectedField(both, dir), "admin.token_file");
  auto empty = config;
  empty["admin"]["token_file"] = (dir / "empty.token").string();
  EXPECT_EQ(rejectedField(empty, dir), "admin.token_file");
  auto absent = config;
  absent["admin"]["token_file"] = "/nonexistent/token";
  EXPECT_EQ(rejectedField(absent, dir), "admin.token_file");
  std::filesystem::remove_all(dir);
}

TEST(AgentSecurityConfig, ZooKeeperDigestComesFromAFileAndIsNeverShown) {
  const auto dir = std::filesystem::temp_directory_path() / "zkagent-digest-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "zk.digest") << "zkagent:pa55word\n";
  std::ofstream(dir / "bad.digest") << "no-colon\n";
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  config["zookeeper"]["auth"] = {{"digest_file", "zk.digest"}};
  const auto parsed = parseConfig(config.dump(), dir);
  EXPECT_EQ(parsed.zookeeper.digest, "zkagent:pa55word");
  EXPECT_EQ(describe(parsed).find("pa55word"), std::string::npos);
  config["zookeeper"]["auth"]["digest_file"] = "bad.digest";
  EXPECT_EQ(rejectedField(config, dir), "zookeeper.auth.digest_file");
  config["zookeeper"]["auth"] = json::object();
  EXPECT_EQ(rejectedField(config, dir), "zookeeper.auth.digest_file");
  config["zookeeper"]["auth"] = {{"digest_file", "zk.digest"}, {"scheme", "sasl"}};
  EXPECT_EQ(rejectedField(config, dir), "zookeeper.auth.scheme");
  std::filesystem::remove_all(dir);
}

}  // namespace

namespace {

zkagent::agent::Config withEnvironmentToken(const json& config, std::string token) {
  return parseConfig(config.dump(), {}, std::move(token));
}

}  // namespace

// ZKAGENT_ADMIN_TOKEN is the admin token too (what zk-agentctl sends), one source at a time: it
// also satisfies the rule that a non-loopback admin.listen needs a token.
TEST(AgentSecurityConfig, TheAdminTokenMayComeFromTheEnvironmentButNotAlsoFromTheConfig) {
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  config["admin"] = {{"listen", "0.0.0.0:8470"}};
  EXPECT_EQ(rejectedField(config), "admin.token");
  const auto parsed = withEnvironmentToken(config, "env-s3cret");
  EXPECT_EQ(parsed.admin.token, "env-s3cret");
  EXPECT_EQ(describe(parsed).find("env-s3cret"), std::string::npos);
  config["admin"]["token"] = "inline";
  try {
    withEnvironmentToken(config, "env-s3cret");
    FAIL() << "accepted both";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "admin.token");
    EXPECT_NE(std::string(e.what()).find("ZKAGENT_ADMIN_TOKEN"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
  }
  EXPECT_EQ(withEnvironmentToken(config, "").admin.token, "inline");  // set but empty: unset
}

TEST(AgentSecurityConfig, OpenOperatorActionsIsAnExplicitBoolean) {
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  EXPECT_FALSE(parseConfig(config.dump()).admin.openOperatorActions);
  config["admin"] = {{"open_operator_actions", true}};
  EXPECT_TRUE(parseConfig(config.dump()).admin.openOperatorActions);
  config["admin"] = {{"open_operator_actions", "yes"}};
  EXPECT_EQ(rejectedField(config), "admin.open_operator_actions");
}

// Plain ws:// off loopback only with presence.insecure; presence.tls (cert and key) serves
// wss:// anywhere, advertised as wss://.
TEST(AgentSecurityConfig, TheDeviceEndpointOffLoopbackNeedsTlsOrInsecure) {
  const auto& certs = zktest::testCertificates();
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  config["presence"] = {{"listen", "0.0.0.0:8471"}};
  EXPECT_EQ(rejectedField(config), "presence.listen");
  config["presence"]["insecure"] = true;
  config["presence"]["insecure_no_device_auth"] = true;  // tokens are the test below's
  const auto parsed = parseConfig(config.dump());
  EXPECT_TRUE(parsed.presence.insecure);
  EXPECT_FALSE(parsed.presence.tls);
  config["presence"] = {{"listen", "[::1]:8471"}};
  EXPECT_EQ(rejectedField(config), "");
  config["presence"] = {{"listen", "localhost:8471"}};
  EXPECT_EQ(rejectedField(config), "");

  config["presence"] = {{"listen", "0.0.0.0:8471"},
                        {"insecure_no_device_auth", true},
                        {"tls", {{"cert", "gateway.pem"}, {"key", "gateway.key"}}}};
  const auto secure = parseConfig(config.dump(), certs);
  ASSERT_TRUE(secure.presence.tls);
  EXPECT_EQ(secure.presence.tls->cert, (certs / "gateway.pem").string());
  EXPECT_EQ(json::parse(describe(secure))["presence"]["advertise"], "wss://0.0.0.0:8471");
  EXPECT_EQ(json::parse(describe(secure))["presence"]["tls"]["key"],
            (certs / "gateway.key").string());

  struct Case {
    json tls;
    std::string field;
  };
  for (const auto& c : std::vector<Case>{
           {{{"cert", "gateway.pem"}}, "presence.tls.key"},
           {{{"key", "gateway.key"}}, "presence.tls.cert"},
           {{{"cert", "missing.pem"}, {"key", "gateway.key"}}, "presence.tls.cert"},
           {{{"cert", "gateway.pem"}, {"key", "gateway.key"}, {"ca", "ca.pem"}}, "presence.tls.ca"},
           {"yes", "presence.tls"}}) {
    config["presence"]["tls"] = c.tls;
    EXPECT_EQ(rejectedField(config, certs), c.field) << c.tls.dump();
  }
  config["presence"]["tls"] = {{"cert", "gateway.pem"}, {"key", "gateway.key"}};
  config["presence"]["advertise"] = "ws://devices.example:8471";
  EXPECT_EQ(rejectedField(config, certs), "presence.advertise") << "TLS is advertised as wss://";
  config["presence"]["advertise"] = "wss://devices.example:8471";
  EXPECT_EQ(parseConfig(config.dump(), certs).presence.advertise, "wss://devices.example:8471");
  config["presence"]["insecure"] = true;
  EXPECT_EQ(rejectedField(config, certs), "presence.insecure") << "TLS and insecure contradict";
  config["presence"].erase("insecure");
  config["presence"].erase("tls");
  EXPECT_EQ(rejectedField(config, certs), "presence.advertise") << "plain is advertised as ws://";
}

namespace device_auth {

json deviceKeys(const std::string& file = "tokens/hs256.secret") {
  return {{"keys", {{{"kid", "k1"}, {"alg", "HS256"}, {"file", file}}}}, {"audience", "zkagent"}};
}

std::string rejection(const json& config, const std::filesystem::path& baseDir) {
  try {
    parseConfig(config.dump(), baseDir);
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// Off loopback anyone who reaches the port could claim any device: device tokens are required
// there unless the insecure choice is explicit.
TEST(AgentDeviceAuthConfig, OffLoopbackTheDeviceEndpointNeedsTokensOrTheExplicitInsecureFlag) {
  const auto& certs = zktest::testCertificates();
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  config["presence"] = {{"listen", "0.0.0.0:8471"}, {"insecure", true}};
  EXPECT_EQ(rejectedField(config, certs), "presence.auth");
  EXPECT_NE(rejection(config, certs).find("presence.insecure_no_device_auth"), std::string::npos)
      << rejection(config, certs);

  config["presence"]["insecure_no_device_auth"] = true;
  auto parsed = parseConfig(config.dump(), certs);
  EXPECT_TRUE(parsed.presence.insecureNoDeviceAuth);
  EXPECT_FALSE(parsed.presence.auth);
  EXPECT_EQ(json::parse(describe(parsed))["presence"]["insecure_no_device_auth"], true);

  config["presence"].erase("insecure_no_device_auth");
  config["presence"]["auth"] = deviceKeys();
  parsed = parseConfig(config.dump(), certs);
  ASSERT_TRUE(parsed.presence.auth);
  ASSERT_EQ(parsed.presence.auth->keys.size(), 1u);
  EXPECT_EQ(parsed.presence.auth->keys[0].material, zktest::tokenKey("hs256.secret"));
  EXPECT_EQ(parsed.presence.auth->audience, "zkagent");
  EXPECT_EQ(json::parse(describe(parsed))["presence"]["auth"], "(set)");

  // Both at once is a contradiction, not a preference.
  config["presence"]["insecure_no_device_auth"] = true;
  EXPECT_EQ(rejectedField(config, certs), "presence.insecure_no_device_auth");

  // On loopback no token is asked for unless presence.auth is set.
  config["presence"] = {{"listen", "127.0.0.1:8471"}};
  parsed = parseConfig(config.dump(), certs);
  EXPECT_FALSE(parsed.presence.auth);
  EXPECT_FALSE(parsed.presence.insecureNoDeviceAuth);
}

TEST(AgentDeviceAuthConfig, BadDeviceKeysAreRefusedNamingTheField) {
  const auto& certs = zktest::testCertificates();
  auto config = baseConfig({{"url", "http://127.0.0.1:8480"}});
  config["presence"] = {{"auth", deviceKeys("tokens/missing.secret")}};
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.keys[0].file");
  config["presence"]["auth"] = deviceKeys("tokens/rs256.pub");  // not an HS256 secret? still bytes
  config["presence"]["auth"]["keys"][0]["alg"] = "ES256";       // an RSA key for ES256
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.keys[0].file");
  config["presence"]["auth"] = deviceKeys();
  config["presence"]["auth"]["keys"][0]["alg"] = "none";
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.keys[0].alg");
  config["presence"]["auth"] = deviceKeys();
  config["presence"]["auth"]["leeway"] = 601;
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.leeway");
  config["presence"]["auth"] = deviceKeys();
  config["presence"]["auth"]["issuer"] = "x";
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.issuer");
  config["presence"]["auth"] = {{"keys", json::array()}};
  EXPECT_EQ(rejectedField(config, certs), "presence.auth.keys");
}

}  // namespace device_auth
}  // namespace config_security_test
