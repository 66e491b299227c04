// The verifier as an attacker meets it: each forged, foreign, stale or malformed token is refused
// with its reason, and the honest token next to it passes.
#include "zkagent/auth.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "zkagent/config_reader.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace zkagent::auth;
constexpr int64_t kNow = 1'800'000'000;

SigningKey hs(const std::string& kid = "h1", const std::string& file = "hs256.secret") {
  return {kid, Algorithm::HS256, zktest::tokenKey(file)};
}
SigningKey rs(const std::string& kid = "r1", const std::string& file = "rs256.key") {
  return {kid, Algorithm::RS256, zktest::tokenKey(file)};
}
SigningKey es() { return {"e1", Algorithm::ES256, zktest::tokenKey("es256.key")}; }

TokenRequest device(int64_t exp = kNow + 600) {
  TokenRequest request;
  request.subject = "phone-1";
  request.account = "acct-1";
  request.scope = "device";
  request.expiresAt = exp;
  return request;
}

Verifier verifier(std::string audience = "") {
  VerifierSettings settings;
  settings.keys = {{"h1", Algorithm::HS256, zktest::tokenKey("hs256.secret")},
                   {"r1", Algorithm::RS256, zktest::tokenKey("rs256.pub")},
                   {"e1", Algorithm::ES256, zktest::tokenKey("es256.pub")}};
  settings.audience = std::move(audience);
  return Verifier(settings);
}

Failure refusal(const Verifier& v, const std::string& token, std::string_view scope = "device",
                int64_t now = kNow) {
  auto result = v.verify(token, scope, now);
  if (std::holds_alternative<Claims>(result)) {
    ADD_FAILURE() << "accepted: " << token;
    return Failure::missing;
  }
  return std::get<Refused>(result).failure;
}

Claims accepted(const Verifier& v, const std::string& token, std::string_view scope = "device",
                int64_t now = kNow) {
  auto result = v.verify(token, scope, now);
  if (auto* no = std::get_if<Refused>(&result)) {
    ADD_FAILURE() << "refused: " << no->detail;
    return {};
  }
  return std::get<Claims>(result);
}

std::string base64url(const std::string& text) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  int bits = 0;
  unsigned value = 0;
  for (unsigned char c : text) {
    value = (value << 8) | c;
    bits += 8;
    while (bits >= 6) out.push_back(table[(value >> (bits -= 6)) & 63]);
  }
  if (bits > 0) out.push_back(table[(value << (6 - bits)) & 63]);
  return out;
}

TEST(AuthVerifier, HonestTokensOfEveryAlgorithmPass) {
  const auto v = verifier();
  for (const auto& key : {hs(), rs(), es()}) {
    const Claims claims = accepted(v, mint(key, device()));
    EXPECT_EQ(claims.subject, "phone-1") << nameOf(key.algorithm);
    EXPECT_EQ(claims.account, "acct-1");
    EXPECT_EQ(claims.expiresAt, kNow + 600);
  }
}

TEST(AuthVerifier, MissingAndMalformedTokensAreRefused) {
  const auto v = verifier();
  EXPECT_EQ(refusal(v, ""), Failure::missing);
  EXPECT_EQ(refusal(v, "not-a-jwt"), Failure::malformed);
  EXPECT_EQ(refusal(v, "a.b.c"), Failure::malformed);
  EXPECT_EQ(refusal(v, std::string(5000, 'a') + ".b.c"), Failure::malformed);
  const auto good = mint(hs(), device());
  EXPECT_EQ(refusal(v, good + ".x"), Failure::malformed);
}

