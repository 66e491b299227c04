// The subscriber side of the gateway without sockets: privacy bodies, subscribe queries and
// subscriber messages are refused naming the field; privacy rules are durable, survive a restart
// and reach live subscriptions at once; versions carry a restart counter that only grows.
#include "presence_privacy.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>

#include "in_process_gateway.hpp"
#include "presence_disk.hpp"
#include "presence_store.hpp"
#include "presence_subscribers.hpp"
#include "temp_dir.hpp"
#include "zkagent/fencing.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// The message of the BadRequest `fn` throws, or "" when it does not throw.
template <typename Fn>
std::string refusal(Fn fn) {
  try {
    fn();
  } catch (const fencing::BadRequest& error) {
    return error.what();
  }
  return "";
}

std::string privacyRefusal(std::string_view body) {
  return refusal([&] { gateway::parsePrivacyBody(body); });
}

TEST(PresencePrivacyBody, EachMistakeIsRefusedNamingTheField) {
  EXPECT_EQ(privacyRefusal("{"), "body: not valid JSON");
  EXPECT_EQ(privacyRefusal("[]"), "body: must be a JSON object");
  EXPECT_EQ(privacyRefusal("{}"), "granularity: missing");
  EXPECT_EQ(privacyRefusal(R"({"granularity":"fuzzy"})"),
            R"(granularity: must be "exact", "coarse" or "hidden")");
  EXPECT_EQ(privacyRefusal(R"({"granularity":"exact","contacts":"bob"})"),
            "contacts: must be an array of account ids");
  EXPECT_EQ(privacyRefusal(R"({"granularity":"exact","contacts":["bob","b c"]})"),
            "contacts[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(privacyRefusal(R"({"granularity":"exact","blocked":[".."]})"),
            "blocked[0]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(privacyRefusal(R"({"granularity":"exact","friends":[]})"),
            "friends: unknown field (granularity, contacts, blocked)");
  const auto rules =
      gateway::parsePrivacyBody(R"({"granularity":"coarse","contacts":["zed","bob","zed"]})");
  EXPECT_EQ(rules, (presence::TargetPrivacy{presence::PrivacyLevel::Coarse, {"bob", "zed"}, {}}));
}

TEST(PresenceSubscribeQuery, EachMistakeIsRefusedNamingTheParameter) {
  auto query = [](std::string_view q) { return refusal([&] { gateway::parseSubscribeQuery(q); }); };
  EXPECT_EQ(query("viewer=bob").rfind("targets: missing", 0), 0u);
  EXPECT_EQ(query("viewer=b%20b&targets=a"),
            "viewer: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(query("viewer=bob&targets=a,,c"),
            "targets[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(query("viewer=bob&targets=a,"),
            "targets[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(query("viewer=bob&viewer=eve&targets=a"), "viewer: given twice");
  EXPECT_EQ(query("viewer=bob&targets=a&since=3"),
            "since: unknown parameter (viewer, targets, token, via)");
  const auto ok = gateway::parseSubscribeQuery("viewer=bob&targets=alice%2Ccarol");
  EXPECT_EQ(ok.viewer, "bob");
  EXPECT_EQ(ok.targets, (std::vector<std::string>{"alice", "carol"}));
  EXPECT_TRUE(gateway::parseSubscribeQuery("viewer=bob&targets=").targets.empty());
  // The viewer may be left out here; who the subscriber is, SubscriberIdentity decides.
  EXPECT_TRUE(gateway::parseSubscribeQuery("targets=a").viewer.empty());
  // A relaying gateway names itself (an instance id).
  EXPECT_EQ(gateway::parseSubscribeQuery("viewer=bob&targets=&via=gw-1").via, "gw-1");
  EXPECT_EQ(query("viewer=bob&targets=a&via=").rfind("via: ", 0), 0u);
}

TEST(PresenceSubscriberCommand, EachMistakeIsRefusedNamingTheField) {
  auto command = [](std::string_view text) {
    return refusal([&] { gateway::parseSubscriberCommand(text); });
  };
  EXPECT_EQ(command("add alice"), "message: not valid JSON");
  EXPECT_EQ(command(R"({"targets":["a"]})"), "type: missing");
  EXPECT_EQ(command(R"({"type":"replace","targets":["a"]})"), R"(type: must be "add" or "remove")");
  EXPECT_EQ(command(R"({"type":"add"})"), "targets: missing");
  EXPECT_EQ(command(R"({"type":"add","targets":["a",7]})"),
            "targets[1]: must match [A-Za-z0-9_.-]{1,128}, not . or ..");
  EXPECT_EQ(command(R"({"type":"add","targets":[],"x":1})"), "x: unknown field (type, targets)");
  const auto remove = gateway::parseSubscriberCommand(R"({"type":"remove","targets":["a"]})");
  EXPECT_FALSE(remove.add);
  EXPECT_EQ(remove.targets, (std::vector<std::string>{"a"}));
}

// A gateway on a data dir that outlives restarts, called with its operator token.
class GatewayInstance {
 public:
  // Privacy rules are an operator action: they need an operator token configured.
  GatewayInstance(const std::filesystem::path& dir, std::string token = "operator-token")
      : gateway_(configIn(dir, std::move(token))) {}

  // Sends the instance's own token unless given another ("" sends none).
  http::Response call(http::Method method, const std::string& path, std::string body = {},
                      std::optional<std::string> token = std::nullopt) {
    http::Request request;
    request.method = method;
    request.path = request.target = path;
    request.body = std::move(body);
    const std::string bearer = token.value_or(gateway_.config().operatorToken);
    if (!bearer.empty()) request.headers.emplace_back("authorization", "Bearer " + bearer);
    return gateway_.handle(std::move(request));
  }
  gateway::PresenceStore& presence() { return gateway_.presence(); }

 private:
  static gateway::Config configIn(const std::filesystem::path& dir, std::string token) {
    gateway::Config config;
    config.dataDir = dir;
    config.operatorToken = std::move(token);
    return config;
  }

  gateway::testing::InProcessGateway gateway_;
};

TEST(PresencePrivacyApi, RulesAreReadBackAndSurviveARestart) {
  fencing::testing::TempDir dir;
  {
    GatewayInstance gw(dir.path());
    EXPECT_EQ(json::parse(gw.call(http::Method::Get, "/v1/presence/privacy/alice").body),
              (json{{"account", "alice"},
                    {"granularity", "exact"},
                    {"contacts", json::array()},
                    {"blocked", json::array()}}))
        << "no rules: the defaults, under which nobody may see alice";
    auto put =
        gw.call(http::Method::Put, "/v1/presence/privacy/alice",
                R"({"granularity":"coarse","contacts":["bob","carol"],"blocked":["carol"]})");
    ASSERT_EQ(put.status, 200) << put.body;
  }
  GatewayInstance restarted(dir.path());
  EXPECT_EQ(json::parse(restarted.call(http::Method::Get, "/v1/presence/privacy/alice").body),
            (json{{"account", "alice"},
                  {"granularity", "coarse"},
                  {"contacts", {"bob", "carol"}},
                  {"blocked", {"carol"}}}));
}

TEST(PresencePrivacyApi, ABadBodyOrAccountIsRefusedAndChangesNothing) {
  fencing::testing::TempDir dir;
  GatewayInstance gw(dir.path());
  ASSERT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice",
                    R"({"granularity":"exact","contacts":["bob"]})")
                .status,
            200);
  const auto before = gw.call(http::Method::Get, "/v1/presence/privacy/alice").body;
  auto bad = gw.call(http::Method::Put, "/v1/presence/privacy/alice",
                     R"({"granularity":"hidden","contacts":["bob","no way"]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("contacts[1]"), std::string::npos) << bad.body;
  EXPECT_EQ(gw.call(http::Method::Get, "/v1/presence/privacy/alice").body, before);
  EXPECT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/..", "{}").status, 400);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "presence" / "privacy" / "...json"));
}

