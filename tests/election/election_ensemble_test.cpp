// Leadership over a 3-server ensemble survives the loss of the server the session is on.
#include <gtest/gtest.h>

#include "contender.hpp"
#include "zktest/deadline.hpp"
#include "zktest/zookeeper_ensemble.hpp"

namespace zktest {
namespace {

TEST(ElectionEnsemble, KillingTheConnectedServerMovesTheSessionAndKeepsLeadership) {
  ZooKeeperEnsemble ensemble;
  Contender a(ensemble.connectString(), "/ensemble-test", "host-a", 6000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 20s));
  const int64_t token = a.check("acct").token;
  const int64_t session = a.group().sessionId();
  // Find the server holding our connection (4lw `cons` lists the session id in hex).
  char hex[32];
  std::snprintf(hex, sizeof hex, "sid=0x%llx", static_cast<unsigned long long>(session));
  int connected = -1;
  for (int i = 0; i < 3; ++i) {
    if (ensemble.server(i).fourLetter("cons").find(hex) != std::string::npos) connected = i;
  }
  ASSERT_GE(connected, 0) << "session " << hex << " not found on any server";
  ensemble.server(connected).kill9();
  ASSERT_TRUE(eventually(
      [&] { return a.group().sessionState() == el::SessionState::Connected && a.leads("acct"); },
      20s));
  EXPECT_EQ(a.group().sessionId(), session) << "the session moved, it did not expire";
  EXPECT_EQ(a.check("acct").token, token);
}

}  // namespace
}  // namespace zktest
