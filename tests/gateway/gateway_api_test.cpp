// The gateway's HTTP API driven through its Router (no sockets), over a durable validator in a
// temporary directory and a fake ZooKeeper view.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "fake_leaders.hpp"
#include "gateway.hpp"
#include "temp_dir.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"

using namespace zkagent;
using nlohmann::json;

namespace {

using gateway::testing::FakeLeaders;
using zktest::metricSample;

std::string op(std::string_view account, uint64_t token, std::string_view opId) {
  return json{{"account", account}, {"token", token}, {"instanceId", "host-a"},
              {"sessionId", 42},    {"opId", opId},   {"payload", {{"text", "hello"}}}}
      .dump();
}

class GatewayApi : public ::testing::Test {
 protected:
  // Builds the gateway; `zookeeper` decides whether it gets the fake cache.
  void start(gateway::Config config = {}, bool zookeeper = false) {
    config.dataDir = dir_.path();
    validator_ = std::make_unique<fencing::TokenValidator>(
        fencing::ValidatorOptions{.dataDir = dir_.path()});
    gateway_ = std::make_unique<gateway::Gateway>(config, *validator_,
                                                  zookeeper ? &leaders_ : nullptr, registry_);
    router_ = std::make_unique<http::Router>(gateway_->router());
  }

  http::Response call(http::Method method, std::string path, std::string body = {},
                      std::string token = {}) {
    http::Request request;
    request.method = method;
    request.path = request.target = std::move(path);
    request.body = std::move(body);
    request.remoteAddress = "127.0.0.1:5555";
    if (!token.empty()) request.headers.emplace_back("authorization", "Bearer " + token);
    return router_->handle(std::move(request));
  }
  http::Response post(std::string body) {
    return call(http::Method::Post, "/v1/ops", std::move(body));
  }
  json account(const std::string& id) {
    return json::parse(call(http::Method::Get, "/v1/accounts/" + id).body);
  }
  std::string metrics() { return call(http::Method::Get, "/metrics").body; }

  fencing::testing::TempDir dir_;
  FakeLeaders leaders_;
  metrics::Registry registry_;
  std::unique_ptr<fencing::TokenValidator> validator_;
  std::unique_ptr<gateway::Gateway> gateway_;
  std::unique_ptr<http::Router> router_;
};

TEST_F(GatewayApi, StaleTokenIsRejectedWith409AndTheCurrentHwm) {
  start();
  ASSERT_EQ(post(op("acc", 7, "op-1")).status, 200);
  auto stale = post(op("acc", 6, "op-2"));
  EXPECT_EQ(stale.status, 409);
  auto body = json::parse(stale.body);
  EXPECT_EQ(body["accepted"], false);
  EXPECT_EQ(body["reason"], "stale_token");
  EXPECT_EQ(body["hwm"], 7);
  EXPECT_EQ(
      account("acc"),
      (json{{"account", "acc"}, {"hwm", 7}, {"accepted", 1}, {"rejected", 1}, {"fenced", false}}));
}

TEST_F(GatewayApi, EqualTokenIsAcceptedAndHigherRaisesTheHwm) {
  start();
  ASSERT_EQ(post(op("acc", 7, "op-1")).status, 200);
  auto equal = post(op("acc", 7, "op-2"));
  EXPECT_EQ(equal.status, 200);
  EXPECT_EQ(json::parse(equal.body), (json{{"accepted", true}, {"hwm", 7}}));
  EXPECT_EQ(json::parse(post(op("acc", 9, "op-3")).body)["hwm"], 9);
}

TEST_F(GatewayApi, BadInputGets400WithAMessageAndChangesNothing) {
  start();
  ASSERT_EQ(post(op("acc", 5, "op-1")).status, 200);
  auto valid = json::parse(op("acc", 9, "op-x"));
  auto without = [&](const char* field) {
    auto copy = valid;
    copy.erase(field);
    return copy.dump();
  };
  auto with = [&](const char* field, json value) {
    auto copy = valid;
    copy[field] = value;
    return copy.dump();
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"account\":", "malformed JSON"}, {"[1,2]", "JSON object"},
      {without("account"), "account"},     {without("token"), "token"},
      {without("opId"), "opId"},           {with("account", "../etc"), "account"},
      {with("account", ""), "account"},    {with("token", -1), "token"},
      {with("token", "9"), "token"},       {with("token", 9.5), "token"},
  };
  for (const auto& [body, mentions] : cases) {
    auto response = post(body);
    EXPECT_EQ(response.status, 400) << body;
    auto message = json::parse(response.body)["error"].get<std::string>();
    EXPECT_NE(message.find(mentions), std::string::npos) << body << " -> " << message;
  }
  EXPECT_EQ(account("acc")["hwm"], 5);
  EXPECT_EQ(account("acc")["accepted"], 1);
  EXPECT_EQ(fencing::readLoggedOperations(dir_.path()).size(), 1u);
  EXPECT_EQ(metricSample(metrics(), "zkagent_gateway_bad_requests_total"), 10);
}