TEST(AuthVerifier, ForgedSignaturesAreRefused) {
  const auto v = verifier();
  // Signed with an attacker's secret or RSA key under a configured kid.
  EXPECT_EQ(refusal(v, mint(hs("h1", "other-hs256.secret"), device())), Failure::bad_signature);
  EXPECT_EQ(refusal(v, mint(rs("r1", "other-rs256.key"), device())), Failure::bad_signature);
  // A good token with its payload swapped for another device's.
  const auto good = mint(hs(), device());
  auto other = device();
  other.subject = "phone-2";
  const auto swapped = mint(hs("h1", "other-hs256.secret"), other);
  const auto payloadOf = [](const std::string& t) {
    const auto a = t.find('.'), b = t.rfind('.');
    return t.substr(a + 1, b - a - 1);
  };
  std::string forged = good;
  forged.replace(good.find('.') + 1, payloadOf(good).size(), payloadOf(swapped));
  EXPECT_EQ(refusal(v, forged), Failure::bad_signature);
}

TEST(AuthVerifier, TheTokenCannotChooseItsAlgorithm) {
  const auto v = verifier();
  // HS256 "signed" with the RSA public key's PEM text under the RSA kid: the classic confusion.
  const SigningKey confused{"r1", Algorithm::HS256, zktest::tokenKey("rs256.pub")};
  EXPECT_EQ(refusal(v, mint(confused, device())), Failure::bad_signature);
  // alg none, unsigned.
  const std::string none =
      base64url(R"({"alg":"none","kid":"h1"})") + "." +
      base64url(R"({"sub":"phone-1","account":"acct-1","scope":"device","exp":1900000000})") + ".";
  EXPECT_NE(refusal(v, none), Failure::missing);
}

TEST(AuthVerifier, KeysAreChosenByKidAndUnknownKidsRefused) {
  const auto v = verifier();
  EXPECT_EQ(refusal(v, mint(hs("h9"), device())), Failure::unknown_key);
  EXPECT_EQ(refusal(v, mint(hs(""), device())), Failure::unknown_key);  // several keys: kid needed
  VerifierSettings one;
  one.keys = {{"", Algorithm::HS256, zktest::tokenKey("hs256.secret")}};
  accepted(Verifier(one), mint(hs(""), device()));
}

TEST(AuthVerifier, RotationAcceptsOldAndNewKeysUntilTheOldIsRemoved) {
  VerifierSettings both;
  both.keys = {{"old", Algorithm::HS256, zktest::tokenKey("hs256.secret")},
               {"new", Algorithm::RS256, zktest::tokenKey("rs256.pub")}};
  const auto oldToken = mint(hs("old"), device());
  const auto newToken = mint(rs("new"), device());
  accepted(Verifier(both), oldToken);
  accepted(Verifier(both), newToken);
  VerifierSettings rotated;
  rotated.keys = {both.keys[1]};
  EXPECT_EQ(refusal(Verifier(rotated), oldToken), Failure::unknown_key);
  accepted(Verifier(rotated), newToken);
}

TEST(AuthVerifier, ExpiryAndNotBeforeAreJudgedWithTheLeeway) {
  const auto v = verifier();  // leeway 30 s
  const auto token = mint(hs(), device(kNow));
  accepted(v, token, "device", kNow + 30);
  EXPECT_EQ(refusal(v, token, "device", kNow + 31), Failure::expired);
  auto early = device();
  early.notBefore = kNow + 100;
  EXPECT_EQ(refusal(v, mint(hs(), early)), Failure::not_yet_valid);
  accepted(v, mint(hs(), early), "device", kNow + 70);
  auto forever = device();
  forever.expiresAt = 0;
  // exp 0 is long past; a token without exp is refused as malformed (no test path mints one).
  EXPECT_EQ(refusal(v, mint(hs(), forever)), Failure::expired);
}

TEST(AuthVerifier, AudienceAndScopeMustMatch) {
  const auto v = verifier("zkagent-devices");
  EXPECT_EQ(refusal(v, mint(hs(), device())), Failure::wrong_audience);
  auto aimed = device();
  aimed.audience = "another-service";
  EXPECT_EQ(refusal(v, mint(hs(), aimed)), Failure::wrong_audience);
  aimed.audience = "zkagent-devices";
  accepted(v, mint(hs(), aimed));
  // A device token is no viewer token, and the other way round.
  EXPECT_EQ(refusal(v, mint(hs(), aimed), "viewer"), Failure::wrong_scope);
  aimed.scope = "viewer service";
  accepted(v, mint(hs(), aimed), "service");
  EXPECT_EQ(refusal(v, mint(hs(), aimed), "device"), Failure::wrong_scope);
}

