// The in-memory ZooKeeper behaves as the election relies on ZooKeeper to behave; its fault hooks do
// what they say. The Elector's unit tests are only as good as this.
#include "fake_keeper.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

namespace zkagent::election::fake {
namespace {

class FakeKeeperTest : public ::testing::Test {
 protected:
  FakeKeeperTest() {
    client.connect();
    other.connect();
  }
  // Runs everything posted so far, and what that posts in turn.
  void drain() {
    io.restart();
    io.poll();
  }

  FakeZooKeeper zk;
  boost::asio::io_context io;
  FakeKeeper client{zk, io};
  FakeKeeper other{zk, io};
  Executor ex = io.get_executor();
};

TEST_F(FakeKeeperTest, SequentialEphemeralNodesAreNamedByTheParentAndOwnedByTheSession) {
  ASSERT_EQ(zk.create("/q"), ZkError::Ok);
  std::vector<std::string> made;
  for (int i = 0; i < 2; ++i) {
    client.createOn(ex, "/q/m-", "", NodeKind::EphemeralSequential,
                    [&](ZkError err, std::string path) {
                      EXPECT_EQ(err, ZkError::Ok);
                      made.push_back(path);
                    });
  }
  drain();
  EXPECT_EQ(made, (std::vector<std::string>{"/q/m-0000000000", "/q/m-0000000001"}));
  EXPECT_EQ(zk.find(made[0])->ephemeralOwner, client.sessionId());
  // A delete counts too: the next sequence number is never given again.
  ASSERT_EQ(zk.remove(made[1]), ZkError::Ok);
  client.createOn(ex, "/q/m-", "", NodeKind::EphemeralSequential,
                  [&](ZkError, std::string path) { made.push_back(path); });
  drain();
  EXPECT_EQ(made.back(), "/q/m-0000000003");
}

TEST_F(FakeKeeperTest, VersionsAreCheckedAndAMultiIsAllOrNothing) {
  ASSERT_EQ(zk.create("/a", "x"), ZkError::Ok);
  ASSERT_EQ(zk.set("/a", "y"), ZkError::Ok);
  EXPECT_EQ(zk.find("/a")->version, 1);
  ZkError err = ZkError::Ok;
  std::vector<MultiResult> results;
  client.multiOn(ex,
                 {{MultiOp::Kind::Create, "/b", "", -1},
                  {MultiOp::Kind::Check, "/a", "", 0},
                  {MultiOp::Kind::Remove, "/a", "", -1}},
                 [&](ZkError e, std::vector<MultiResult> r) {
                   err = e;
                   results = std::move(r);
                 });
  drain();
  EXPECT_EQ(err, ZkError::BadVersion);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_FALSE(results[0].failure);
  EXPECT_EQ(results[1].failure, ZkError::BadVersion);
  EXPECT_EQ(zk.find("/b"), nullptr) << "the create before the failed check was rolled back";
  EXPECT_NE(zk.find("/a"), nullptr);
}

TEST_F(FakeKeeperTest, AWatchFiresOnceAndBeforeTheReplyOfTheChangeThatFiredIt) {
  ASSERT_EQ(zk.create("/a"), ZkError::Ok);
  std::vector<std::string> seen;
  other.existsOn(
      ex, "/a", nullptr, [&] { seen.push_back("watch"); }, [](ZkError, std::optional<NodeStat>) {});
  drain();
  other.removeOn(ex, "/a", -1, [&](ZkError err) {
    EXPECT_EQ(err, ZkError::Ok);
    seen.push_back("reply");
  });
  drain();
  ASSERT_EQ(zk.create("/a"), ZkError::Ok);
  drain();
  EXPECT_EQ(seen, (std::vector<std::string>{"watch", "reply"}));
}

TEST_F(FakeKeeperTest, ADroppedReplyStillAppliesTheOperation) {
  ASSERT_EQ(zk.create("/q"), ZkError::Ok);
  client.dropNextReply(FakeKeeper::Op::Create, "/q/");
  ZkError err = ZkError::Ok;
  client.createOn(ex, "/q/m-", "", NodeKind::EphemeralSequential,
                  [&](ZkError e, std::string) { err = e; });
  drain();
  EXPECT_EQ(err, ZkError::ConnectionLoss);
  EXPECT_EQ(zk.children("/q"), (std::vector<std::string>{"m-0000000000"}));
}

TEST_F(FakeKeeperTest, ALostLinkDropsWatchesAndRefusesUntilTheSameSessionIsBack) {
  ASSERT_EQ(zk.create("/a"), ZkError::Ok);
  client.existsOn(
      ex, "/a", nullptr, [] {}, [](ZkError, std::optional<NodeStat>) {});
  const int64_t session = client.sessionId();
  const uint64_t link = client.linkEpoch();
  client.loseLink();
  EXPECT_FALSE(client.usable());
  EXPECT_GT(client.linkEpoch(), link);
  EXPECT_EQ(client.watchCount(), 0u);
  ZkError err = ZkError::Ok;
  client.removeOn(ex, "/a", -1, [&](ZkError e) { err = e; });
  drain();
  EXPECT_EQ(err, ZkError::ConnectionLoss);
  EXPECT_NE(zk.find("/a"), nullptr);
  client.reconnect();
  EXPECT_TRUE(client.usable());
  EXPECT_EQ(client.sessionId(), session);
}

TEST_F(FakeKeeperTest, ExpiryRemovesTheSessionsEphemeralNodesAndOthersHearIt) {
  ASSERT_EQ(zk.create("/q"), ZkError::Ok);
  client.createOn(ex, "/q/e", "", NodeKind::Ephemeral, [](ZkError, std::string) {});
  bool heard = false;
  other.childrenOn(
      ex, "/q", nullptr, [&] { heard = true; }, [](ZkError, std::vector<std::string>) {});
  drain();
  std::vector<SessionState> states;
  client.onEvent = [&](const SessionEvent& e) { states.push_back(e.state); };
  client.expire();
  drain();
  EXPECT_EQ(zk.find("/q/e"), nullptr);
  EXPECT_TRUE(heard);
  EXPECT_EQ(client.sessionId(), 0);
  client.connect();
  EXPECT_EQ(states, (std::vector<SessionState>{SessionState::Expired, SessionState::Connected}));
}

TEST_F(FakeKeeperTest, HeldDeliveriesGoOutInTheOrderReleased) {
  ASSERT_EQ(zk.create("/a"), ZkError::Ok);
  std::vector<std::string> seen;
  client.existsOn(
      ex, "/a", nullptr, [&] { seen.push_back("watch"); }, [](ZkError, std::optional<NodeStat>) {});
  drain();
  client.hold();
  client.removeOn(ex, "/a", -1, [&](ZkError) { seen.push_back("reply"); });
  drain();
  EXPECT_TRUE(seen.empty());
  ASSERT_EQ(client.held(), (std::vector<std::string>{"watch deleted /a", "reply remove /a"}));
  client.release(1);  // the reply first: the order ZooKeeper never uses
  drain();
  client.releaseAll();
  drain();
  EXPECT_EQ(seen, (std::vector<std::string>{"reply", "watch"}));
}

}  // namespace
}  // namespace zkagent::election::fake