TEST_F(GatewayApi, AccountOutsideTheConfiguredListIsRefused) {
  gateway::Config config;
  config.accounts = {"known"};
  start(config);
  EXPECT_EQ(post(op("known", 1, "op-1")).status, 200);
  auto unknown = post(op("stranger", 1, "op-2"));
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.body.find("unknown account 'stranger'"), std::string::npos);
  EXPECT_EQ(call(http::Method::Get, "/v1/accounts/stranger").status, 404);
}

TEST_F(GatewayApi, RetryWithTheSameOpIdGetsTheFirstAnswerAndIsNotAppliedTwice) {
  start();
  ASSERT_EQ(post(op("acc", 3, "op-1")).status, 200);
  auto retry = post(op("acc", 3, "op-1"));
  EXPECT_EQ(retry.status, 200);
  EXPECT_EQ(json::parse(retry.body)["replayed"], true);
  EXPECT_EQ(account("acc")["accepted"], 1);
  EXPECT_EQ(fencing::readLoggedOperations(dir_.path()).size(), 1u);
  EXPECT_EQ(metricSample(metrics(), "zkagent_gateway_replayed_ops_total"), 1);
}

TEST_F(GatewayApi, ZooKeeperModeRejectsTheOldLeaderOnceASuccessorHoldsActive) {
  start({}, true);
  leaders_.setActive("acc", 4);
  ASSERT_EQ(post(op("acc", 4, "op-1")).status, 200);
  leaders_.setActive("acc", 8);  // successor took over, has not sent anything yet
  auto old = post(op("acc", 4, "op-2"));
  EXPECT_EQ(old.status, 409);
  EXPECT_EQ(json::parse(old.body)["reason"], "not_current_leader");
  EXPECT_EQ(account("acc")["activeSeq"], 8);
  EXPECT_EQ(
      metricSample(metrics(),
                   R"(zkagent_gateway_ops_total{result="not_current_leader",check="zookeeper"})"),
      1);
}

TEST_F(GatewayApi, ForgedFutureTokenIsRejectedAndLeavesTheHwmAlone) {
  start({}, true);
  leaders_.setActive("acc", 4);
  ASSERT_EQ(post(op("acc", 4, "op-1")).status, 200);
  auto forged = post(op("acc", 1000, "op-2"));
  EXPECT_EQ(forged.status, 409);
  EXPECT_EQ(json::parse(forged.body)["reason"], "not_current_leader");
  EXPECT_EQ(account("acc")["hwm"], 4);
  EXPECT_EQ(post(op("acc", 4, "op-3")).status, 200);
}

TEST_F(GatewayApi, UntrustedZooKeeperFallsBackToHwmOnlyAndSaysSo) {
  start({}, true);
  leaders_.setActive("acc", 4);
  ASSERT_EQ(post(op("acc", 4, "op-1")).status, 200);
  leaders_.setReachable(false);
  EXPECT_EQ(post(op("acc", 1000, "op-2")).status, 200);  // only the HWM can be checked now
  EXPECT_EQ(post(op("acc", 4, "op-3")).status, 409);
  auto text = metrics();
  EXPECT_EQ(metricSample(text, R"(zkagent_gateway_check_mode{mode="hwm_only"})"), 1);
  EXPECT_EQ(metricSample(text, R"(zkagent_gateway_check_mode{mode="zookeeper"})"), 0);
  EXPECT_EQ(metricSample(text, "zkagent_gateway_zookeeper_trusted"), 0);
  EXPECT_EQ(metricSample(text, R"(zkagent_gateway_ops_total{result="accepted",check="hwm_only"})"),
            1);
  EXPECT_EQ(json::parse(call(http::Method::Get, "/healthz").body)["check"], "hwm_only");
}

