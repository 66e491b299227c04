// The gateway's presence lease store through its Router (no sockets): the model runs on a strand
// of a real io_context on the real clock, with a fake ZooKeeper view for the fencing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>

#include "fake_leaders.hpp"
#include "in_process_gateway.hpp"
#include "temp_dir.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

json entry(std::string_view account, std::string_view device, uint64_t token, uint64_t counter) {
  return {{"account", account}, {"device", device}, {"token", token}, {"counter", counter}};
}

json removal(std::string_view account, std::string_view device, uint64_t token, uint64_t counter,
             std::string_view reason = "close") {
  auto removed = entry(account, device, token, counter);
  removed["reason"] = reason;
  return removed;
}

constexpr int64_t kSession = 0x1000abc;

// Entries as vectors, not json: `json x = {oneEntry}` is an array of one under GCC and a copy of
// the entry under clang, which builds the sanitizer runs.
std::string batch(std::vector<json> renew, std::vector<json> remove = {},
                  std::string_view instance = "host-a", int64_t session = kSession) {
  return json{{"instanceId", instance},
              {"sessionId", session},
              {"renew", json(std::move(renew))},
              {"remove", json(std::move(remove))}}
      .dump();
}

class PresenceApi : public ::testing::Test {
 protected:
  void start(gateway::Config config = {}, bool zookeeper = false) {
    config.dataDir = dir_.path();
    gateway_.emplace(std::move(config), zookeeper ? &leaders_ : nullptr);
  }

  http::Response call(http::Method method, std::string path, std::string body = {}) {
    http::Request request;
    request.method = method;
    request.path = request.target = std::move(path);
    request.body = std::move(body);
    return gateway_->handle(std::move(request));
  }
  http::Response postLeases(std::string body) {
    return call(http::Method::Post, "/v1/presence/leases", std::move(body));
  }
  json leases(std::string body) {
    auto response = postLeases(std::move(body));
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }
  json presenceOf(const std::string& account) {
    auto response = call(http::Method::Get, "/v1/presence/" + account);
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }
  // The (token, counter) of every device shown for `account`, by device.
  std::map<std::string, std::pair<uint64_t, uint64_t>> epochs(const std::string& account) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> result;
    const json shown = presenceOf(account);
    for (const auto& device : shown["devices"]) {
      result[device["device"].get<std::string>()] = {device["epoch"]["token"],
                                                     device["epoch"]["counter"]};
    }
    return result;
  }
  std::string metrics() { return call(http::Method::Get, "/metrics").body; }
  // Whether /metrics has the sample `line` ("series value") as a whole line: "x 1" is neither
  // "x 10" nor "prefix_x 1".
  bool hasMetric(const std::string& line) {
    const auto space = line.rfind(' ');
    return zktest::metricSample(metrics(), line.substr(0, space)) ==
           std::stod(line.substr(space + 1));
  }

  fencing::testing::TempDir dir_;
  gateway::testing::FakeLeaders leaders_;
  std::optional<gateway::testing::InProcessGateway> gateway_;
};

using Epochs = std::map<std::string, std::pair<uint64_t, uint64_t>>;

// The raw lease view (every device, agent and epoch, no privacy) is for operators: with an
// operator token configured, the agents' token does not read it.
TEST_F(PresenceApi, OnlyTheOperatorTokenReadsTheRawLeaseView) {
  gateway::Config config;
  config.bearerToken = "agent-secret";
  config.operatorToken = "admin-secret";
  start(config);
  auto read = [&](std::string token) {
    http::Request request;
    request.path = request.target = "/v1/presence/acc";
    if (!token.empty()) request.headers.emplace_back("authorization", "Bearer " + token);
    return gateway_->handle(std::move(request)).status;
  };
  EXPECT_EQ(read("agent-secret"), 401);
  EXPECT_EQ(read(""), 401);
  EXPECT_EQ(read("admin-secret"), 200);
}