TEST(AuthVerifier, BearerHeaderParsing) {
  EXPECT_EQ(bearerToken("Bearer abc"), "abc");
  EXPECT_EQ(bearerToken("bearer  abc "), "abc");
  EXPECT_EQ(bearerToken("Basic abc"), std::nullopt);
  EXPECT_EQ(bearerToken("Bear"), std::nullopt);
}

TEST(AuthKeys, BadKeysAreRefusedAtConfigTime) {
  const auto make = [](std::vector<Key> keys) {
    VerifierSettings settings;
    settings.keys = std::move(keys);
    return settings;
  };
  const auto message = [&](std::vector<Key> keys) -> std::string {
    try {
      Verifier v(make(std::move(keys)));
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(message({}), "keys: at least one key is needed");
  EXPECT_EQ(message({{"a", Algorithm::HS256, "short"}}),
            "keys[0]: an HS256 secret needs at least 32 bytes");
  EXPECT_EQ(message({{"a", Algorithm::RS256, zktest::tokenKey("es256.pub")}}),
            "keys[0]: RS256 needs an RSA key");
  EXPECT_EQ(message({{"a", Algorithm::ES256, "not pem"}}),
            "keys[0]: not a PEM public key (BEGIN PUBLIC KEY)");
  const Key secret{"a", Algorithm::HS256, zktest::tokenKey("hs256.secret")};
  EXPECT_EQ(message({secret, secret}), "keys[1].kid: 'a' is configured twice");
  EXPECT_EQ(message({secret, {"", Algorithm::HS256, secret.material}}),
            "keys[1].kid: needed when several keys are configured");
}

TEST(AuthKeys, SettingsAreReadWithFieldNamesAndFilesRelativeToTheConfig) {
  const auto dir = zktest::testCertificates();
  auto read = [&](const nlohmann::json& object) {
    zkagent::config::FieldReader reader(object, "presence.auth.");
    auto settings = readSettings(reader, dir);
    reader.rejectUnknown();
    return settings;
  };
  const auto settings = read({{"keys",
                               {{{"kid", "h1"}, {"alg", "HS256"}, {"file", "tokens/hs256.secret"}},
                                {{"kid", "r1"}, {"alg", "RS256"}, {"file", "tokens/rs256.pub"}}}},
                              {"audience", "zkagent"},
                              {"leeway", 5}});
  ASSERT_EQ(settings.keys.size(), 2u);
  EXPECT_EQ(settings.keys[0].material, zktest::tokenKey("hs256.secret"));
  EXPECT_EQ(settings.leeway, std::chrono::seconds(5));
  const auto problem = [&](const nlohmann::json& object) -> std::string {
    try {
      read(object);
    } catch (const zkagent::config::FieldError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(problem({{"keys", nlohmann::json::array()}}),
            "presence.auth.keys: must be a non-empty array of {kid, alg, file}");
  EXPECT_EQ(problem({{"keys", {{{"alg", "HS512"}, {"file", "x"}}}}}),
            "presence.auth.keys[0].alg: must be HS256, RS256 or ES256, got 'HS512'");
  EXPECT_EQ(problem({{"keys", {{{"alg", "HS256"}, {"file", "nope"}}}}}),
            "presence.auth.keys[0].file: cannot read '" + (dir / "nope").string() + "'");
  EXPECT_EQ(problem({{"keys", {{{"alg", "RS256"}, {"file", "tokens/rs256.key"}}}}}),
            "presence.auth.keys[0].file: not a PEM public key (BEGIN PUBLIC KEY)");
  EXPECT_EQ(problem({{"keys", {{{"alg", "HS256"}, {"file", "tokens/hs256.secret"}, {"x", 1}}}}}),
            "presence.auth.keys[0].x: unknown field");
}

}  // namespace