TEST_F(GatewayApi, UntrustedZooKeeperRefusesWhenConfiguredAndChangesNothing) {
  gateway::Config config;
  config.untrusted = gateway::UntrustedPolicy::Refuse;
  start(config, true);
  leaders_.setActive("acc", 4);
  ASSERT_EQ(post(op("acc", 4, "op-1")).status, 200);
  leaders_.setReachable(false);
  auto refused = post(op("acc", 4, "op-2"));
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(json::parse(refused.body)["reason"], "zookeeper_unavailable");
  EXPECT_EQ(fencing::readLoggedOperations(dir_.path()).size(), 1u);
  EXPECT_EQ(metricSample(metrics(), R"(zkagent_gateway_check_mode{mode="refusing"})"), 1);
  leaders_.setReachable(true);
  EXPECT_EQ(post(op("acc", 4, "op-3")).status, 200);
}

TEST_F(GatewayApi, ActiveSeqBelowHwmFencesTheAccountUntilAnAuthenticatedReset) {
  gateway::Config config;
  config.bearerToken = "agent-secret";
  config.operatorToken = "admin-secret";
  start(config, true);
  leaders_.setActive("acc", 40);
  ASSERT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 40, "op-1"), "agent-secret").status, 200);
  leaders_.setActive("acc", 2);  // ZooKeeper wiped: the members counter restarted
  auto fenced = call(http::Method::Post, "/v1/ops", op("acc", 2, "op-2"), "agent-secret");
  EXPECT_EQ(fenced.status, 409);
  EXPECT_EQ(json::parse(fenced.body)["reason"], "account_fenced");
  EXPECT_EQ(metricSample(call(http::Method::Get, "/metrics", "", "agent-secret").body,
                         "zkagent_gateway_fenced_accounts"),
            1);
  // Fenced on a view read after a sync, not on the cache alone.
  EXPECT_EQ(leaders_.confirmedLookups(), 1);
  EXPECT_EQ(metricSample(call(http::Method::Get, "/metrics", "", "agent-secret").body,
                         R"(zkagent_gateway_view_reconfirmations_total{result="fenced"})"),
            1);

  std::string reset = R"({"hwm":2,"reason":"zookeeper data wiped","actor":"alice"})";
  EXPECT_EQ(call(http::Method::Post, "/v1/accounts/acc/reset-hwm", reset).status, 401);
  EXPECT_EQ(call(http::Method::Post, "/v1/accounts/acc/reset-hwm", reset, "agent-secret").status,
            401);
  EXPECT_EQ(
      call(http::Method::Post, "/v1/accounts/acc/reset-hwm", R"({"hwm":2})", "admin-secret").status,
      400);
  EXPECT_EQ(call(http::Method::Post, "/v1/accounts/acc/reset-hwm", R"({"hwm":-2,"reason":"x"})",
                 "admin-secret")
                .status,
            400);
  auto done = call(http::Method::Post, "/v1/accounts/acc/reset-hwm", reset, "admin-secret");
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(json::parse(done.body), (json{{"account", "acc"}, {"hwm", 2}, {"fenced", false}}));
  EXPECT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 2, "op-3"), "agent-secret").status, 200);
}

// A cache behind ZooKeeper (a lagging server, a missed watch) must not fence an account: the
// fence is taken only on a view read after a sync, and here that view shows the leader still
// holding the HWM's token.
TEST_F(GatewayApi, ACachedViewBelowTheHwmIsReadAgainAfterASyncAndFencesNothing) {
  start({}, true);
  leaders_.setActive("acc", 40);
  ASSERT_EQ(post(op("acc", 40, "op-1")).status, 200);
  leaders_.setCached("acc", 38);
  auto answer = post(op("acc", 40, "op-2"));
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(leaders_.confirmedLookups(), 1);
  EXPECT_EQ(account("acc")["fenced"], false);
  EXPECT_EQ(metricSample(metrics(), "zkagent_gateway_fenced_accounts"), 0);
  EXPECT_EQ(
      metricSample(metrics(), R"(zkagent_gateway_view_reconfirmations_total{result="corrected"})"),
      1);
  // A deposed leader's token is still refused on the confirmed view, and fences nothing either.
  auto stale = post(op("acc", 38, "op-3"));
  EXPECT_EQ(stale.status, 409);
  EXPECT_EQ(json::parse(stale.body)["reason"], "stale_token");
  EXPECT_EQ(account("acc")["fenced"], false);
}