TEST_F(PresenceApi, RenewedLeaseIsShownWithItsAgentEpochAndAge) {
  start();
  EXPECT_EQ(leases(batch({entry("A", "phone", 7, 12), entry("A", "laptop", 7, 13)})),
            (json{{"renewed", 2},
                  {"removed", 0},
                  {"stale", 0},
                  {"fenced", json::array()},
                  {"refused", json::array()},
                  {"leaseTtlMs", 150000}}));
  auto shown = presenceOf("A");
  EXPECT_EQ(shown["account"], "A");
  EXPECT_EQ(shown["online"], true);
  ASSERT_EQ(shown["devices"].size(), 2u);
  const auto& laptop = shown["devices"][0];  // sorted by device
  EXPECT_EQ(laptop["device"], "laptop");
  EXPECT_EQ(laptop["agent"], "host-a");
  EXPECT_EQ(laptop["epoch"], (json{{"token", 7}, {"counter", 13}}));
  EXPECT_GE(laptop["age_ms"].get<int64_t>(), 0);
  EXPECT_LT(laptop["age_ms"].get<int64_t>(), 150000);
  EXPECT_EQ(
      presenceOf("B"),
      (json{
          {"account", "B"}, {"online", false}, {"devices", json::array()}, {"warming_up", true}}));
}

TEST_F(PresenceApi, AgeCountsFromTheLastRenewal) {
  start();
  leases(batch({entry("A", "phone", 7, 12)}));
  ASSERT_TRUE(zktest::eventually(
      [&] { return presenceOf("A")["devices"][0]["age_ms"].get<int64_t>() >= 50; }, 5s));
  // No wall-clock threshold: the age after the renewal cannot exceed the time since it was sent,
  // while an age counted from the first lease would (by the 50 ms waited above at least).
  const auto renewSent = std::chrono::steady_clock::now();
  leases(batch({entry("A", "phone", 8, 12)}, {}, "host-b"));
  const auto renewed = presenceOf("A")["devices"][0];
  const auto sinceRenewal = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - renewSent)
                                .count();
  EXPECT_LE(renewed["age_ms"].get<int64_t>(), sinceRenewal + 1) << "counted from the last renewal";
  EXPECT_EQ(renewed["agent"], "host-b") << "the lease follows the leader that renewed it last";
}

TEST_F(PresenceApi, RenewalWithAnOlderEpochIsStaleAndKeepsTheCurrentLease) {
  start();
  leases(batch({entry("A", "phone", 7, 12)}));
  auto older = leases(batch({entry("A", "phone", 7, 11), entry("A", "phone", 6, 99)}));
  EXPECT_EQ(older["stale"], 1);
  // An older leader's token does not even reach the store: the lease write raised the HWM to 7.
  EXPECT_EQ(older["fenced"], (json{{{"account", "A"}, {"token", 6}, {"superseded", true}}}));
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 12}}}));
  EXPECT_EQ(leases(batch({entry("A", "phone", 8, 1)}))["renewed"], 1) << "a new leader outranks";
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {8, 1}}}));
  EXPECT_TRUE(
      hasMetric(R"(zkagent_gateway_presence_lease_entries_total{op="renew",result="stale"} 1)"));
}

TEST_F(PresenceApi, RemoveWithTheCurrentEpochEndsTheLeaseAndAnOlderEpochIsStale) {
  start();
  leases(batch({entry("A", "phone", 7, 12)}));
  EXPECT_EQ(leases(batch({}, {removal("A", "phone", 7, 11)})), (json{{"renewed", 0},
                                                                     {"removed", 0},
                                                                     {"stale", 1},
                                                                     {"fenced", json::array()},
                                                                     {"refused", json::array()},
                                                                     {"leaseTtlMs", 150000}}));
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 12}}}));
  EXPECT_EQ(leases(batch({}, {removal("A", "phone", 7, 12, "ping_timeout")}))["removed"], 1);
  EXPECT_EQ(presenceOf("A")["online"], false);
  // A renewal of the removed epoch that was in flight across the removal does not bring it back.
  EXPECT_EQ(leases(batch({entry("A", "phone", 7, 12)}))["stale"], 1);
  EXPECT_EQ(presenceOf("A")["devices"], json::array());
  EXPECT_TRUE(hasMetric(
      R"(zkagent_gateway_presence_lease_entries_total{op="remove",result="accepted"} 1)"));
  EXPECT_TRUE(
      hasMetric(R"(zkagent_gateway_presence_lease_entries_total{op="remove",result="stale"} 1)"));
  EXPECT_TRUE(hasMetric("zkagent_gateway_presence_leases 0"));
}

