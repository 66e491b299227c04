// Elections with ZooKeeper digest ACLs: the tree the agents create is theirs to change and the
// world's to read; they still elect, hand over and fail over.
#include <gtest/gtest.h>
#include <zookeeper/zookeeper.h>

#include "contender.hpp"
#include "zktest/deadline.hpp"

namespace zktest {
namespace {

constexpr const char* kDigest = "zkagent:s3cret-password";

// A ZooKeeper client without credentials, for what a stranger on the network could do.
class Stranger {
 public:
  explicit Stranger(const std::string& hosts) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh_ = zookeeper_init(hosts.c_str(), nullptr, 10000, nullptr, nullptr, 0);
    EXPECT_TRUE(eventually([&] { return zoo_state(zh_) == ZOO_CONNECTED_STATE; }, 10s));
  }
  ~Stranger() { zookeeper_close(zh_); }
  int remove(const std::string& path) { return zoo_delete(zh_, path.c_str(), -1); }
  int create(const std::string& path, const std::string& data) {
    return zoo_create(zh_, path.c_str(), data.data(), static_cast<int>(data.size()),
                      &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, nullptr, 0);
  }
  int set(const std::string& path, const std::string& data) {
    return zoo_set(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), -1);
  }
  int read(const std::string& path) {
    char buffer[1024];
    int length = sizeof buffer;
    return zoo_get(zh_, path.c_str(), 0, buffer, &length, nullptr);
  }

 private:
  zhandle_t* zh_ = nullptr;
};

using ElectionAclTest = SharedZooKeeperTest;

TEST_F(ElectionAclTest, AStrangerCanReadButNeitherDeleteNorOverwriteNorCreateActive) {
  Contender a(hosts(), root, "host-a", 1500ms, kDigest);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  Stranger stranger(hosts());
  const std::string active = root + "/acct/active";
  EXPECT_EQ(stranger.read(active), ZOK);
  EXPECT_EQ(stranger.remove(active), ZNOAUTH);
  EXPECT_EQ(stranger.set(active, R"({"seq":999,"instanceId":"mallory"})"), ZNOAUTH);
  EXPECT_EQ(stranger.create(root + "/acct/members/m-0000000099", "{}"), ZNOAUTH);
  EXPECT_TRUE(a.leads("acct"));

  // With nobody leading, the stranger cannot take `active` either.
  a.group().withdraw("acct");
  ASSERT_TRUE(eventually([&] { return stranger.read(active) == ZNONODE; }, 10s));
  EXPECT_EQ(stranger.create(active, R"({"seq":1,"instanceId":"mallory","sessionId":1})"), ZNOAUTH);
}

TEST_F(ElectionAclTest, AuthenticatedAgentsStillElectHandOverAndFailOver) {
  Contender a(hosts(), root, "host-a", 1500ms, kDigest);
  Contender b(hosts(), root, "host-b", 1500ms, kDigest);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));
  a.group().resign("acct");  // hand-over: deletes a's active, b (another session) takes it
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 10s)) << "no hand-over";
  b.abandon();  // b's session ends: a, the same credentials, deletes nothing of b's and leads
  EXPECT_TRUE(eventually([&] { return a.leads("acct"); }, 10s)) << "no fail-over";
}

TEST_F(ElectionAclTest, ALeaderWithoutCredentialsCannotTakeOverATreeCreatedWithThem) {
  Contender a(hosts(), root, "host-a", 1500ms, kDigest);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  Contender intruder(hosts(), root, "host-x");  // no digest: an open-ACL elector
  intruder.join("acct");
  a.stop();
  // The intruder cannot register under members, so it never leads the account.
  EXPECT_FALSE(eventually([&] { return intruder.leads("acct"); }, 3s));
}

}  // namespace
}  // namespace zktest