TEST(PresencePrivacyApi, ChangingRulesNeedsTheOperatorTokenWhenTheGatewayHasOne) {
  fencing::testing::TempDir dir;
  GatewayInstance gw(dir.path(), "s3cret");
  const std::string body = R"({"granularity":"exact","contacts":["bob"]})";
  EXPECT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice", body, "").status, 401);
  EXPECT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice", body, "wrong").status, 401);
  EXPECT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice", body, "s3cret").status, 200);
}

TEST(PresencePrivacyApi, ARuleChangeReachesALiveSubscriptionBeforeThePutReturns) {
  fencing::testing::TempDir dir;
  GatewayInstance gw(dir.path());
  ASSERT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice",
                    R"({"granularity":"exact","contacts":["bob"]})")
                .status,
            200);
  std::mutex mutex;
  std::vector<presence::ChangeEvent> events;
  std::promise<size_t> snapshot;
  gw.presence().post([&](presence::PresenceService& service) {
    auto subscribed = service.subscriptions().subscribe("bob", {"alice"},
                                                        [&](const presence::ChangeEvent& event) {
                                                          std::lock_guard lock(mutex);
                                                          events.push_back(event);
                                                        });
    snapshot.set_value(subscribed.snapshot.size());
  });
  ASSERT_EQ(snapshot.get_future().get(), 1u);
  ASSERT_EQ(gw.call(http::Method::Put, "/v1/presence/privacy/alice",
                    R"({"granularity":"exact","contacts":["bob"],"blocked":["bob"]})")
                .status,
            200);
  std::lock_guard lock(mutex);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].removed);
}

TEST(PresenceVersions, TheRestartCounterGrowsWithEveryStartSoVersionsNeverGoBack) {
  fencing::testing::TempDir dir;
  std::uint64_t first = 0;
  {
    GatewayInstance gw(dir.path());
    first = gw.presence().versionBase("acc-1");
    EXPECT_EQ(first, std::uint64_t{1} << 32);
  }
  GatewayInstance restarted(dir.path());
  EXPECT_EQ(restarted.presence().versionBase("acc-1"), std::uint64_t{2} << 32);
}

TEST(PresenceVersions, AnUnreadableRestartCounterStopsTheStartInsteadOfResettingVersions) {
  fencing::testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "presence");
  std::ofstream(dir.path() / "presence" / "generation") << "garbage\n";
  EXPECT_THROW(gateway::PresenceDisk(dir.path()).nextGeneration(), std::runtime_error);
}

}  // namespace