TEST_F(PresenceApi, ZooKeeperModeFencesEveryTokenButTheActiveSeq) {
  start({}, true);
  leaders_.setActive("A", 8);  // B has no active node: nobody may write for it
  auto answer =
      leases(batch({entry("A", "old", 7, 1), entry("A", "new", 8, 1), entry("A", "x", 7, 2),
                    entry("A", "future", 9, 1), entry("B", "phone", 3, 1)},
                   {removal("A", "new", 7, 5)}));
  EXPECT_EQ(answer["renewed"], 1);
  EXPECT_EQ(answer["removed"], 0);
  EXPECT_EQ(answer["stale"], 0);
  // Superseded, final for the token: 7 under the active 8. Not: a token above the active seq
  // and an account with no active node, which may only be a view that has not caught up.
  EXPECT_EQ(answer["fenced"], (json{{{"account", "A"}, {"token", 7}, {"superseded", true}},
                                    {{"account", "A"}, {"token", 9}, {"superseded", false}},
                                    {{"account", "B"}, {"token", 3}, {"superseded", false}}}));
  auto refusal = [](int index, const char* list, const char* account, const char* reason) {
    return json{{"index", index}, {"list", list}, {"account", account}, {"reason", reason}};
  };
  EXPECT_EQ(answer["refused"], (json{refusal(0, "renew", "A", "not_current_leader"),
                                     refusal(2, "renew", "A", "not_current_leader"),
                                     refusal(3, "renew", "A", "not_current_leader"),
                                     refusal(4, "renew", "B", "not_current_leader"),
                                     refusal(0, "remove", "A", "not_current_leader")}));
  EXPECT_EQ(epochs("A"), (Epochs{{"new", {8, 1}}}));
  EXPECT_EQ(presenceOf("B")["online"], false);
  EXPECT_TRUE(
      hasMetric(R"(zkagent_gateway_presence_lease_entries_total{op="renew",result="fenced"} 4)"));
  EXPECT_TRUE(
      hasMetric(R"(zkagent_gateway_presence_lease_entries_total{op="remove",result="fenced"} 1)"));
}

TEST_F(PresenceApi, EachAccountIsLookedUpOncePerBatch) {
  start({}, true);
  leaders_.setActive("A", 8);
  leaders_.setActive("B", 3);
  std::vector<json> renew;
  for (int i = 0; i < 100; ++i) {
    const std::string device = std::to_string(i);  // ("d" + ... trips GCC 12's -Wrestrict)
    renew.push_back(entry(i % 2 ? "A" : "B", device, i % 2 ? 8 : 3, 1));
  }
  const int before = leaders_.lookups();
  EXPECT_EQ(leases(batch(renew))["renewed"], 100);
  EXPECT_EQ(leaders_.lookups() - before, 2);
}

