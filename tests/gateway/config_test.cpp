#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "gateway.hpp"
#include "temp_dir.hpp"

using namespace zkagent::gateway;

namespace {

CommandLine parse(std::vector<std::string> args, std::optional<std::string> token = std::nullopt) {
  return parseCommandLine(args, std::move(token));
}

std::string errorOf(std::vector<std::string> args) {
  auto result = parse(std::move(args));
  EXPECT_FALSE(result.config.has_value());
  EXPECT_EQ(result.exitCode, 2);
  return result.message;
}

// The error parseConfigJson throws for `json`, or "accepted".
std::string error(std::string_view json) {
  try {
    parseConfigJson(json);
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

}  // namespace

TEST(GatewayConfig, FlagsFillTheConfig) {
  auto result = parse({"--listen", "0.0.0.0:9000", "--insecure", "--data-dir", "/var/lib/gw",
                       "--zk", "zk1:2181,zk2:2181", "--root", "/accounts", "--zk-untrusted",
                       "refuse", "--commit-mode", "per_operation", "--zk-session-timeout-ms",
                       "1500", "--compact-after-mib", "8"});
  ASSERT_TRUE(result.config) << result.message;
  const auto& config = *result.config;
  EXPECT_EQ(config.listenAddress, "0.0.0.0");
  EXPECT_EQ(config.listenPort, 9000);
  EXPECT_EQ(config.dataDir, "/var/lib/gw");
  EXPECT_EQ(config.zkHosts, "zk1:2181,zk2:2181");
  EXPECT_EQ(config.zkRoot, "/accounts");
  EXPECT_EQ(config.untrusted, UntrustedPolicy::Refuse);
  EXPECT_EQ(config.commitMode, zkagent::fencing::CommitMode::per_operation);
  EXPECT_EQ(config.zkSessionTimeoutMs, 1500);
  EXPECT_EQ(config.compactAfterMib, 8u);
  EXPECT_EQ(parse({"--data-dir", "d"}).config->compactAfterMib, 64u);
}

TEST(GatewayConfig, FileIsReadFirstThenFlagsAndEnvironmentOverrideIt) {
  zkagent::fencing::testing::TempDir dir;
  auto file = dir.path() / "gateway.json";
  std::ofstream(file) << R"({"listen":"127.0.0.1:7000","data_dir":"/from/file","token":"file-token",
    "zookeeper":{"hosts":"zk:2181","session_timeout_ms":4000,"untrusted":"refuse"},
    "accounts":["a","b"],"handler_threads":8,"compact_after_mib":0,
    "log":{"level":"debug","format":"json"}})";
  auto result = parse({"--data-dir", "/from/flag", "--config", file.string()}, "env-token");
  ASSERT_TRUE(result.config) << result.message;
  const auto& config = *result.config;
  EXPECT_EQ(config.listenPort, 7000);
  EXPECT_EQ(config.dataDir, "/from/flag");
  EXPECT_EQ(config.bearerToken, "env-token");
  EXPECT_EQ(config.zkHosts, "zk:2181");
  EXPECT_EQ(config.zkSessionTimeoutMs, 4000);
  EXPECT_EQ(config.untrusted, UntrustedPolicy::Refuse);
  EXPECT_EQ(config.accounts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(config.handlerThreads, 8u);
  EXPECT_EQ(config.compactAfterMib, 0u);
  EXPECT_EQ(config.logLevel, "debug");
  EXPECT_TRUE(config.jsonLogs);
  EXPECT_EQ(parse({"--config", file.string()}).config->bearerToken, "file-token");
}

TEST(GatewayConfig, ErrorsNameTheFieldAndWhatIsExpected) {
  EXPECT_NE(errorOf({"--listen", "127.0.0.1:0"}).find("--data-dir: required"), std::string::npos);
  EXPECT_NE(
      errorOf({"--data-dir", "d", "--listen", "localhost"}).find("--listen: expected HOST:PORT"),
      std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--listen", "h:70000"}).find("--listen: port"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--zk-untrusted", "maybe"}).find("hwm_only or refuse"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--root", "relative"}).find("--root"), std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--zk-session-timeout-ms", "399"})
                .find("--zk-session-timeout-ms"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--frobnicate", "1"}).find("--frobnicate: unknown option"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir"}).find("--data-dir: needs a value"), std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--compact-after-mib", "-1"}).find("--compact-after-mib"),
            std::string::npos);
  EXPECT_NE(errorOf({"--config", "/nonexistent/gw.json"}).find("cannot read"), std::string::npos);
}

