// The agent's balance config fields (the plan itself: tests/balance/).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "zkagent/agent/config.hpp"

namespace {

using nlohmann::json;

json configWith(const json& balance) {
  return {{"instance_id", "host-a"},
          {"zookeeper", {{"hosts", "127.0.0.1:2181"}}},
          {"accounts", {"acct-1", "acct-2"}},
          {"gateway", {{"url", "http://127.0.0.1:8480"}}},
          {"balance", balance}};
}

std::string rejectedField(const json& balance) {
  try {
    zkagent::agent::parseConfig(configWith(balance).dump());
    return "";
  } catch (const zkagent::agent::ConfigError& e) {
    return e.field();
  }
}

TEST(BalanceConfig, DefaultsAndEveryFieldRead) {
  const auto defaults = zkagent::agent::parseConfig(configWith(json::object()).dump()).balance;
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.settle.count(), 15000);
  EXPECT_EQ(defaults.maxMovesInFlight, 16u);
  EXPECT_DOUBLE_EQ(defaults.tolerance, 0.1);
  const auto b = zkagent::agent::parseConfig(configWith({{"enabled", false},
                                                         {"settle_ms", 500},
                                                         {"max_moves_in_flight", 4},
                                                         {"tolerance", 0.2},
                                                         {"preferred", {{"acct-2", "host-b"}}}})
                                                 .dump())
                     .balance;
  EXPECT_FALSE(b.enabled);
  EXPECT_EQ(b.settle.count(), 500);
  EXPECT_EQ(b.maxMovesInFlight, 4u);
  EXPECT_DOUBLE_EQ(b.tolerance, 0.2);
  EXPECT_EQ(b.preferred.at("acct-2"), "host-b");
}

TEST(BalanceConfig, BadFieldsAreRejectedByName) {
  EXPECT_EQ(rejectedField({{"enabled", "yes"}}), "balance.enabled");
  EXPECT_EQ(rejectedField({{"settle_ms", -1}}), "balance.settle_ms");
  EXPECT_EQ(rejectedField({{"max_moves_in_flight", 0}}), "balance.max_moves_in_flight");
  EXPECT_EQ(rejectedField({{"tolerance", 1.5}}), "balance.tolerance");
  EXPECT_EQ(rejectedField({{"preferred", {"acct-1"}}}), "balance.preferred");
  EXPECT_EQ(rejectedField({{"preferred", {{"acct-9", "host-b"}}}}), "balance.preferred.acct-9");
  EXPECT_EQ(rejectedField({{"preferred", {{"acct-1", ""}}}}), "balance.preferred.acct-1");
  EXPECT_EQ(rejectedField({{"settle", 5}}), "balance.settle");
}

}  // namespace