// A lease batch decided on a cache that lags ZooKeeper (the account's cached seq below its HWM)
// fences nothing: that account's writes are decided again on a view read after a sync, once per
// account, and the other accounts' writes in the batch are decided once.
TEST_F(PresenceApi, LeaseWritesOnACachedViewBelowTheHwmAreDecidedAgainAfterASync) {
  start({}, true);
  leaders_.setActive("A", 8);
  leaders_.setActive("B", 3);
  ASSERT_EQ(leases(batch({entry("A", "phone", 8, 1), entry("B", "phone", 3, 1)}))["renewed"], 2);
  leaders_.setCached("A", 6);  // the cache lags; ZooKeeper's leader of A still holds 8
  auto answer = leases(
      batch({entry("A", "phone", 8, 2), entry("A", "tablet", 8, 1), entry("B", "phone", 3, 2)}));
  EXPECT_EQ(answer["renewed"], 3) << answer.dump();
  EXPECT_EQ(answer["fenced"], json::array());
  EXPECT_EQ(leaders_.confirmedLookups(), 1);
  EXPECT_FALSE(gateway_->validator().status("A")->fenced);
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {8, 2}}, {"tablet", {8, 1}}}));
  EXPECT_TRUE(hasMetric(R"(zkagent_gateway_view_reconfirmations_total{result="corrected"} 1)"));

  // When ZooKeeper itself says so, the account is fenced (on the confirmed view).
  leaders_.setActive("A", 6);
  answer = leases(batch({entry("A", "phone", 8, 3)}));
  EXPECT_EQ(answer["renewed"], 0);
  EXPECT_TRUE(gateway_->validator().status("A")->fenced);
  EXPECT_TRUE(hasMetric(R"(zkagent_gateway_view_reconfirmations_total{result="fenced"} 1)"));
}

TEST_F(PresenceApi, HwmModeFencesLeaseWritesByTheOperationsRuleAndTheyRaiseTheHwm) {
  start();
  auto op = json{{"account", "A"},        {"token", 9},   {"instanceId", "host-a"},
                 {"sessionId", kSession}, {"opId", "o1"}, {"payload", nullptr}};
  ASSERT_EQ(call(http::Method::Post, "/v1/ops", op.dump()).status, 200);  // HWM of A: 9
  auto answer = leases(batch({entry("A", "old", 8, 1), entry("A", "now", 9, 1),
                              entry("A", "next", 10, 1), entry("B", "phone", 1, 1)}));
  EXPECT_EQ(answer["renewed"], 3);
  EXPECT_EQ(answer["fenced"], (json{{{"account", "A"}, {"token", 8}, {"superseded", true}}}));
  EXPECT_EQ(answer["refused"],
            (json{{{"index", 0}, {"list", "renew"}, {"account", "A"}, {"reason", "stale_token"}}}));
  EXPECT_EQ(epochs("A"), (Epochs{{"next", {10, 1}}, {"now", {9, 1}}}));
  EXPECT_EQ(gateway_->validator().status("A")->hwm, 10u)
      << "an accepted lease write raises the HWM";
  EXPECT_EQ(gateway_->validator().status("B")->hwm, 1u);
  op["opId"] = "o2";
  EXPECT_EQ(call(http::Method::Post, "/v1/ops", op.dump()).status, 409)
      << "the lease write's raise fences operations under the older token too";
}

// Without ZooKeeper, agent B (valid credentials, not the leader) uses the leader's token: the
// HWM's holder is A's instance and session, so B can neither renew nor remove A's lease, while
// A's own writes still pass.
TEST_F(PresenceApi, HwmModeRefusesAnotherAgentUnderTheLeadersTokenAndKeepsTheLeadersLease) {
  start();
  ASSERT_EQ(leases(batch({entry("A", "phone", 7, 3)}))["renewed"], 1);
  for (const auto& [instance, session] :
       std::vector<std::pair<std::string, int64_t>>{{"host-b", kSession}, {"host-a", 99}}) {
    auto answer = leases(
        batch({entry("A", "ghost", 7, 9)}, {removal("A", "phone", 7, 3)}, instance, session));
    EXPECT_EQ(answer["renewed"], 0) << instance;
    EXPECT_EQ(answer["removed"], 0) << instance;
    EXPECT_EQ(answer["fenced"], (json{{{"account", "A"}, {"token", 7}, {"superseded", true}}}))
        << instance;
    ASSERT_EQ(answer["refused"].size(), 2u) << answer.dump();
    EXPECT_EQ(answer["refused"][1]["reason"], "not_current_leader");
  }
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 3}}}));
  EXPECT_TRUE(
      hasMetric(R"(zkagent_gateway_presence_lease_entries_total{op="remove",result="fenced"} 2)"));
  EXPECT_EQ(leases(batch({}, {removal("A", "phone", 7, 3)}))["removed"], 1);
}

