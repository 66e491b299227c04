#include <gtest/gtest.h>

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

}  // namespace

TEST(GatewayConfig, FlagsFillTheConfig) {
  auto result =
      parse({"--listen", "0.0.0.0:9000", "--data-dir", "/var/lib/gw", "--zk", "zk1:2181,zk2:2181",
             "--root", "/accounts", "--zk-untrusted", "refuse", "--commit-mode", "per_operation"});
  ASSERT_TRUE(result.config) << result.message;
  const auto& config = *result.config;
  EXPECT_EQ(config.listenAddress, "0.0.0.0");
  EXPECT_EQ(config.listenPort, 9000);
  EXPECT_EQ(config.dataDir, "/var/lib/gw");
  EXPECT_EQ(config.zkHosts, "zk1:2181,zk2:2181");
  EXPECT_EQ(config.zkRoot, "/accounts");
  EXPECT_EQ(config.untrusted, UntrustedPolicy::Refuse);
  EXPECT_EQ(config.commitMode, zkagent::fencing::CommitMode::per_operation);
}

TEST(GatewayConfig, FileIsReadFirstThenFlagsAndEnvironmentOverrideIt) {
  zkagent::fencing::testing::TempDir dir;
  auto file = dir.path() / "gateway.json";
  std::ofstream(file) << R"({"listen":"127.0.0.1:7000","dataDir":"/from/file","token":"file-token",
    "zookeeper":{"hosts":"zk:2181","sessionTimeoutMs":4000,"untrusted":"refuse"},
    "accounts":["a","b"],"handlerThreads":8,"log":{"level":"debug","format":"json"}})";
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
  EXPECT_NE(errorOf({"--data-dir", "d", "--frobnicate", "1"}).find("--frobnicate: unknown option"),
            std::string::npos);
  EXPECT_NE(errorOf({"--data-dir"}).find("--data-dir: needs a value"), std::string::npos);
  EXPECT_NE(errorOf({"--config", "/nonexistent/gw.json"}).find("cannot read"), std::string::npos);
}

TEST(GatewayConfig, FileErrorsNameTheJsonField) {
  auto error = [](std::string_view json) {
    try {
      parseConfigJson(json);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"zookeeper":{"sessionTimeoutMs":10}})").find("zookeeper.sessionTimeoutMs"),
            std::string::npos);
  EXPECT_NE(error(R"({"accounts":["ok","b/d"]})").find("accounts[1]"), std::string::npos);
  EXPECT_NE(error(R"({"tokn":"x"})").find("tokn: unknown field"), std::string::npos);
  EXPECT_NE(error(R"({"log":{"level":"loud"}})").find("log.level"), std::string::npos);
  EXPECT_NE(error(R"({"handlerThreads":"many"})").find("handlerThreads"), std::string::npos);
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
