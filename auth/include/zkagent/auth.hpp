// Who is at the other end of a device or subscriber connection: bearer tokens (JWT, RFC 7519),
// verified with libjwt against configured keys. The rules every edge shares live here:
// - a key is a shared secret (HS256, at least 32 bytes, RFC 7518 section 3.2) or a PEM public key
//   (RS256, at least 2048 bits; ES256 on P-256); several keys at once, told apart by `kid`, so a
//   key can be rotated by adding the new one, reissuing tokens, then removing the old one;
// - a token names its key by `kid` (optional when one key is configured) and its header's `alg`
//   must be that key's algorithm: a token never chooses how it is checked (no `none`, no HS256
//   signed with a public key's text);
// - claims: `sub` (who: the device id or the viewer), `exp` (required), `nbf` (optional),
//   `aud` (required to match when an audience is configured), `scope` (space-separated; the edge
//   names the one it needs: "device", "viewer" or "service"), `account` (a device's account);
// - `exp` and `nbf` are judged against the caller's clock with a small leeway for clock skew.
// Every refusal is an HTTP 401 at the edge; comparing the claims with the request (403) is the
// edge's own business.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace zkagent::config {
class FieldReader;
}

namespace zkagent::auth {

enum class Algorithm { HS256, RS256, ES256 };

std::optional<Algorithm> algorithmNamed(std::string_view name);
std::string_view nameOf(Algorithm algorithm);

// A verification key: the secret's bytes (HS256) or a PEM public key (RS256, ES256).
struct Key {
  std::string kid;
  Algorithm algorithm = Algorithm::HS256;
  std::string material;
};

// Checks a key's material for its algorithm; the problem in words, or nullopt.
std::optional<std::string> keyError(const Key& key);

struct VerifierSettings {
  std::vector<Key> keys;  // at least one; kids unique (empty only when there is one key)
  std::string audience;   // when set, `aud` must be it or contain it
  std::chrono::seconds leeway{30};
};

// The checked claims of a token.
struct Claims {
  std::string subject;
  std::string account;    // empty when the token has none
  int64_t expiresAt = 0;  // unix seconds
};

enum class Failure {
  missing,
  malformed,
  unknown_key,
  bad_signature,
  expired,
  not_yet_valid,
  wrong_audience,
  wrong_scope
};
std::string_view nameOf(Failure failure);  // a metric label: "expired"

struct Refused {
  Failure failure;
  std::string detail;  // for the client: "token: expired 12 s ago"
};

class Verifier {
 public:
  // Throws std::invalid_argument naming the key ("keys[1]: ...") for a bad key set.
  explicit Verifier(VerifierSettings settings);

  // The claims of `token` when it is well formed, signed by a configured key with that key's
  // algorithm, current at `now` (unix seconds), for the audience and carrying `scope`.
  std::variant<Claims, Refused> verify(std::string_view token, std::string_view scope,
                                       int64_t now) const;

  const VerifierSettings& settings() const { return settings_; }

 private:
  VerifierSettings settings_;
};

inline int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The `token` of an `Authorization: Bearer <token>` header; nullopt for any other scheme.
std::optional<std::string_view> bearerToken(std::string_view authorization);

// Reads an auth settings object:
//   {"keys": [{"kid": "k1", "alg": "HS256", "file": "device.secret"}, ...],
//    "audience": "zkagent", "leeway": 30}
// Key files are read at once (relative paths from `baseDir`; a secret's trailing CR/LF dropped);
// errors are config::FieldError naming the field ("presence.auth.keys[0].file: cannot read ...").
VerifierSettings readSettings(config::FieldReader& reader, const std::filesystem::path& baseDir);

// Signing, for tests, the device simulator and operators' tooling: the secret (HS256) or a PEM
// private key (RS256, ES256).
struct SigningKey {
  std::string kid;
  Algorithm algorithm = Algorithm::HS256;
  std::string material;
};

struct TokenRequest {
  std::string subject;
  std::string account;  // omitted when empty
  std::string scope;
  std::string audience;  // omitted when empty
  int64_t expiresAt = 0;
  std::optional<int64_t> notBefore;
};

// Throws std::invalid_argument when libjwt cannot sign with the key.
std::string mint(const SigningKey& key, const TokenRequest& request);

}  // namespace zkagent::auth