// In ZooKeeper mode the active node names its holder: B's batch under A's token is refused
// entry by entry, before A wrote anything (so no HWM holder stands in) and after; A's lease stays
// and A's own batch passes.
TEST_F(PresenceApi, ZooKeeperModeRefusesAnotherAgentUnderTheLeadersToken) {
  start({}, true);
  leaders_.setHeldBy("A", 7, "host-a", kSession);
  auto ghost = leases(batch({entry("A", "ghost", 7, 9)}, {}, "host-b"));
  EXPECT_EQ(ghost["renewed"], 0);
  EXPECT_EQ(ghost["fenced"], (json{{{"account", "A"}, {"token", 7}, {"superseded", true}}}));
  ASSERT_EQ(leases(batch({entry("A", "phone", 7, 3)}))["renewed"], 1);
  auto answer =
      leases(batch({entry("A", "ghost", 7, 9)}, {removal("A", "phone", 7, 3)}, "host-b", kSession));
  EXPECT_EQ(answer["renewed"], 0);
  EXPECT_EQ(answer["removed"], 0);
  EXPECT_EQ(answer["fenced"], (json{{{"account", "A"}, {"token", 7}, {"superseded", true}}}));
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 3}}}));
  EXPECT_EQ(leases(batch({}, {removal("A", "phone", 7, 3)}))["removed"], 1);
}

// The deposed leader's writes after its successor's first lease write, with no operation in
// between: refused on the HWM that write raised.
TEST_F(PresenceApi, HwmModeRefusesTheDeposedLeaderOnceTheSuccessorsLeaseWriteRaisedTheHwm) {
  start();
  ASSERT_EQ(leases(batch({entry("A", "phone", 7, 3)}))["renewed"], 1);
  ASSERT_EQ(leases(batch({entry("A", "phone", 8, 1)}, {}, "host-b", 22))["renewed"], 1);
  EXPECT_EQ(gateway_->validator().status("A")->hwm, 8u);
  auto deposed = leases(batch({entry("A", "phone", 7, 4)}, {removal("A", "phone", 8, 1)}));
  EXPECT_EQ(deposed["renewed"], 0);
  EXPECT_EQ(deposed["removed"], 0);
  EXPECT_EQ(deposed["refused"][0]["reason"], "stale_token");
  EXPECT_EQ(deposed["refused"][1]["reason"], "not_current_leader") << "8 is held by host-b";
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {8, 1}}}));
}

// An entry for an account the gateway does not serve is refused alone: the batch's other
// entries are applied and the answer names each refused entry.
TEST_F(PresenceApi, AnEntryForAnAccountNotServedIsRefusedAloneAndTheOthersApplied) {
  gateway::Config config;
  config.accounts = {"A", "B"};
  start(config);
  auto answer = leases(
      batch({entry("A", "phone", 7, 1), entry("C", "phone", 7, 1), entry("B", "phone", 3, 1)},
            {removal("C", "tablet", 7, 2)}));
  EXPECT_EQ(
      answer,
      (json{{"renewed", 2},
            {"removed", 0},
            {"stale", 0},
            {"fenced", json::array()},
            {"refused",
             {{{"index", 1}, {"list", "renew"}, {"account", "C"}, {"reason", "unknown_account"}},
              {{"index", 0}, {"list", "remove"}, {"account", "C"}, {"reason", "unknown_account"}}}},
            {"leaseTtlMs", 150000}}));
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 1}}}));
  EXPECT_EQ(epochs("B"), (Epochs{{"phone", {3, 1}}}));
  EXPECT_FALSE(gateway_->validator().status("C").has_value())
      << "nothing is kept for an unknown account";
  EXPECT_TRUE(hasMetric(
      R"(zkagent_gateway_presence_lease_entries_total{op="renew",result="unknown_account"} 1)"));
  EXPECT_TRUE(hasMetric(
      R"(zkagent_gateway_presence_lease_entries_total{op="remove",result="unknown_account"} 1)"));
}

