// A stopping group's hand-over on the in-memory ZooKeeper: batched multis, the per-account retry of
// a batch that failed on a node, one close after everything answered, the deadline.
#include "stop_handover.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>

#include "fake_keeper.hpp"

namespace zkagent::election::fake {
namespace {

using detail::StopHandover;
using namespace std::chrono_literals;

class StopHandoverTest : public ::testing::Test {
 protected:
  StopHandoverTest() {
    keeper->connect();
    EXPECT_EQ(zk.create("/r"), ZkError::Ok);
  }
  std::shared_ptr<StopHandover> start(size_t electors, std::chrono::milliseconds deadline = 2s) {
    return StopHandover::start(io, keeper, electors, deadline, [this] { ++closes; });
  }
  // Account i's node and the operation that releases it.
  std::vector<MultiOp> account(int i) {
    const std::string path = "/r/a" + std::to_string(i);
    EXPECT_EQ(zk.create(path), ZkError::Ok);
    return {{MultiOp::Kind::Remove, path, "", -1}};
  }
  size_t multisHeld() const {
    size_t n = 0;
    for (const auto& what : keeper->held()) n += what.starts_with("reply multi") ? 1 : 0;
    return n;
  }
  void drain() {
    io.restart();
    io.poll();
  }

  FakeZooKeeper zk;
  boost::asio::io_context io;
  std::shared_ptr<FakeKeeper> keeper = std::make_shared<FakeKeeper>(zk, io);
  int closes = 0;
};

TEST_F(StopHandoverTest, TheAccountsGoInOneMultiAndTheSessionClosesOnceItIsAnswered) {
  auto handover = start(3);
  keeper->hold();
  for (int i = 0; i < 3; ++i) handover->collect(account(i));
  drain();
  EXPECT_EQ(multisHeld(), 1u);
  EXPECT_EQ(closes, 0) << "not before the hand-over is answered";
  keeper->releaseAll();
  drain();
  EXPECT_EQ(closes, 1);
  EXPECT_TRUE(zk.children("/r").empty());
}

TEST_F(StopHandoverTest, AFullBatchGoesOutBeforeTheLastElectorAnswers) {
  constexpr int kAccounts = 1000;  // about 40 bytes each: two full 16 KiB multis and a rest
  auto handover = start(kAccounts + 1);
  keeper->hold();
  for (int i = 0; i < kAccounts; ++i) handover->collect(account(i));
  drain();
  const size_t early = multisHeld();
  EXPECT_GE(early, 2u) << "full batches go out while an elector has not answered";
  handover->collect({});
  EXPECT_EQ(multisHeld(), early + 1) << "the rest goes with the last answer";
  keeper->releaseAll();
  drain();
  EXPECT_EQ(closes, 1);
  EXPECT_TRUE(zk.children("/r").empty());
}

TEST_F(StopHandoverTest, ABatchThatFailsOnOneAccountIsSentAgainAccountByAccount) {
  auto handover = start(3);
  std::vector<std::vector<MultiOp>> ops{account(0), account(1), account(2)};
  ASSERT_EQ(zk.remove("/r/a1"), ZkError::Ok);  // gone meanwhile: the batch fails on it
  for (auto& o : ops) handover->collect(std::move(o));
  drain();
  EXPECT_TRUE(zk.children("/r").empty()) << "the others are handed over all the same";
  EXPECT_EQ(closes, 1);
}

TEST_F(StopHandoverTest, ABatchLostWithTheLinkIsNotSplitAndTheSessionStillCloses) {
  auto handover = start(2);
  std::vector<std::vector<MultiOp>> ops{account(0), account(1)};
  keeper->loseLink();
  keeper->hold();
  for (auto& o : ops) handover->collect(std::move(o));
  drain();
  ASSERT_EQ(multisHeld(), 1u);
  keeper->release(0);
  drain();
  EXPECT_TRUE(keeper->held().empty()) << "nothing sent again on a link that is down";
  EXPECT_EQ(closes, 1);
  EXPECT_EQ(zk.children("/r").size(), 2u) << "the close frees them, not a retry";
}

TEST_F(StopHandoverTest, TheDeadlineClosesTheSessionWhenZooKeeperNeverAnswers) {
  auto handover = start(1, 50ms);
  keeper->hold();
  handover->collect(account(0));
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (closes == 0 && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_for(10ms);
  }
  EXPECT_EQ(closes, 1);
  keeper->releaseAll();  // the answer comes after all: nothing closes twice
  drain();
  EXPECT_EQ(closes, 1);
}

TEST_F(StopHandoverTest, ElectorsThatLedNothingSendNothing) {
  auto handover = start(2);
  keeper->hold();
  handover->collect({});
  handover->collect({});
  drain();
  EXPECT_TRUE(keeper->held().empty());
  EXPECT_EQ(closes, 1);
  start(0);
  drain();
  EXPECT_EQ(closes, 2) << "a group with no account closes at once";
}

}  // namespace
}  // namespace zkagent::election::fake
