// Token verification with libjwt. The token is read twice: once unverified, only for the header's
// `kid` and `alg` (which key, and whether the token asks for that key's algorithm), then verified
// with the chosen key; no claim is looked at before the signature checks.
#include <jwt.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "zkagent/auth.hpp"

namespace zkagent::auth {
namespace {

using nlohmann::json;

// Longer tokens are refused unread: a header line of an upgrade request is at most a few KiB.
constexpr std::size_t kMaxTokenBytes = 4096;

struct JwtFree {
  void operator()(jwt_t* jwt) const { jwt_free(jwt); }
};
using JwtPtr = std::unique_ptr<jwt_t, JwtFree>;

Refused refused(Failure failure, std::string detail) { return {failure, "token: " + detail}; }

bool printable(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

bool hasScope(const json& claims, std::string_view scope) {
  const auto it = claims.find("scope");
  if (it == claims.end() || !it->is_string()) return false;
  std::string_view list = it->get_ref<const std::string&>();
  while (!list.empty()) {
    const auto space = list.find(' ');
    if (list.substr(0, space) == scope) return true;
    if (space == std::string_view::npos) break;
    list.remove_prefix(space + 1);
  }
  return false;
}

bool audienceMatches(const json& claims, const std::string& audience) {
  const auto it = claims.find("aud");
  if (it == claims.end()) return false;
  if (it->is_string()) return *it == audience;
  if (!it->is_array()) return false;
  return std::any_of(it->begin(), it->end(), [&](const json& a) { return a == audience; });
}

std::optional<int64_t> timeClaim(const json& claims, const char* name) {
  const auto it = claims.find(name);
  if (it == claims.end() || !it->is_number()) return std::nullopt;
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

}  // namespace

std::optional<Algorithm> algorithmNamed(std::string_view name) {
  if (name == "HS256") return Algorithm::HS256;
  if (name == "RS256") return Algorithm::RS256;
  if (name == "ES256") return Algorithm::ES256;
  return std::nullopt;
}

std::string_view nameOf(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::HS256:
      return "HS256";
    case Algorithm::RS256:
      return "RS256";
    case Algorithm::ES256:
      return "ES256";
  }
  return "?";
}

std::string_view nameOf(Failure failure) {
  switch (failure) {
    case Failure::missing:
      return "missing";
    case Failure::malformed:
      return "malformed";
    case Failure::unknown_key:
      return "unknown_key";
    case Failure::bad_signature:
      return "bad_signature";
    case Failure::expired:
      return "expired";
    case Failure::not_yet_valid:
      return "not_yet_valid";
    case Failure::wrong_audience:
      return "wrong_audience";
    case Failure::wrong_scope:
      return "wrong_scope";
  }
  return "?";
}

std::optional<std::string_view> bearerToken(std::string_view authorization) {
  constexpr std::string_view scheme = "Bearer ";
  if (authorization.size() < scheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i) {  // the scheme is case-insensitive (RFC 9110)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(scheme[i]))) {
      return std::nullopt;
    }
  }
  auto token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

Verifier::Verifier(VerifierSettings settings) : settings_(std::move(settings)) {
  if (settings_.keys.empty()) throw std::invalid_argument("keys: at least one key is needed");
  std::set<std::string> kids;
  for (std::size_t i = 0; i < settings_.keys.size(); ++i) {
    const Key& key = settings_.keys[i];
    const std::string field = "keys[" + std::to_string(i) + "]";
    if (key.kid.empty() && settings_.keys.size() > 1) {
      throw std::invalid_argument(field + ".kid: needed when several keys are configured");
    }
    if (!printable(key.kid) || key.kid.size() > 128) {
      throw std::invalid_argument(field + ".kid: 1 to 128 printable ASCII characters, no spaces");
    }
    if (!kids.insert(key.kid).second) {
      throw std::invalid_argument(field + ".kid: '" + key.kid + "' is configured twice");
    }
    if (auto error = keyError(key)) throw std::invalid_argument(field + ": " + *error);
  }
  if (settings_.leeway < std::chrono::seconds(0) || settings_.leeway > std::chrono::minutes(10)) {
    throw std::invalid_argument("leeway: must be from 0 to 600 seconds");
  }
}

std::variant<Claims, Refused> Verifier::verify(std::string_view token, std::string_view scope,
                                               int64_t now) const {
  if (token.empty()) return refused(Failure::missing, "missing");
  if (token.size() > kMaxTokenBytes || !printable(token) ||
      std::count(token.begin(), token.end(), '.') != 2) {
    return refused(Failure::malformed, "not a signed JWT (header.payload.signature)");
  }
  const std::string text(token);

  jwt_t* raw = nullptr;
  if (jwt_decode(&raw, text.c_str(), nullptr, 0) != 0) {
    return refused(Failure::malformed, "not a signed JWT (header.payload.signature)");
  }
  JwtPtr unverified(raw);
  const char* kidHeader = jwt_get_header(unverified.get(), "kid");
  const char* algHeader = jwt_get_header(unverified.get(), "alg");
  const std::string kid = kidHeader ? kidHeader : "";
  const Key* key = nullptr;
  for (const Key& candidate : settings_.keys) {
    if (candidate.kid == kid || (kidHeader == nullptr && settings_.keys.size() == 1)) {
      key = &candidate;
    }
  }
  if (key == nullptr) {
    return refused(Failure::unknown_key,
                   kidHeader ? "kid '" + kid.substr(0, 64) + "' is not a configured key"
                             : "kid missing and several keys are configured");
  }
  if (algHeader == nullptr || algorithmNamed(algHeader) != key->algorithm) {
    return refused(Failure::bad_signature, "alg must be " + std::string(nameOf(key->algorithm)) +
                                               " for key '" + key->kid + "'");
  }
  raw = nullptr;
  if (jwt_decode(&raw, text.c_str(), reinterpret_cast<const unsigned char*>(key->material.data()),
                 static_cast<int>(key->material.size())) != 0) {
    return refused(Failure::bad_signature, "signature does not verify");
  }
  JwtPtr verified(raw);

  json claims;
  {
    char* grants = jwt_get_grants_json(verified.get(), nullptr);
    if (grants == nullptr) return refused(Failure::malformed, "no claims");
    claims = json::parse(grants, nullptr, false);
    std::free(grants);  // libjwt allocates with malloc
  }
  if (!claims.is_object()) return refused(Failure::malformed, "claims are not a JSON object");
  const auto sub = claims.find("sub");
  if (sub == claims.end() || !sub->is_string() || sub->get_ref<const std::string&>().empty()) {
    return refused(Failure::malformed, "sub: missing");
  }
  const auto exp = timeClaim(claims, "exp");
  if (!exp) return refused(Failure::malformed, "exp: missing (tokens must expire)");
  const int64_t leeway = settings_.leeway.count();
  if (now > *exp + leeway) {
    return refused(Failure::expired, "expired " + std::to_string(now - *exp) + " s ago");
  }
  if (const auto nbf = timeClaim(claims, "nbf"); nbf && now + leeway < *nbf) {
    return refused(Failure::not_yet_valid,
                   "not valid for another " + std::to_string(*nbf - now) + " s");
  }
  if (!settings_.audience.empty() && !audienceMatches(claims, settings_.audience)) {
    return refused(Failure::wrong_audience, "aud must include '" + settings_.audience + "'");
  }
  if (!hasScope(claims, scope)) {
    return refused(Failure::wrong_scope, "scope must include '" + std::string(scope) + "'");
  }
  Claims out;
  out.subject = sub->get<std::string>();
  out.expiresAt = *exp;
  if (const auto account = claims.find("account"); account != claims.end()) {
    if (!account->is_string()) return refused(Failure::malformed, "account: must be a string");
    out.account = account->get<std::string>();
  }
  return out;
}

}  // namespace zkagent::auth