TEST(GatewayConfig, FileErrorsNameTheJsonField) {
  EXPECT_NE(error("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(
      error(R"({"zookeeper":{"session_timeout_ms":10}})").find("zookeeper.session_timeout_ms"),
      std::string::npos);
  EXPECT_NE(error(R"({"accounts":["ok","b/d"]})").find("accounts[1]"), std::string::npos);
  EXPECT_NE(error(R"({"tokn":"x"})").find("tokn: unknown field"), std::string::npos);
  EXPECT_NE(error(R"({"compact_after_mib":"8"})").find("compact_after_mib"), std::string::npos);
  EXPECT_NE(error(R"({"log":{"level":"loud"}})").find("log.level"), std::string::npos);
  EXPECT_NE(error(R"({"handler_threads":"many"})").find("handler_threads"), std::string::npos);
}

// Keys are snake_case like the agent's; each camelCase name of earlier releases is still read,
// with a warning naming its new key; both names at once is an error naming both.
TEST(GatewayConfig, OldCamelCaseKeysAreReadWithAWarningNamingTheNewKey) {
  const auto old = zkagent::gateway::parseConfigJson(
      R"({"dataDir":"/old","commitMode":"per_operation","handlerThreads":3,"ioThreads":2,
          "agentTimeoutMs":700,"maxRequestsPerSecond":5,
          "zookeeper":{"sessionTimeoutMs":4000},"tls":{"clientCa":"ca.pem"}})");
  EXPECT_EQ(old.dataDir, "/old");
  EXPECT_EQ(old.commitMode, zkagent::fencing::CommitMode::per_operation);
  EXPECT_EQ(old.handlerThreads, 3u);
  EXPECT_EQ(old.ioThreads, 2u);
  EXPECT_EQ(old.agentTimeoutMs, 700);
  EXPECT_EQ(old.maxRequestsPerSecond, 5u);
  EXPECT_EQ(old.zkSessionTimeoutMs, 4000);
  EXPECT_EQ(old.tlsClientCa, "ca.pem");
  ASSERT_EQ(old.warnings.size(), 8u);
  EXPECT_EQ(old.warnings[0],
            "dataDir is deprecated: it is now data_dir (the old name is read until the next "
            "release)");
  EXPECT_EQ(std::count_if(old.warnings.begin(), old.warnings.end(),
                          [](const std::string& w) {
                            return w.starts_with(
                                       "tls.clientCa is deprecated: it is now "
                                       "tls.client_ca") ||
                                   w.starts_with(
                                       "zookeeper.sessionTimeoutMs is deprecated: it "
                                       "is now zookeeper.session_timeout_ms");
                          }),
            2);

  const auto current = zkagent::gateway::parseConfigJson(
      R"({"data_dir":"/new","zookeeper":{"session_timeout_ms":4000}})");
  EXPECT_EQ(current.dataDir, "/new");
  EXPECT_TRUE(current.warnings.empty());

  const auto both = error(R"({"data_dir":"/new","dataDir":"/old"})");
  EXPECT_NE(both.find("dataDir: is the old name of data_dir: give only data_dir"),
            std::string::npos)
      << both;
  EXPECT_NE(error(R"({"zookeeper":{"sessionTimeoutMs":10}})").find("zookeeper.sessionTimeoutMs"),
            std::string::npos)
      << "a bad value is named as written";
}

// The gateway and the agent read their fields with one reader (zkagent/config_reader.hpp) and one
// set of naming rules: the same problem gets the same words in both (tests/agent/config_test).
TEST(GatewayConfig, FieldsAreReadWithTheConventionsTheAgentShares) {
  EXPECT_EQ(error(R"({"log":{"level":"loud"}})"),
            "log.level: must be trace, debug, info, warn, error, critical or off, got 'loud'");
  EXPECT_EQ(error(R"({"log":{"level":"critical"}})"), "accepted");
  EXPECT_EQ(error(R"({"Listen":"127.0.0.1:1"})"), "Listen: unknown field");
  EXPECT_EQ(error(R"({"insecure":"yes"})"), "insecure: must be true or false");
  EXPECT_EQ(error(R"({"accounts":["ok","b/d"]})"),
            "accounts[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(error(R"({"zookeeper":{"root":"/a/"}})"),
            "zookeeper.root: must be an absolute znode path like /wx-accounts (no trailing or "
            "double '/')");
  EXPECT_EQ(error(R"({"listen":"h:70000"})"),
            "listen: port must be a number from 0 to 65535, got '70000'");
  EXPECT_EQ(parseConfigJson(R"({"listen":"[::1]:8480"})").listenAddress, "::1");
  EXPECT_EQ(errorOf({"--data-dir", "d", "--log-level", "loud"}),
            "fencing-gateway: --log-level: must be trace, debug, info, warn, error, critical or "
            "off, got 'loud'\n");
}