TEST_F(PresenceApi, RefusingModeAnswers503AndAppliesNothing) {
  gateway::Config config;
  config.untrusted = gateway::UntrustedPolicy::Refuse;
  start(config, true);
  leaders_.setReachable(false);
  auto refused = postLeases(batch({entry("A", "phone", 7, 1)}));
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(presenceOf("A")["devices"], json::array());
  EXPECT_TRUE(hasMetric(R"(zkagent_gateway_presence_lease_requests_total{result="refused"} 1)"));
}

TEST_F(PresenceApi, AnAccountZooKeeperCannotTellRefusesTheWholeBatchUnderTheRefusePolicy) {
  gateway::Config config;
  config.untrusted = gateway::UntrustedPolicy::Refuse;
  start(config, true);
  leaders_.setActive("A", 7);
  leaders_.setUnknown("B");
  EXPECT_EQ(postLeases(batch({entry("A", "phone", 7, 1), entry("B", "phone", 2, 1)})).status, 503);
  EXPECT_EQ(presenceOf("A")["devices"], json::array());
}

TEST_F(PresenceApi, MalformedBatchGets400NamingTheFieldAndAppliesNone) {
  gateway::Config config;
  config.accounts = {"A", "B"};
  start(config);
  const json good = entry("A", "phone", 7, 1);
  auto withField = [&](json base, const char* key, json value) {
    base[key] = std::move(value);
    return base;
  };
  auto without = [&](json base, const char* key) {
    base.erase(key);
    return base;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "body: not valid JSON"},
      {"[1]", "body: must be a JSON object"},
      {R"({"renew":[]})", "instanceId: missing"},
      {R"({"instanceId":"h","renew":[]})", "sessionId: missing"},
      {R"({"instanceId":"h","sessionId":"0x1"})", "sessionId: must be a 64-bit signed integer"},
      {R"({"instanceId":"h","sessionId":9223372036854775808})", "sessionId: must be a 64-bit"},
      {batch({good}, {}, "has space"), "instanceId: must be 1 to 128"},
      {batch({good}, {}, std::string(129, 'x')), "instanceId: must be"},
      {R"({"instanceId":"h","sessionId":1,"renew":{}})", "renew: must be an array"},
      {R"({"instanceId":"h","sessionId":1,"remove":"x"})", "remove: must be an array"},
      {R"({"instanceId":"h","sessionId":[1]})", "sessionId: must be a 64-bit signed integer"},
      {batch({good, 5}), "renew[1]: must be a JSON object"},
      {batch({good, good, good, without(good, "device")}), "renew[3].device: missing"},
      {batch({good, withField(good, "device", "a/b")}), "renew[1].device: must match"},
      {batch({good, withField(good, "device", "..")}), "renew[1].device: must match"},
      {batch({good, withField(good, "account", "")}), "renew[1].account: must match"},
      {batch({good, withField(good, "token", -1)}), "renew[1].token: must be a non-negative"},
      {batch({good, withField(good, "counter", "1")}), "renew[1].counter: must be a non-negative"},
      {batch({good, without(good, "token")}), "renew[1].token: missing"},
      {batch({good}, {without(removal("A", "phone", 7, 1), "reason")}),
       "remove[0].reason: missing"},
      {batch({good}, {removal("A", "phone", 7, 1, "bored")}), "remove[0].reason: must be"},
      {batch({good}, {removal("A", "phone", 7, 1), without(good, "counter")}),
       "remove[1].counter: missing"},
  };
  for (const auto& [body, message] : cases) {
    auto response = postLeases(body);
    EXPECT_EQ(response.status, 400) << body;
    auto error = json::parse(response.body).value("error", std::string());
    EXPECT_TRUE(error.starts_with(message)) << body << " -> " << error;
  }
  EXPECT_EQ(presenceOf("A")["devices"], json::array()) << "no batch applied its good entries";
  EXPECT_TRUE(hasMetric(R"(zkagent_gateway_presence_lease_requests_total{result="bad_request"} )" +
                        std::to_string(cases.size())));
  EXPECT_TRUE(hasMetric(R"(zkagent_gateway_presence_lease_requests_total{result="ok"} 0)"));
}