// When the read after a sync cannot be had, the account is not fenced either: the untrusted
// policy decides, as for any view the gateway cannot tell (refuse: 503).
TEST_F(GatewayApi, ACachedViewBelowTheHwmWithNoConfirmedReadIsLeftToTheUntrustedPolicy) {
  gateway::Config config;
  config.untrusted = gateway::UntrustedPolicy::Refuse;
  start(config, true);
  leaders_.setActive("acc", 40);
  ASSERT_EQ(post(op("acc", 40, "op-1")).status, 200);
  leaders_.setCached("acc", 38);
  leaders_.setConfirmedUnavailable(true);
  auto answer = post(op("acc", 40, "op-2"));
  EXPECT_EQ(answer.status, 503) << answer.body;
  EXPECT_EQ(json::parse(answer.body)["reason"], "zookeeper_unavailable");
  EXPECT_EQ(account("acc")["fenced"], false);
  EXPECT_EQ(metricSample(metrics(),
                         R"(zkagent_gateway_view_reconfirmations_total{result="unavailable"})"),
            1);
  leaders_.setConfirmedUnavailable(false);
  EXPECT_EQ(post(op("acc", 40, "op-3")).status, 200);
}

// The fencing tuple (GET /v1/accounts/{id}) is for operators: with an operator token configured,
// the agents' token (which a legacy subscriber also holds) does not read it, while operations
// still go through with it. (The raw lease view: presence_api_test.)
TEST_F(GatewayApi, OnlyTheOperatorTokenReadsTheFencingTuple) {
  gateway::Config config;
  config.bearerToken = "agent-secret";
  config.operatorToken = "admin-secret";
  start(config);
  ASSERT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 9, "op-1"), "agent-secret").status, 200);
  EXPECT_EQ(call(http::Method::Get, "/v1/accounts/acc", "", "agent-secret").status, 401);
  EXPECT_EQ(call(http::Method::Get, "/v1/accounts/acc").status, 401);
  auto status = call(http::Method::Get, "/v1/accounts/acc", "", "admin-secret");
  ASSERT_EQ(status.status, 200) << status.body;
  EXPECT_EQ(json::parse(status.body)["hwm"], 9);
  EXPECT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 9, "op-2"), "agent-secret").status, 200);
}

TEST_F(GatewayApi, HwmResetIsDisabledWithoutAConfiguredOperatorToken) {
  gateway::Config config;
  config.bearerToken = "agent-secret";  // the agents' token does not enable it
  start(config);
  ASSERT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 9, "op-1"), "agent-secret").status, 200);
  auto refused = call(http::Method::Post, "/v1/accounts/acc/reset-hwm", R"({"hwm":0,"reason":"x"})",
                      "agent-secret");
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("ZKAGENT_GATEWAY_OPERATOR_TOKEN"), std::string::npos) << refused.body;
  EXPECT_EQ(
      json::parse(call(http::Method::Get, "/v1/accounts/acc", "", "agent-secret").body)["hwm"], 9);
}

// POST /v1/drain is an operator action of a cluster gateway: without the operator token 401 (the
// agents' token included), without one configured 403, and outside cluster mode a 409 that says
// so; none of them changes anything (operations go on being decided here).
TEST_F(GatewayApi, DrainIsAnOperatorActionAndRefusedOutsideClusterMode) {
  gateway::Config config;
  config.bearerToken = "agent-secret";
  config.operatorToken = "admin-secret";
  start(config);
  EXPECT_EQ(call(http::Method::Post, "/v1/drain").status, 401);
  EXPECT_EQ(call(http::Method::Post, "/v1/drain", "", "agent-secret").status, 401);
  EXPECT_EQ(call(http::Method::Post, "/v1/drain", "", "wrong").status, 401);
  const auto single = call(http::Method::Post, "/v1/drain", "", "admin-secret");
  EXPECT_EQ(single.status, 409) << single.body;
  EXPECT_NE(single.body.find("not in cluster mode"), std::string::npos) << single.body;
  const auto health = json::parse(call(http::Method::Get, "/healthz", "", "agent-secret").body);
  EXPECT_FALSE(health.contains("cluster")) << health;
  EXPECT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 1, "op-1"), "agent-secret").status, 200);
}

