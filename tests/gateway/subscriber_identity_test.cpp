// Who a subscriber is, tried as an attacker would: every token that is missing, forged, expired,
// of the wrong kind or for another viewer is refused before the upgrade, and the honest viewer
// and service next to them subscribe as themselves.
#include "subscriber_identity.hpp"

#include <gtest/gtest.h>

#include "gateway.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace zkagent;
constexpr int64_t kNow = 1'800'000'000;

auth::SigningKey viewerKey() {
  return {"v1", auth::Algorithm::HS256, zktest::tokenKey("hs256.secret")};
}
auth::SigningKey serviceKey() {
  return {"s1", auth::Algorithm::ES256, zktest::tokenKey("es256.key")};
}
// The same secret as the viewer key under another kid: a forger who knows a kid but not the key.
auth::SigningKey forgedKey() { return {"v1", auth::Algorithm::HS256, std::string(40, 'x')}; }

gateway::Config configWith(bool viewers, bool services) {
  gateway::Config config;
  if (viewers) {
    config.viewerAuth = auth::VerifierSettings{
        {{"v1", auth::Algorithm::HS256, zktest::tokenKey("hs256.secret")}}, "", {}};
  }
  if (services) {
    config.serviceAuth = auth::VerifierSettings{
        {{"s1", auth::Algorithm::ES256, zktest::tokenKey("es256.pub")}}, "", {}};
  }
  return config;
}

std::string token(const auth::SigningKey& key, const std::string& subject, const std::string& scope,
                  int64_t expiresAt = kNow + 600) {
  auth::TokenRequest request;
  request.subject = subject;
  request.scope = scope;
  request.expiresAt = expiresAt;
  return auth::mint(key, request);
}

http::Request upgrade(std::string query, std::string bearer = "") {
  http::Request request;
  request.path = "/v1/presence/subscribe";
  request.target = request.path + "?" + query;
  request.query = std::move(query);
  if (!bearer.empty()) request.headers.emplace_back("authorization", "Bearer " + bearer);
  return request;
}

// The viewer a request subscribes as, or "<status>: <body>".
std::string outcome(const gateway::SubscriberIdentity& identity, const http::Request& request) {
  auto result = identity.identify(request, kNow);
  if (auto* subscribe = std::get_if<gateway::SubscribeRequest>(&result)) {
    EXPECT_FALSE(subscribe->token) << "the token must not travel on with the subscription";
    return subscribe->viewer;
  }
  const auto& refusal = std::get<http::Response>(result);
  return std::to_string(refusal.status) + ": " + refusal.body;
}

TEST(SubscriberIdentity, AViewerTokenMakesItsSubjectTheViewerInTheHeaderOrTheQuery) {
  gateway::SubscriberIdentity identity(configWith(true, false));
  const auto bob = token(viewerKey(), "bob", "viewer");
  EXPECT_EQ(outcome(identity, upgrade("targets=alice", bob)), "bob");
  EXPECT_EQ(outcome(identity, upgrade("viewer=bob&targets=alice", bob)), "bob");
  EXPECT_EQ(outcome(identity, upgrade("targets=alice&token=" + bob)), "bob");
}

// What a relaying gateway presents at a target's owner (docs/gateway-cluster.md "Relayed
// subscriptions"): the very token the subscriber proved itself with, so that the owner decides
// the viewer itself; nothing when no subscriber tokens are configured.
TEST(SubscriberIdentity, TheProvedTokenIsKeptForARelayToPresentAtTheOwner) {
  const auto credential = [](const gateway::SubscriberIdentity& identity,
                             const http::Request& request) {
    auto result = identity.identify(request, kNow);
    const auto* subscribe = std::get_if<gateway::SubscribeRequest>(&result);
    return subscribe ? subscribe->credential : std::string("refused");
  };
  gateway::SubscriberIdentity identity(configWith(true, true));
  const auto bob = token(viewerKey(), "bob", "viewer");
  EXPECT_EQ(credential(identity, upgrade("targets=alice", bob)), bob);
  EXPECT_EQ(credential(identity, upgrade("targets=alice&token=" + bob)), bob);
  const auto backend = token(serviceKey(), "backend-1", "service");
  EXPECT_EQ(credential(identity, upgrade("viewer=carol&targets=alice", backend)), backend);
  gateway::SubscriberIdentity claimed(configWith(false, false));
  EXPECT_EQ(credential(claimed, upgrade("viewer=carol&targets=alice")), "");
}