TEST_F(PresenceApi, OversizedBatchGets413) {
  start();
  auto response = postLeases(std::string(gateway::kMaxLeaseBatchBytes + 1, ' '));
  EXPECT_EQ(response.status, 413);
}

TEST_F(PresenceApi, OperationsAboveTheirLimitStillGet413ThoughTheServerTakesLeaseBatches) {
  start();
  auto op = json{{"account", "A"}, {"token", 1},   {"instanceId", "host-a"},
                 {"sessionId", 1}, {"opId", "o1"}, {"payload", std::string(70000, 'x')}};
  auto response = call(http::Method::Post, "/v1/ops", op.dump());
  EXPECT_EQ(response.status, 413) << response.body;
  EXPECT_EQ(gateway_->validator().status("A"), std::nullopt);
}

TEST_F(PresenceApi, LeasesExpireAfterTheTtlOnTheGatewaysClock) {
  gateway::Config config;
  // The TTL is the behaviour under test (real time); 1.5 s, not 300 ms, so that the phone's lease
  // cannot expire between the batch and the read right after it on a stalled machine.
  constexpr auto kTtl = 1500ms;
  config.leaseTtlMs = static_cast<int>(kTtl.count());
  config.leaseSweepMs = 20;
  start(config);
  const auto renewed = std::chrono::steady_clock::now();
  leases(batch({entry("A", "phone", 7, 1), entry("A", "tablet", 7, 2)}));
  leases(batch({}, {removal("A", "tablet", 7, 2)}));
  EXPECT_EQ(epochs("A"), (Epochs{{"phone", {7, 1}}}));
  ASSERT_TRUE(zktest::eventually([&] { return presenceOf("A")["devices"].empty(); }, kTtl + 20s))
      << "the lease never expired";
  EXPECT_GE(std::chrono::steady_clock::now() - renewed, kTtl - 1ms) << "expired before its TTL";
  EXPECT_TRUE(hasMetric("zkagent_gateway_presence_lease_expirations_total 1"));
  EXPECT_TRUE(hasMetric("zkagent_gateway_presence_leases 0"));
  // phone and tablet each came and went: four device-level changes.
  EXPECT_TRUE(hasMetric("zkagent_gateway_presence_device_flaps_total 4"));
  EXPECT_FALSE(presenceOf("A").contains("warming_up")) << "one TTL has passed since the start";
}

TEST_F(PresenceApi, BadAccountIdInGetIs400AndAnAccountNotServedIs404) {
  gateway::Config config;
  config.accounts = {"A"};
  start(config);
  auto bad = call(http::Method::Get, "/v1/presence/a%20b");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body)["error"].get<std::string>().rfind("account: ", 0), 0u);
  EXPECT_EQ(call(http::Method::Get, "/v1/presence/..").status, 400);
  EXPECT_EQ(call(http::Method::Get, "/v1/presence/B").status, 404);
  EXPECT_EQ(call(http::Method::Get, "/v1/presence/A").status, 200);
}

TEST_F(PresenceApi, MetricsWithPresencePassPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool absent";
  start();
  leases(batch({entry("A", "phone", 7, 1)}));
  postLeases("not json");
  auto file = dir_.path() / "metrics.prom";
  std::ofstream(file) << metrics();
  EXPECT_EQ(std::system(("promtool check metrics < " + file.string()).c_str()), 0) << metrics();
}

TEST_F(PresenceApi, TheServiceViewSeesTheLeasesOnTheStrand) {
  start();
  leases(batch({entry("A", "phone", 7, 1)}));
  auto seen = std::make_shared<std::promise<bool>>();
  gateway_->presence().post([seen](presence::PresenceService& service) {
    auto published = service.view().published("A");
    seen->set_value(published && published->online);
  });
  auto future = seen->get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(future.get()) << "the view inside the service follows the lease store";
}

}  // namespace
