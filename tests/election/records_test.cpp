#include <gtest/gtest.h>

#include "zkagent/election.hpp"

namespace zkagent::election {
namespace {

TEST(AccountId, AcceptsTheAllowedAlphabet) {
  EXPECT_FALSE(accountIdError("wxid_abc-123.X"));
  EXPECT_FALSE(accountIdError(std::string(128, 'a')));
  EXPECT_FALSE(accountIdError("..."));
}

TEST(AccountId, RejectsWhatCouldEscapeOrBreakAZnodePath) {
  for (std::string_view bad : {"", ".", "..", "a/b", "/a", "a b", "a\nb", "ä", "a:b", "a*"}) {
    auto error = accountIdError(bad);
    ASSERT_TRUE(error.has_value()) << "'" << bad << "' was accepted";
    EXPECT_FALSE(error->empty());
  }
  EXPECT_TRUE(accountIdError(std::string(129, 'a')));
  EXPECT_TRUE(accountIdError(std::string_view("a\0b", 3)));
}

TEST(Records, ActiveRoundTripsInSeed001Shape) {
  ActiveInfo a{7, "host-a-001", 1234567890, 1699999999000, "http://127.0.0.1:8080", ""};
  auto parsed = parseActive(toJson(a));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->seq, 7);
  EXPECT_EQ(parsed->instanceId, "host-a-001");
  EXPECT_EQ(parsed->sessionId, 1234567890);
  EXPECT_EQ(parsed->activeSince, 1699999999000);
  EXPECT_EQ(parsed->endpoint, "http://127.0.0.1:8080");
}

TEST(Records, ReadsTheSeedsOwnActiveRecordWithoutEndpoint) {
  auto parsed = parseActive(
      R"({"seq":1,"instanceId":"host-a-001","sessionId":1234567890,"activeSince":1699999999000})");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->seq, 1);
  EXPECT_EQ(parsed->endpoint, "");
}

TEST(Records, RejectsActiveRecordsMissingTheIdentityTriple) {
  EXPECT_FALSE(parseActive("not json"));
  EXPECT_FALSE(parseActive(R"({"seq":1,"instanceId":"a"})"));
  EXPECT_FALSE(parseActive(R"({"seq":"1","instanceId":"a","sessionId":2})"));
  EXPECT_FALSE(parseActive(R"([1,2,3])"));
}

TEST(Records, DeviceEndpointRoundTripsAndIsLeftOutWhenThereIsNone) {
  ActiveInfo a{7, "host-a", 1, 2, "http://127.0.0.1:8470", "ws://127.0.0.1:8471"};
  EXPECT_EQ(parseActive(toJson(a))->deviceEndpoint, "ws://127.0.0.1:8471");
  MemberInfo m{"host-b", 1, 2, "http://b", -1, "ws://b:8471"};
  EXPECT_EQ(parseMember(toJson(m))->deviceEndpoint, "ws://b:8471");
  EXPECT_EQ(toJson(ActiveInfo{7, "host-a", 1, 2, "http://a", ""}).find("deviceEndpoint"),
            std::string::npos);
}

TEST(Records, MemberRoundTrips) {
  MemberInfo m{"host-b", 4242, 1700000000000, "http://b", -1, ""};
  auto parsed = parseMember(toJson(m));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->instanceId, "host-b");
  EXPECT_EQ(parsed->pid, 4242);
  EXPECT_EQ(parsed->startTime, 1700000000000);
  EXPECT_FALSE(parseMember(R"({"pid":1})"));
}

}  // namespace
}  // namespace zkagent::election
