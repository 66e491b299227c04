// The config validator: every bad field is rejected with its name; good configs get defaults.
#include "zkagent/agent/config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
using zkagent::agent::ConfigError;
using zkagent::agent::parseConfig;

json validConfig() {
  return {{"instance_id", "host-a"},
          {"zookeeper", {{"hosts", "127.0.0.1:2181"}}},
          {"accounts", {"acct-1", "acct-2"}},
          {"gateway", {{"url", "http://127.0.0.1:8480"}}}};
}

// The field a config is rejected for, or "" when it is accepted.
std::string rejectedField(const json& config) {
  try {
    parseConfig(config.dump());
    return "";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(e.field()), std::string::npos) << e.what();
    return e.field();
  }
}

TEST(AgentConfig, MinimalConfigGetsDocumentedDefaults) {
  const auto c = parseConfig(validConfig().dump());
  EXPECT_EQ(c.instanceId, "host-a");
  EXPECT_EQ(c.accounts, (std::vector<std::string>{"acct-1", "acct-2"}));
  EXPECT_EQ(c.zookeeper.sessionTimeout.count(), 10000);
  EXPECT_EQ(c.zookeeper.root, "/wx-accounts");
  EXPECT_EQ(c.zookeeper.agentsPath, "/zkagent/agents");
  EXPECT_EQ(c.health.interval.count(), 5000);
  EXPECT_EQ(c.health.ttl.count(), 30000);
  EXPECT_EQ(c.gateway.address.host, "127.0.0.1");
  EXPECT_EQ(c.gateway.address.port, 8480);
  EXPECT_EQ(c.admin.listen.host, "127.0.0.1");
  EXPECT_EQ(c.lockDelay.count(), 0);
}

struct BadCase {
  const char* name;
  std::function<void(json&)> mutate;
  const char* field;
};

TEST(AgentConfig, EachBadFieldIsRejectedByName) {
  const std::vector<BadCase> cases = {
      {"missing instance", [](json& c) { c.erase("instance_id"); }, "instance_id"},
      {"instance with slash", [](json& c) { c["instance_id"] = "a/b"; }, "instance_id"},
      {"missing hosts", [](json& c) { c["zookeeper"].erase("hosts"); }, "zookeeper.hosts"},
      {"host without port", [](json& c) { c["zookeeper"]["hosts"] = "zk1"; }, "zookeeper.hosts"},
      {"session timeout as string", [](json& c) { c["zookeeper"]["session_timeout_ms"] = "10s"; },
       "zookeeper.session_timeout_ms"},
      {"tiny session timeout", [](json& c) { c["zookeeper"]["session_timeout_ms"] = 10; },
       "zookeeper.session_timeout_ms"},
      {"relative root", [](json& c) { c["zookeeper"]["root"] = "wx"; }, "zookeeper.root"},
      {"no accounts", [](json& c) { c["accounts"] = json::array(); }, "accounts"},
      {"bad account id",
       [](json& c) {
         c["accounts"] = {"ok", "bad id"};
       },
       "accounts[1]"},
      {"duplicate account",
       [](json& c) {
         c["accounts"] = {"a", "a"};
       },
       "accounts[1]"},
      {"missing accounts file", [](json& c) { c["accounts_file"] = "/nonexistent/accounts.txt"; },
       "accounts_file"},
      {"gateway url scheme", [](json& c) { c["gateway"]["url"] = "ftp://gw:1"; }, "gateway.url"},
      {"gateway url path", [](json& c) { c["gateway"]["url"] = "http://gw:1/x"; }, "gateway.url"},
      {"heartbeat timeout too short",
       [](json& c) {
         c["gateway"]["heartbeat_interval_ms"] = 1000, c["gateway"]["heartbeat_timeout_ms"] = 2000;
       },
       "gateway.heartbeat_timeout_ms"},
      {"zero health interval",
       [](json& c) {
         c["health"] = {{"interval_ms", 0}};
       },
       "health.interval_ms"},
      {"ttl below interval",
       [](json& c) {
         c["health"] = {{"interval_ms", 5000}, {"ttl_ms", 4000}};
       },
       "health.ttl_ms"},
      {"negative lock delay", [](json& c) { c["lock_delay_ms"] = -1; }, "lock_delay_ms"},
      {"unknown gate", [](json& c) { c["gate"] = "slow"; }, "gate"},
      {"public admin without token",
       [](json& c) {
         c["admin"] = {{"listen", "0.0.0.0:8470"}};
       },
       "admin.token"},
      {"bad log format",
       [](json& c) {
         c["log"] = {{"format", "xml"}};
       },
       "log.format"},
      {"typo at top level", [](json& c) { c["helth"] = json::object(); }, "helth"},
      {"typo in a section",
       [](json& c) {
         c["health"] = {{"intervall_ms", 5}};
       },
       "health.intervall_ms"},
  };
  for (const auto& bad : cases) {
    json config = validConfig();
    bad.mutate(config);
    EXPECT_EQ(rejectedField(config), bad.field) << bad.name;
  }
}

