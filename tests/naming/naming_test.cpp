#include "zkagent/naming.hpp"

#include <gtest/gtest.h>

#include "zkagent/cluster_node.hpp"

namespace zkagent::naming {
namespace {

constexpr std::string_view kRule = "must match [A-Za-z0-9_.-]{1,128}, not . or ..";

TEST(AccountId, AcceptsOnePathSegmentOfTheAllowedAlphabet) {
  for (const std::string& good : {std::string("a"), std::string("wxid_abc-123.X"),
                                  std::string("..."), std::string(128, 'x')}) {
    EXPECT_EQ(accountIdError(good), std::nullopt) << good;
  }
}

TEST(AccountId, RefusesWhatCouldEscapeOrBreakAZnodePathWithOneText) {
  for (const std::string& bad :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"), std::string("/a"),
        std::string("a b"), std::string("a\nb"), std::string("caf\xc3\xa9"), std::string("a:b"),
        std::string("a@b"), std::string(129, 'x'), std::string("a\0b", 3)}) {
    EXPECT_EQ(accountIdError(bad), std::string(kRule)) << bad;
  }
}

TEST(InstanceId, NamesAHealthNodeSoFollowsTheSameRule) {
  EXPECT_EQ(instanceIdError("host-a.1"), std::nullopt);
  EXPECT_EQ(instanceIdError("host a"), std::string(kRule));
  EXPECT_EQ(instanceIdError("a/b"), std::string(kRule));
  EXPECT_EQ(instanceIdError(""), std::string(kRule));
}

TEST(PrintableId, TheGatewaysLooserRuleForIdsItNeverPutsInAPath) {
  for (const std::string& good :
       {std::string("op-1"), std::string("host:a/b@c"), std::string(128, '~')}) {
    EXPECT_EQ(printableIdError(good), std::nullopt) << good;
  }
  for (const std::string& bad : {std::string(), std::string("a b"), std::string("a\nb"),
                                 std::string("caf\xc3\xa9"), std::string(129, 'o')}) {
    EXPECT_EQ(printableIdError(bad),
              std::string("must be 1 to 128 printable ASCII characters without spaces"))
        << bad;
  }
}

TEST(RootPath, IsAnAbsolutePathWithoutEmptySegments) {
  for (std::string_view good : {"/wx-accounts", "/a/b", "/zkagent/agents"}) {
    EXPECT_EQ(rootPathError(good), std::nullopt) << good;
  }
  for (std::string_view bad : {"", "/", "relative", "/a/", "/a//b", "//a"}) {
    auto error = rootPathError(bad);
    ASSERT_TRUE(error) << bad;
    EXPECT_NE(error->find("absolute znode path"), std::string::npos) << *error;
  }
}

TEST(Paths, TheLayoutUnderTheRoot) {
  EXPECT_EQ(accountPath("/wx", "acct-1"), "/wx/acct-1");
  EXPECT_EQ(membersPath("/wx", "acct-1"), "/wx/acct-1/members");
  EXPECT_EQ(memberPath("/wx", "acct-1", "m-0000000007"), "/wx/acct-1/members/m-0000000007");
  EXPECT_EQ(activePath("/wx", "acct-1"), "/wx/acct-1/active");
  EXPECT_EQ(handoverPath("/wx", "acct-1"), "/wx/acct-1/handover");
  EXPECT_EQ(sessionMarksPath("/wx"), "/wx/@sessions");
  EXPECT_EQ(healthPath("/zkagent/agents", "host-a"), "/zkagent/agents/host-a");
}

TEST(Paths, TheAccountOfAnActiveNode) {
  EXPECT_EQ(accountOfActivePath("/wx", activePath("/wx", "acct-1")), "acct-1");
  EXPECT_EQ(accountOfActivePath("/wx", "/wx/active"), std::nullopt);
  EXPECT_EQ(accountOfActivePath("/wx", "/wxy/acct-1/active"), std::nullopt);
  EXPECT_EQ(accountOfActivePath("/wx", "/wx/acct-1/members"), std::nullopt);
  EXPECT_EQ(accountOfActivePath("/wx", "/wx/a/b/active"), std::nullopt) << "two segments";
}

HostPort parsed(std::string_view text, PortZero zero = PortZero::Allowed) {
  HostPort address;
  const auto error = hostPortError(text, address, zero);
  EXPECT_EQ(error, std::nullopt) << text;
  return address;
}

std::string refusal(std::string_view text, PortZero zero = PortZero::Allowed) {
  HostPort address;
  return hostPortError(text, address, zero).value_or("");
}

TEST(HostPort, NamesAddressesAndBracketedIpv6) {
  EXPECT_EQ(parsed("127.0.0.1:8470"), (HostPort{"127.0.0.1", 8470}));
  EXPECT_EQ(parsed("zk1.example:2181"), (HostPort{"zk1.example", 2181}));
  EXPECT_EQ(parsed("[::1]:8470"), (HostPort{"::1", 8470}));
  EXPECT_EQ(parsed("[fe80::1]:0"), (HostPort{"fe80::1", 0}));
}

TEST(HostPort, RefusesWhatIsNotHostColonPort) {
  for (std::string_view bad : {"localhost", ":8470", "::1:8470", "[::1]8470", "[::1", "[]:80"}) {
    EXPECT_NE(refusal(bad).find("expected HOST:PORT"), std::string::npos) << bad;
  }
  EXPECT_EQ(refusal("h:70000"), "port must be a number from 0 to 65535, got '70000'");
  EXPECT_EQ(refusal("h:"), "port must be a number from 0 to 65535, got ''");
  EXPECT_EQ(refusal("h:12x"), "port must be a number from 0 to 65535, got '12x'");
  EXPECT_EQ(refusal("h:-1"), "port must be a number from 0 to 65535, got '-1'");
  EXPECT_EQ(refusal("h:0", PortZero::Refused), "port must be a number from 1 to 65535, got '0'");
}

TEST(HostPort, PrintsIpv6InBracketsAgain) {
  EXPECT_EQ(toString(HostPort{"::1", 8470}), "[::1]:8470");
  EXPECT_EQ(toString(HostPort{"127.0.0.1", 80}), "127.0.0.1:80");
  EXPECT_EQ(parsed(toString(HostPort{"fe80::1", 9})), (HostPort{"fe80::1", 9}));
}

TEST(HostPort, LoopbackHosts) {
  for (std::string_view host : {"localhost", "::1", "127.0.0.1", "127.1.2.3"}) {
    EXPECT_TRUE(isLoopbackHost(host)) << host;
  }
  for (std::string_view host : {"0.0.0.0", "::", "10.0.0.1", "[::1]", "localhost.evil"}) {
    EXPECT_FALSE(isLoopbackHost(host)) << host;
  }
}

TEST(HostPort, ThePortAProcessPrints) {
  EXPECT_EQ(trailingPort("LISTENING 127.0.0.1:8470"), 8470);
  EXPECT_EQ(trailingPort("DEVICES ws://127.0.0.1:9000"), 9000);
  EXPECT_EQ(trailingPort("LISTENING"), std::nullopt);
  EXPECT_EQ(trailingPort("LISTENING h:x"), std::nullopt);
}

// The published FNV-1a 64 vectors (hash of "" is the offset basis; "a", "foobar"), reduced by
// the shard count: another implementation of docs/gateway-cluster.md's rule gets these numbers.
TEST(Shards, AnAccountsShardIsFnv1a64OfItsIdModuloTheCount) {
  EXPECT_EQ(shardOf("", 7), 0xcbf29ce484222325ULL % 7);
  EXPECT_EQ(shardOf("a", 1000), 996u);
  EXPECT_EQ(shardOf("foobar", 4096), 2024u);
  EXPECT_EQ(shardOf("anything", 1), 0u);
  static_assert(shardOf("foobar", kMaxShards) == 2024u);
}

TEST(Shards, ShardIdsArePaddedToFourDigitsAndAreAccountIds) {
  EXPECT_EQ(shardId(0), "shard-0000");
  EXPECT_EQ(shardId(7), "shard-0007");
  EXPECT_EQ(shardId(kMaxShards - 1), "shard-4095");
  EXPECT_EQ(accountIdError(shardId(kMaxShards - 1)), std::nullopt);
  EXPECT_EQ(gatewayShardsRoot("/wx-accounts"), "/wx-accounts/@gateway-shards");
  EXPECT_EQ(gatewayClusterPath("/wx-accounts"), "/wx-accounts/@gateway-cluster");
  for (const std::uint32_t index : {0u, 7u, 1234u, kMaxShards - 1}) {
    EXPECT_EQ(shardIndex(shardId(index)), index);
  }
  for (const char* other : {"", "shard-", "shard-7", "shard-00007", "shard-4096", "shard-12a4",
                            "shard--001", "Shard-0007", "acc-0007", "shard-99999999999"}) {
    EXPECT_EQ(shardIndex(other), std::nullopt) << other;
  }
  // '@' keeps them apart from accounts: nothing under the root mistakes them for one.
  EXPECT_NE(accountIdError("@gateway-shards"), std::nullopt);
}

// The cluster node's data and a 421's `shards` field: what the first gateway writes is what every
// reader gets back; anything else (another type, 0, above the limit, not JSON) names no count.
TEST(Shards, TheClusterNodeCarriesACountFromOneToTheLimitAndNothingElse) {
  EXPECT_EQ(clusterNodeData(64), R"({"shards":64})");
  for (const std::uint32_t count : {1u, 64u, kMaxShards}) {
    EXPECT_EQ(parseClusterNode(clusterNodeData(count)), count);
  }
  for (const char* bad : {"", "not json", "[]", "{}", R"({"shards":0})", R"({"shards":-3})",
                          R"({"shards":"8"})", R"({"shards":8.5})", R"({"shards":4097})",
                          R"({"shards":18446744073709551615})", R"({"count":8})"}) {
    EXPECT_EQ(parseClusterNode(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(shardCountIn(nlohmann::json{{"error", "x"}, {"shards", 16}, {"owner", "u"}}), 16u);
  EXPECT_EQ(shardCountIn(nlohmann::json{{"shards", -16}}), std::nullopt);
}

}  // namespace
}  // namespace zkagent::naming
