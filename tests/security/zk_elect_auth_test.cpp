// zk-elect --digest-file: the tool authenticates like the agent's zookeeper.auth, so its election
// tree is closed to strangers, and electors with the same credentials still hand over.
#include <gtest/gtest.h>
#include <zookeeper/zookeeper.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using zktest::ChildProcess;

class ZkElectAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "zk.digest") << "elector:pa55-7f3a\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ChildProcess> elect(const std::string& instance, const std::string& digestFile) {
    std::vector<std::string> args{"--zk",
                                  zktest::sharedZooKeeper().connectString(),
                                  "--root",
                                  root_,
                                  "--instance-id",
                                  instance,
                                  "--accounts",
                                  "acct",
                                  "--session-timeout-ms",
                                  "1500"};
    if (!digestFile.empty()) args.insert(args.end(), {"--digest-file", digestFile});
    return std::make_unique<ChildProcess>(std::string(ZKAGENT_BIN_DIR) + "/zk-elect", args);
  }

  std::string root_ = zktest::uniqueTestRoot();
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("zk-elect-auth-" + std::to_string(::getpid()));
};

TEST_F(ZkElectAuth, AStrangerCannotRemoveActiveAndElectorsWithTheDigestStillHandOver) {
  const auto digest = (dir_ / "zk.digest").string();
  auto a = elect("host-a", digest);
  a->waitForLine("LEADER acct", 20s);
  auto b = elect("host-b", digest);
  b->waitForLine("READY", 20s);

  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t* stranger = zookeeper_init(zktest::sharedZooKeeper().connectString().c_str(), nullptr,
                                       10000, nullptr, nullptr, 0);
  ASSERT_TRUE(zktest::eventually([&] { return zoo_state(stranger) == ZOO_CONNECTED_STATE; }, 10s));
  const std::string active = root_ + "/acct/active";
  EXPECT_EQ(zoo_delete(stranger, active.c_str(), -1), ZNOAUTH);
  EXPECT_EQ(zoo_set(stranger, active.c_str(), "{}", 2, -1), ZNOAUTH);
  zookeeper_close(stranger);

  a->signal(SIGTERM);
  EXPECT_NE(b->waitForLine("LEADER acct", 10s).find("LEADER acct"), std::string::npos);
  EXPECT_TRUE(a->wait(10s).exitedWith(0)) << a->transcript();
  EXPECT_EQ(a->stderrText().find("pa55-7f3a"), std::string::npos);
}

TEST_F(ZkElectAuth, AnUnreadableOrMalformedDigestFileIsAUsageErrorThatHidesTheSecret) {
  std::ofstream(dir_ / "bad.digest") << "no-colon-pa55\n";
  for (const auto& [file, message] : std::vector<std::pair<std::string, std::string>>{
           {(dir_ / "missing").string(), "cannot read digest file"},
           {(dir_ / "bad.digest").string(), "must hold user:password on its first line"}}) {
    auto p = elect("host-a", file);
    EXPECT_TRUE(p->wait(10s).exitedWith(2)) << p->transcript();
    EXPECT_NE(p->stderrText().find(message), std::string::npos) << p->stderrText();
    EXPECT_EQ(p->stderrText().find("pa55"), std::string::npos) << p->stderrText();
  }
}

}  // namespace
