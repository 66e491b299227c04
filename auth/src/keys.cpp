// Keys: their checks (OpenSSL parses the PEM here; nothing is signed or verified by hand), the
// config reader of a key set, and signing for tests and tools.
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "zkagent/auth.hpp"
#include "zkagent/config_reader.hpp"

namespace zkagent::auth {
namespace {

constexpr std::size_t kMinSecretBytes = 32;  // HS256: at least the hash's size
constexpr int kMinRsaBits = 2048;

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<EVP_PKEY, PkeyFree> readPem(const std::string& pem, bool isPrivate) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) return {nullptr, PkeyFree{}};
  EVP_PKEY* key = isPrivate ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                            : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  return std::unique_ptr<EVP_PKEY, PkeyFree>(key);
}

std::optional<std::string> pemError(Algorithm algorithm, const std::string& pem, bool isPrivate) {
  const auto key = readPem(pem, isPrivate);
  const char* what = isPrivate ? "a PEM private key" : "a PEM public key (BEGIN PUBLIC KEY)";
  if (!key) return std::string("not ") + what;
  if (algorithm == Algorithm::RS256) {
    if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) return std::string("RS256 needs an RSA key");
    if (EVP_PKEY_bits(key.get()) < kMinRsaBits) {
      return "RS256 needs an RSA key of at least " + std::to_string(kMinRsaBits) + " bits";
    }
  } else if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_EC || EVP_PKEY_bits(key.get()) != 256) {
    return std::string("ES256 needs an EC key on P-256");
  }
  return std::nullopt;
}

std::optional<std::string> materialError(Algorithm algorithm, const std::string& material,
                                         bool isPrivate) {
  if (algorithm == Algorithm::HS256) {
    if (material.size() < kMinSecretBytes) {
      return "an HS256 secret needs at least " + std::to_string(kMinSecretBytes) + " bytes";
    }
    return std::nullopt;
  }
  return pemError(algorithm, material, isPrivate);
}

std::string readKeyFile(config::FieldReader& reader, const std::string& field,
                        const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) reader.fail(field, "cannot read '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  std::string material = text.str();
  while (!material.empty() && (material.back() == '\n' || material.back() == '\r')) {
    material.pop_back();
  }
  if (material.empty()) reader.fail(field, "'" + path.string() + "' is empty");
  return material;
}

}  // namespace

std::optional<std::string> keyError(const Key& key) {
  return materialError(key.algorithm, key.material, false);
}

VerifierSettings readSettings(config::FieldReader& reader, const std::filesystem::path& baseDir) {
  VerifierSettings settings;
  const nlohmann::json* keys = reader.find("keys");
  if (keys == nullptr || !keys->is_array() || keys->empty()) {
    reader.fail("keys", "must be a non-empty array of {kid, alg, file}");
  }
  for (std::size_t i = 0; i < keys->size(); ++i) {
    const std::string at = "keys[" + std::to_string(i) + "]";
    if (!(*keys)[i].is_object()) reader.fail(at, "must be an object {kid, alg, file}");
    config::FieldReader entry((*keys)[i], reader.name(at) + ".");
    Key key;
    key.kid = entry.string("kid", "");
    const auto alg = entry.choice("alg", {"HS256", "RS256", "ES256"});
    if (!alg) entry.fail("alg", "missing (HS256, RS256 or ES256)");
    key.algorithm = *algorithmNamed(*alg);
    std::filesystem::path file = entry.requiredString("file");
    if (file.is_relative()) file = baseDir / file;
    // FieldReader::fail names the field with the entry's prefix.
    key.material = readKeyFile(entry, "file", file);
    if (auto error = keyError(key)) entry.fail("file", *error);
    entry.rejectUnknown();
    settings.keys.push_back(std::move(key));
  }
  settings.audience = reader.string("audience", "");
  settings.leeway = std::chrono::seconds(reader.integer("leeway", 0, 600).value_or(30));
  try {
    Verifier check(settings);
  } catch (const std::invalid_argument& error) {
    const std::string text = error.what();
    const auto colon = text.find(": ");
    reader.fail(text.substr(0, colon), text.substr(colon + 2));
  }
  return settings;
}

std::string mint(const SigningKey& key, const TokenRequest& request) {
  if (auto error = materialError(key.algorithm, key.material, true)) {
    throw std::invalid_argument("signing key: " + *error);
  }
  jwt_t* raw = nullptr;
  if (jwt_new(&raw) != 0) throw std::runtime_error("jwt_new failed");
  std::unique_ptr<jwt_t, decltype(&jwt_free)> jwt(raw, &jwt_free);
  const auto alg = key.algorithm == Algorithm::HS256   ? JWT_ALG_HS256
                   : key.algorithm == Algorithm::RS256 ? JWT_ALG_RS256
                                                       : JWT_ALG_ES256;
  bool ok = jwt_set_alg(jwt.get(), alg, reinterpret_cast<const unsigned char*>(key.material.data()),
                        static_cast<int>(key.material.size())) == 0;
  if (!key.kid.empty()) ok = ok && jwt_add_header(jwt.get(), "kid", key.kid.c_str()) == 0;
  ok = ok && jwt_add_grant(jwt.get(), "sub", request.subject.c_str()) == 0;
  if (!request.account.empty())
    ok = ok && jwt_add_grant(jwt.get(), "account", request.account.c_str()) == 0;
  if (!request.scope.empty())
    ok = ok && jwt_add_grant(jwt.get(), "scope", request.scope.c_str()) == 0;
  if (!request.audience.empty())
    ok = ok && jwt_add_grant(jwt.get(), "aud", request.audience.c_str()) == 0;
  ok = ok && jwt_add_grant_int(jwt.get(), "exp", static_cast<long>(request.expiresAt)) == 0;
  if (request.notBefore)
    ok = ok && jwt_add_grant_int(jwt.get(), "nbf", static_cast<long>(*request.notBefore)) == 0;
  char* token = ok ? jwt_encode_str(jwt.get()) : nullptr;
  if (token == nullptr) throw std::invalid_argument("signing key: libjwt cannot sign with it");
  std::string out(token);
  std::free(token);
  return out;
}

}  // namespace zkagent::auth