// The agent and the gateway read their fields with one reader (zkagent/config_reader.hpp) and one
// set of naming rules: the same problem gets the same words in both (tests/gateway/config_test).
TEST(AgentConfig, FieldsAreReadWithTheConventionsTheGatewayShares) {
  auto refusal = [](const std::function<void(json&)>& change) -> std::string {
    auto config = validConfig();
    change(config);
    try {
      parseConfig(config.dump());
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refusal([](json& c) {
              c["log"] = {{"level", "loud"}};
            }),
            "log.level: must be trace, debug, info, warn, error, critical or off, got 'loud'");
  EXPECT_EQ(refusal([](json& c) { c["log"] = {{"level", "critical"}}; }), "accepted");
  EXPECT_EQ(refusal([](json& c) { c["Accounts"] = json::array(); }), "Accounts: unknown field");
  EXPECT_EQ(refusal([](json& c) {
              c["presence"] = {{"insecure", "yes"}};
            }),
            "presence.insecure: must be true or false");
  EXPECT_EQ(refusal([](json& c) {
              c["accounts"] = {"ok", "b/d"};
            }),
            "accounts[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(refusal([](json& c) { c["zookeeper"]["root"] = "/a/"; }),
            "zookeeper.root: must be an absolute znode path like /wx-accounts (no trailing or "
            "double '/')");
  EXPECT_EQ(refusal([](json& c) {
              c["admin"] = {{"listen", "h:70000"}};
            }),
            "admin.listen: port must be a number from 0 to 65535, got '70000'");
  auto config = validConfig();
  config["admin"] = {{"listen", "[::1]:8470"}};
  EXPECT_EQ(parseConfig(config.dump()).admin.listen.host, "::1");
}

TEST(AgentConfig, NotJsonIsRejectedAsTheConfigItself) {
  EXPECT_THROW(
      {
        try {
          parseConfig("{ not json");
        } catch (const ConfigError& e) {
          EXPECT_EQ(e.field(), "config");
          throw;
        }
      },
      ConfigError);
}

TEST(AgentConfig, AccountsFileIsReadRelativeToTheConfigAndMergedWithTheList) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("agent-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "accounts.txt") << "# desk accounts\nacct-3\n\n  acct-4  \n"; }
  auto config = validConfig();
  config["accounts_file"] = "accounts.txt";
  const auto c = parseConfig(config.dump(), dir);
  EXPECT_EQ(c.accounts, (std::vector<std::string>{"acct-1", "acct-2", "acct-3", "acct-4"}));
  { std::ofstream(dir / "accounts.txt") << "acct-1\n"; }
  EXPECT_THROW(parseConfig(config.dump(), dir), ConfigError) << "acct-1 listed in both places";
  std::filesystem::remove_all(dir);
}

TEST(AgentConfig, HeartbeatZeroDisablesTheTimeoutCheck) {
  auto config = validConfig();
  config["gateway"]["heartbeat_interval_ms"] = 0;
  config["gateway"]["heartbeat_timeout_ms"] = 0;
  EXPECT_EQ(parseConfig(config.dump()).gateway.heartbeatInterval.count(), 0);
}

}  // namespace