TEST(GatewayConfig, HelpAndVersionPrintAndExitZero) {
  auto help = parse({"--help"});
  EXPECT_FALSE(help.config);
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_NE(help.message.find("--data-dir"), std::string::npos);
  auto version = parse({"--version"});
  EXPECT_EQ(version.exitCode, 0);
  EXPECT_EQ(version.message, std::string("fencing-gateway ") + ZKAGENT_VERSION + "\n");
}

TEST(GatewayConfig, PresenceLeaseSettingsComeFromTheFileAndFlagsOverrideThem) {
  auto defaults = parse({"--data-dir", "d"});
  ASSERT_TRUE(defaults.config) << defaults.message;
  EXPECT_EQ(defaults.config->leaseTtlMs, 150000);
  EXPECT_EQ(defaults.config->leaseSweepMs, 5000);
  zkagent::fencing::testing::TempDir dir;
  auto file = dir.path() / "gateway.json";
  std::ofstream(file) << R"({"data_dir":"d","presence":{"lease_ttl_ms":1200,"sweep_ms":100}})";
  auto fromFile = parse({"--config", file.string()});
  ASSERT_TRUE(fromFile.config) << fromFile.message;
  EXPECT_EQ(fromFile.config->leaseTtlMs, 1200);
  EXPECT_EQ(fromFile.config->leaseSweepMs, 100);
  auto overridden =
      parse({"--config", file.string(), "--lease-ttl-ms", "900", "--lease-sweep-ms", "50"});
  ASSERT_TRUE(overridden.config) << overridden.message;
  EXPECT_EQ(overridden.config->leaseTtlMs, 900);
  EXPECT_EQ(overridden.config->leaseSweepMs, 50);
}

TEST(GatewayConfig, BadPresenceLeaseSettingsAreRefusedNamingTheField) {
  EXPECT_NE(errorOf({"--data-dir", "d", "--lease-ttl-ms", "0"}).find("--lease-ttl-ms: must be"),
            std::string::npos);
  EXPECT_NE(
      errorOf({"--data-dir", "d", "--lease-sweep-ms", "-5"}).find("--lease-sweep-ms: must be"),
      std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "d", "--lease-ttl-ms", "12x"}).find("--lease-ttl-ms: must be"),
            std::string::npos);
  EXPECT_NE(
      errorOf({"--data-dir", "d", "--lease-ttl-ms", "1000", "--lease-sweep-ms", "1001"})
          .find("presence.sweep_ms (--lease-sweep-ms): must not exceed presence.lease_ttl_ms"),
      std::string::npos);
  EXPECT_NE(error(R"({"presence":{"lease_ttl_ms":0}})").find("presence.lease_ttl_ms: must be"),
            std::string::npos);
  EXPECT_NE(error(R"({"presence":{"sweep_ms":"5s"}})").find("presence.sweep_ms: must be"),
            std::string::npos);
  EXPECT_NE(error(R"({"presence":{"ttl":5}})").find("presence.ttl: unknown field"),
            std::string::npos);
  EXPECT_NE(error(R"({"presence":7})").find("presence: must be a JSON object"), std::string::npos);
}

