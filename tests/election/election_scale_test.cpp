// Scale on one session, in its own binary so ctest runs it alone (RUN_SERIAL): it keeps both
// cores busy for a minute and would slow the timing-sensitive tests running beside it.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "contender.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_server.hpp"

namespace zktest {
namespace {

using HardeningTest = SharedZooKeeperTest;

// ZOOKEEPER-706: many watches re-set on reconnect. With 10000 accounts, repeated reconnects of
// the standby keep the server's watch count flat and every watch working.
TEST_F(HardeningTest, TenThousandAccountsKeepEveryWatchAcrossReconnectsWithoutLeaking) {
  constexpr int kAccounts = 10000;
  auto a = std::make_unique<Contender>(hosts(), root, "host-a", 20000ms);
  TcpProxy proxy(sharedZooKeeper().port());
  Contender b(proxy.connectString(), root, "host-b", 20000ms);
  for (int i = 0; i < kAccounts; ++i) a->join("acct-" + std::to_string(i));
  ASSERT_TRUE(eventually([&] { return a->leadingCount() == kAccounts; }, 120s))
      << a->leadingCount();
  for (int i = 0; i < kAccounts; ++i) b.join("acct-" + std::to_string(i));
  auto standbyReady = [&] {
    int waiting = 0;
    for (auto& s : b.group().status()) waiting += s.role == el::Role::Waiting;
    return waiting == kAccounts;
  };
  auto roles = [&] {
    std::map<std::string, int> count;
    for (auto& s : b.group().status())
      ++count[std::string(el::toString(s.role)) + "/" + s.lastReason];
    std::string out;
    for (auto& [k, v] : count) out += k + "=" + std::to_string(v) + " ";
    return out;
  };
  ASSERT_TRUE(eventually(standbyReady, 120s));
  auto watchCount = [&] {
    // wchs: "... connections watching N paths\nTotal watches:M"
    std::smatch m;
    std::string text = sharedZooKeeper().fourLetter("wchs");
    return std::regex_search(text, m, std::regex("Total watches:(\\d+)")) ? std::stol(m[1]) : -1L;
  };
  const int64_t session = b.group().sessionId();
  // The leader watches `active`; the standby its predecessor (right behind the head it reads
  // `active` without watching it), and the leader's session mark once. Nobody watches their own
  // member node.
  const long expectedWatches = 2L * kAccounts + 1;
  ASSERT_TRUE(eventually([&] { return watchCount() == expectedWatches; }, 30s)) << watchCount();
  for (int round = 0; round < 3; ++round) {
    proxy.setMode(TcpProxy::Mode::close);
    // Every account has seen the disconnect before the link comes back.
    ASSERT_TRUE(eventually(
        [&] {
          for (auto& s : b.group().status()) {
            if (s.role != el::Role::Suspend) return false;
          }
          return true;
        },
        30s))
        << roles();
    proxy.setMode(TcpProxy::Mode::pass);
    ASSERT_TRUE(eventually(standbyReady, 60s)) << "round " << round << ": " << roles();
    ASSERT_TRUE(eventually([&] { return watchCount() == expectedWatches; }, 30s))
        << "round " << round << ": watches " << watchCount() << ", expected " << expectedWatches;
  }
  EXPECT_EQ(b.group().sessionId(), session);
  a->stop();
  ASSERT_TRUE(eventually([&] { return b.leadingCount() == kAccounts; }, 60s)) << b.leadingCount();
}

}  // namespace
}  // namespace zktest