TEST_F(GatewayApi, DrainIsDisabledWithoutAConfiguredOperatorToken) {
  start();
  const auto refused = call(http::Method::Post, "/v1/drain");
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("ZKAGENT_GATEWAY_OPERATOR_TOKEN"), std::string::npos) << refused.body;
}

TEST_F(GatewayApi, EveryEndpointNeedsTheBearerTokenWhenOneIsConfigured) {
  gateway::Config config;
  config.bearerToken = "t";
  start(config);
  EXPECT_EQ(call(http::Method::Post, "/v1/ops", op("acc", 1, "op-1")).status, 401);
  EXPECT_EQ(call(http::Method::Get, "/healthz").status, 401);
  EXPECT_EQ(call(http::Method::Get, "/metrics").status, 401);
  EXPECT_EQ(call(http::Method::Get, "/v1/accounts/acc").status, 401);
  EXPECT_EQ(validator_->status("acc"), std::nullopt);
  EXPECT_EQ(call(http::Method::Get, "/healthz", "", "t").status, 200);
}

TEST_F(GatewayApi, MetricsPassPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool absent";
  start({}, true);
  leaders_.setActive("acc", 4);
  post(op("acc", 4, "op-1"));
  post(op("acc", 3, "op-2"));
  post("not json");
  auto file = dir_.path() / "metrics.prom";
  std::ofstream(file) << metrics();
  EXPECT_EQ(std::system(("promtool check metrics < " + file.string()).c_str()), 0) << metrics();
}

http::Request heartbeat(std::string query) {
  http::Request request;
  request.method = http::Method::Get;
  request.path = "/healthz";
  request.query = std::move(query);
  request.target = request.path + "?" + request.query;
  return request;
}

TEST_F(GatewayApi, AgentHeartbeatsAreTrackedAndASilentAgentCountsAsGone) {
  // The timeout is the behaviour under test, so it is real time; 1.5 s (not 100 ms) so that a
  // stalled test thread (sanitizers, a loaded 2-core machine) between a beat and the read right
  // after it does not see the agent gone already.
  constexpr auto kTimeout = std::chrono::milliseconds(1500);
  gateway::Config config;
  config.agentTimeoutMs = static_cast<int>(kTimeout.count());
  start(config);
  const auto beforeBeat = std::chrono::steady_clock::now();
  ASSERT_EQ(router_->handle(heartbeat("instance=host-a")).status, 200);
  auto listed = json::parse(call(http::Method::Get, "/v1/agents").body);
  ASSERT_EQ(listed["agents"].size(), 1u);
  EXPECT_EQ(listed["agents"][0]["instance"], "host-a");
  EXPECT_EQ(listed["agents"][0]["state"], "alive");
  // Silent for longer than agentTimeoutMs: gone, and not before (a lower bound, which a slow
  // machine only makes easier to meet).
  EXPECT_TRUE(zktest::eventually(
      [&] {
        listed = json::parse(call(http::Method::Get, "/v1/agents").body);
        return listed["agents"][0]["state"] == "gone";
      },
      kTimeout + std::chrono::milliseconds(20000)))
      << listed.dump();
  EXPECT_GE(std::chrono::steady_clock::now() - beforeBeat, kTimeout) << "gone before the timeout";
  EXPECT_EQ(metricSample(metrics(), R"(zkagent_gateway_agents{state="gone"})"), 1);
  // The next beat brings it back.
  ASSERT_EQ(router_->handle(heartbeat("instance=host-a")).status, 200);
  listed = json::parse(call(http::Method::Get, "/v1/agents").body);
  EXPECT_EQ(listed["agents"][0]["state"], "alive");
}

TEST_F(GatewayApi, MalformedHeartbeatInstanceIsRejectedAndNotRecorded) {
  start();
  EXPECT_EQ(router_->handle(heartbeat("instance=")).status, 400);
  EXPECT_EQ(router_->handle(heartbeat("instance=" + std::string(200, 'x'))).status, 400);
  EXPECT_EQ(router_->handle(heartbeat("instance=a%20b c")).status, 400);
  EXPECT_TRUE(json::parse(call(http::Method::Get, "/v1/agents").body)["agents"].empty());
  EXPECT_EQ(router_->handle(heartbeat("")).status, 200) << "a plain health check still works";
}

}  // namespace