TEST(SubscriberIdentity, ClaimingAnotherViewerIsForbidden) {
  gateway::SubscriberIdentity identity(configWith(true, false));
  const auto bob = token(viewerKey(), "bob", "viewer");
  EXPECT_EQ(outcome(identity, upgrade("viewer=carol&targets=alice", bob)).substr(0, 4), "403:");
  EXPECT_EQ(outcome(identity, upgrade("viewer=carol&targets=alice&token=" + bob)).substr(0, 4),
            "403:");
}

TEST(SubscriberIdentity, EveryBadTokenIsA401BeforeAnythingElse) {
  gateway::SubscriberIdentity identity(configWith(true, true));
  const std::vector<std::pair<std::string, std::string>> attempts = {
      {"no token", ""},
      {"garbage", "not.a.jwt"},
      {"forged signature", token(forgedKey(), "bob", "viewer")},
      {"expired", token(viewerKey(), "bob", "viewer", kNow - 3600)},
      {"a device's token", token(viewerKey(), "bob", "device")},
      {"a viewer key claiming service", token(viewerKey(), "backend", "service")},
      {"a service key claiming viewer", token(serviceKey(), "bob", "viewer")},
  };
  for (const auto& [what, bearer] : attempts) {
    const auto answer = outcome(identity, upgrade("viewer=bob&targets=alice", bearer));
    EXPECT_EQ(answer.substr(0, 4), "401:") << what << ": " << answer;
  }
  auto refused = identity.identify(upgrade("targets=alice"), kNow);
  ASSERT_TRUE(std::holds_alternative<http::Response>(refused));
  const auto& headers = std::get<http::Response>(refused).headers;
  ASSERT_FALSE(headers.empty());
  EXPECT_EQ(headers[0].first, "WWW-Authenticate");
  // Another scheme in the header is refused, not ignored in favour of the query.
  auto basic = upgrade("targets=alice&token=" + token(viewerKey(), "bob", "viewer"));
  basic.headers.emplace_back("authorization", "Basic Ym9iOnB3");
  EXPECT_EQ(outcome(identity, basic).substr(0, 4), "401:");
}

TEST(SubscriberIdentity, AServiceSubscribesForTheViewerItNamesAndMustNameOne) {
  gateway::SubscriberIdentity identity(configWith(true, true));
  const auto backend = token(serviceKey(), "backend-1", "service");
  EXPECT_EQ(outcome(identity, upgrade("viewer=carol&targets=alice", backend)), "carol");
  EXPECT_EQ(outcome(identity, upgrade("targets=alice", backend)),
            R"x(400: {"error":"viewer: missing (a service subscribes for a viewer)"})x");
  // Without service keys configured, no token is a service's.
  gateway::SubscriberIdentity viewersOnly(configWith(true, false));
  EXPECT_EQ(outcome(viewersOnly, upgrade("viewer=carol&targets=alice", backend)).substr(0, 4),
            "401:");
}

TEST(SubscriberIdentity, WithoutSubscriberKeysTheClaimedViewerStandsAndATokenIsRefused) {
  gateway::SubscriberIdentity identity(configWith(false, false));
  EXPECT_FALSE(identity.tokensRequired());
  EXPECT_EQ(outcome(identity, upgrade("viewer=bob&targets=alice")), "bob");
  EXPECT_EQ(outcome(identity, upgrade("targets=alice")), R"(400: {"error":"viewer: missing"})");
  EXPECT_EQ(outcome(identity, upgrade("viewer=bob&targets=alice&token=x")).substr(0, 4), "400:");
}

TEST(SubscriberIdentity, ABadQueryIsA400NamingTheParameter) {
  gateway::SubscriberIdentity identity(configWith(true, false));
  const auto bob = token(viewerKey(), "bob", "viewer");
  EXPECT_EQ(outcome(identity, upgrade("viewer=bob", bob)).substr(0, 24),
            R"(400: {"error":"targets: )");
  EXPECT_EQ(outcome(identity, upgrade("targets=a&token=" + bob + "&token=" + bob)),
            R"(400: {"error":"token: given twice"})");
}

}  // namespace