namespace {

TEST(AgentPresenceConfig, DefaultsAreTheDocumentedOnes) {
  const auto p = parseConfig(validConfig().dump()).presence;
  EXPECT_EQ(p.listen.host, "127.0.0.1");
  EXPECT_EQ(p.listen.port, 8471);
  EXPECT_EQ(p.advertise, "");
  EXPECT_EQ(p.heartbeat.count(), 30000);
  EXPECT_EQ(p.pingTimeout.count(), 75000);
  EXPECT_EQ(p.checkInterval.count(), 5000);
  EXPECT_EQ(p.renewInterval.count(), 60000);
  EXPECT_DOUBLE_EQ(p.renewJitter, 0.1);
  EXPECT_EQ(p.leaseTtl.count(), 150000);
  EXPECT_EQ(p.maxBatchEntries, 2000u);
}

TEST(AgentPresenceConfig, TimingRulesOfTheModelAreReportedWithTheConfigFieldNames) {
  struct Case {
    json presence;
    std::string field, mentions;
  };
  const std::vector<Case> cases = {
      {{{"heartbeat_ms", 1000}, {"ping_timeout_ms", 2000}},
       "presence.ping_timeout_ms",
       "2 x heartbeat_ms"},
      {{{"heartbeat_ms", 0}, {"ping_timeout_ms", 5000}},
       "presence.ping_timeout_ms",
       "heartbeat_ms is 0"},
      {{{"renew_interval_ms", 60000}, {"lease_ttl_ms", 120000}},
       "presence.lease_ttl_ms",
       "2 x renew_interval_ms"},
      {{{"renew_interval_ms", 0}}, "presence.renew_interval_ms", "renew_interval_ms must be > 0"},
      {{{"check_interval_ms", 0}}, "presence.check_interval_ms", "check_interval_ms"},
      {{{"renew_jitter", 1}}, "presence.renew_jitter", "[0, 1)"},
      {{{"renew_jitter", -0.1}}, "presence.renew_jitter", "[0, 1)"},
      {{{"renew_jitter", "0.1"}}, "presence.renew_jitter", "[0, 1)"},
      {{{"max_batch_entries", 0}}, "presence.max_batch_entries", "an integer from 1 to"},
      {{{"listen", "nowhere"}}, "presence.listen", "expected HOST:PORT"},
      {{{"advertise", "http://x:1"}}, "presence.advertise", "ws://"},
      {{{"heartbeat", 1}}, "presence.heartbeat", "unknown field"},
  };
  for (const auto& c : cases) {
    auto config = validConfig();
    config["presence"] = c.presence;
    try {
      parseConfig(config.dump());
      ADD_FAILURE() << c.presence.dump() << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field(), c.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.mentions), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("pingTimeout"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("allowUnsafe"), std::string::npos) << e.what();
    }
  }
}

TEST(AgentPresenceConfig, ZeroTurnsTheAgentsCheckOffAndBothZeroIsValid) {
  auto config = validConfig();
  config["presence"] = {{"ping_timeout_ms", 0}};
  EXPECT_EQ(parseConfig(config.dump()).presence.pingTimeout.count(), 0);
  config["presence"] = {{"heartbeat_ms", 0}, {"ping_timeout_ms", 0}};
  EXPECT_EQ(parseConfig(config.dump()).presence.heartbeat.count(), 0);
}

TEST(AgentPresenceConfig, RenewJitterZeroAndFractionsAreAccepted) {
  auto config = validConfig();
  config["presence"] = {{"renew_jitter", 0}};
  const auto parsed = parseConfig(config.dump());
  EXPECT_EQ(parsed.presence.renewJitter, 0.0);
  config["presence"] = {{"renew_jitter", 0.25}};
  EXPECT_DOUBLE_EQ(parseConfig(config.dump()).presence.renewJitter, 0.25);
}

TEST(AgentPresenceConfig, DeviceListenerMustDifferFromTheAdminListener) {
  auto config = validConfig();
  config["admin"] = {{"listen", "127.0.0.1:9000"}};
  config["presence"] = {{"listen", "127.0.0.1:9000"}};
  EXPECT_THROW(parseConfig(config.dump()), ConfigError);
}

// Another agent's 4001 close names this endpoint in its reason (at most 123 bytes), followed by
// the device's path and query when they fit: the endpoint may take 60 bytes.
TEST(AgentPresenceConfig, AdvertisedEndpointMustLeaveRoomForThePathInACloseReason) {
  auto config = validConfig();
  const std::string sixty = "ws://" + std::string(50, 'h') + ":8471";  // 5 + 50 + 5 bytes
  ASSERT_EQ(sixty.size(), 60u);
  config["presence"] = {{"advertise", sixty}};
  EXPECT_EQ(parseConfig(config.dump()).presence.advertise, sixty);
  config["presence"] = {{"advertise", "ws://" + std::string(51, 'h') + ":8471"}};
  try {
    parseConfig(config.dump());
    ADD_FAILURE() << "a 61-byte advertise was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "presence.advertise");
    EXPECT_NE(std::string(e.what()).find("61 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 60"), std::string::npos) << e.what();
  }
  // Without advertise, the default ws://{listen host}:{port} is judged, with the longest port.
  config["presence"] = {{"listen", std::string(44, 'h') + ":0"},
                        {"insecure", true},
                        {"insecure_no_device_auth", true}};
  EXPECT_NO_THROW(parseConfig(config.dump()));  // ws:// + 44 + :65535 = 55
  config["presence"] = {{"listen", std::string(50, 'h') + ":0"},
                        {"insecure", true},
                        {"insecure_no_device_auth", true}};
  try {
    parseConfig(config.dump());
    ADD_FAILURE() << "a 61-byte default endpoint was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "presence.listen") << e.what();
  }
}

}  // namespace