TEST(GatewayConfig, SubscriberSettingsHaveDefaultsComeFromTheFileAndFlagsAndAreChecked) {
  auto defaults = parse({"--data-dir", "d"});
  ASSERT_TRUE(defaults.config) << defaults.message;
  EXPECT_EQ(defaults.config->debounceMs, 20000);
  EXPECT_EQ(defaults.config->subscribePort, 8481) << "the HTTP port's neighbour";
  EXPECT_EQ(defaults.config->coalesceMs, 100);
  EXPECT_EQ(defaults.config->subscriberQueue, 64);
  EXPECT_EQ(defaults.config->maxSubscribers, 10000);
  auto anyPort = parse({"--data-dir", "d", "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(anyPort.config) << anyPort.message;
  EXPECT_EQ(anyPort.config->subscribePort, 0);
  zkagent::fencing::testing::TempDir dir;
  auto file = dir.path() / "gateway.json";
  std::ofstream(file)
      << R"({"data_dir":"d","presence":{"debounce_ms":500,"coalesce_ms":10,)"
         R"("subscriber_queue":4,"max_subscribers":3,"subscribe_listen":"127.0.0.1:9000"}})";
  auto fromFile = parse({"--config", file.string()});
  ASSERT_TRUE(fromFile.config) << fromFile.message;
  EXPECT_EQ(fromFile.config->debounceMs, 500);
  EXPECT_EQ(fromFile.config->coalesceMs, 10);
  EXPECT_EQ(fromFile.config->subscriberQueue, 4);
  EXPECT_EQ(fromFile.config->maxSubscribers, 3);
  EXPECT_EQ(fromFile.config->subscribePort, 9000);
  auto overridden = parse({"--config", file.string(), "--debounce-ms", "0", "--subscribe-listen",
                           "127.0.0.1:9001", "--max-subscribers", "7"});
  ASSERT_TRUE(overridden.config) << overridden.message;
  EXPECT_EQ(overridden.config->maxSubscribers, 7);
  EXPECT_EQ(overridden.config->debounceMs, 0);
  EXPECT_EQ(overridden.config->subscribePort, 9001);

  EXPECT_NE(errorOf({"--data-dir", "d", "--debounce-ms", "-1"}).find("--debounce-ms: must be"),
            std::string::npos);
  EXPECT_NE(
      errorOf({"--data-dir", "d", "--subscriber-queue", "0"}).find("--subscriber-queue: must be"),
      std::string::npos);
  EXPECT_NE(
      errorOf({"--data-dir", "d", "--max-subscribers", "0"}).find("--max-subscribers: must be"),
      std::string::npos);
  EXPECT_NE(
      error(R"({"presence":{"max_subscribers":-3}})").find("presence.max_subscribers: must be"),
      std::string::npos);
  EXPECT_NE(error(R"({"presence":{"debounce_ms":"20s"}})").find("presence.debounce_ms: must be"),
            std::string::npos);
  EXPECT_NE(error(R"({"presence":{"subscribe_listen":"nowhere"}})")
                .find("presence.subscribe_listen: expected HOST:PORT"),
            std::string::npos);
}

// Cluster mode: the three settings together, on ZooKeeper, never hwm_only (refuse is its
// default), an advertised URL of the listener's scheme.
TEST(GatewayConfig, ClusterSettingsComeTogetherOnZooKeeperAndRefuseWithoutIt) {
  const std::vector<std::string> base = {"--data-dir", "/d", "--zk", "zk:2181"};
  auto with = [&base](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  auto result = parse(with({"--cluster-shards", "64", "--gateway-id", "gw-1", "--advertise-url",
                            "http://127.0.0.1:8480"}));
  ASSERT_TRUE(result.config) << result.message;
  EXPECT_EQ(result.config->clusterShards, 64u);
  EXPECT_EQ(result.config->gatewayId, "gw-1");
  EXPECT_EQ(result.config->advertiseUrl, "http://127.0.0.1:8480");
  EXPECT_EQ(result.config->untrusted, UntrustedPolicy::Refuse);

  const auto file = parseConfigJson(
      R"({"cluster": {"shards": 8, "gateway_id": "gw-2", "advertise_url": "http://h:1"}})");
  EXPECT_EQ(file.clusterShards, 8u);
  EXPECT_EQ(file.gatewayId, "gw-2");

  EXPECT_NE(errorOf(with({"--cluster-shards", "8"}))
                .find("cluster.gateway_id (--gateway-id): "
                      "required in cluster mode"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir", "/d", "--cluster-shards", "8", "--gateway-id", "g",
                     "--advertise-url", "http://h:1"})
                .find("zookeeper.hosts (--zk): required in cluster mode"),
            std::string::npos);
  EXPECT_NE(errorOf(with({"--cluster-shards", "8", "--gateway-id", "g", "--advertise-url",
                          "http://h:1", "--zk-untrusted", "hwm_only"}))
                .find("zookeeper.untrusted (--zk-untrusted): must be refuse in cluster mode"),
            std::string::npos);
  EXPECT_NE(errorOf(with({"--cluster-shards", "0"})).find("--cluster-shards"), std::string::npos);
  EXPECT_NE(errorOf(with({"--cluster-shards", "4097"})).find("--cluster-shards"),
            std::string::npos);
  EXPECT_NE(errorOf(with({"--gateway-id", "a/b"})).find("--gateway-id: must match"),
            std::string::npos);
  for (const std::string url : {"ftp://h:1", "http://h", "http://h:0", "h:80"}) {
    EXPECT_NE(errorOf(with({"--advertise-url", url})).find("--advertise-url: "), std::string::npos)
        << url;
  }
  EXPECT_NE(errorOf(with({"--cluster-shards", "8", "--gateway-id", "g", "--advertise-url",
                          "https://h:1"}))
                .find("is https:// but the gateway serves plain HTTP"),
            std::string::npos);
  EXPECT_EQ(error(R"({"cluster": {"shards": 8, "zones": 2}})").find("cluster.zones"), 0u)
      << error(R"({"cluster": {"shards": 8, "zones": 2}})");
}
