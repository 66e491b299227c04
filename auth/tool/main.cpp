// zk-token: signs a device, viewer or service token (JWT) with a key file, for operators trying
// device authentication out, the demo and the device simulator's tests. Production tokens come
// from the account system that knows the devices; this tool signs whatever it is told.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "zkagent/auth.hpp"
#include "zkagent/config_reader.hpp"

namespace {

constexpr const char* kUsage =
    R"(usage: zk-token --key FILE --alg HS256|RS256|ES256 --sub ID --scope SCOPE
                [--kid KID] [--account ACCOUNT] [--aud AUDIENCE] [--ttl SECONDS]
Prints a signed JWT on stdout.
  --key FILE       the HS256 secret, or a PEM private key (RS256: RSA >= 2048 bits, ES256: P-256)
  --sub ID         the device id (scope device) or the viewer (scope viewer)
  --scope SCOPE    device, viewer or service (space-separated for several)
  --account A      the device's account (device tokens)
  --ttl SECONDS    lifetime, default 3600 (1 to 31536000)
)";

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw zkagent::config::FieldError("--key", "cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  std::string material = text.str();
  while (!material.empty() && (material.back() == '\n' || material.back() == '\r')) {
    material.pop_back();
  }
  return material;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zkagent;
  std::string keyFile, alg, kid;
  auth::TokenRequest request;
  int64_t ttl = 3600;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::cout << kUsage;
        return 0;
      }
      if (i + 1 >= argc) throw config::FieldError(flag, "needs a value");
      const std::string value = argv[++i];
      if (flag == "--key")
        keyFile = value;
      else if (flag == "--alg")
        alg = config::choose(flag, value, {"HS256", "RS256", "ES256"});
      else if (flag == "--kid")
        kid = value;
      else if (flag == "--sub")
        request.subject = value;
      else if (flag == "--account")
        request.account = value;
      else if (flag == "--scope")
        request.scope = value;
      else if (flag == "--aud")
        request.audience = value;
      else if (flag == "--ttl")
        ttl = config::parseInteger(flag, value, 1, 31536000);
      else
        throw config::FieldError(flag, "unknown flag (see --help)");
    }
    if (keyFile.empty()) throw config::FieldError("--key", "missing");
    if (alg.empty()) throw config::FieldError("--alg", "missing");
    if (request.subject.empty()) throw config::FieldError("--sub", "missing");
    if (request.scope.empty()) throw config::FieldError("--scope", "missing");
    request.expiresAt = auth::unixNow() + ttl;
    const auth::SigningKey key{kid, *auth::algorithmNamed(alg), readFile(keyFile)};
    std::cout << auth::mint(key, request) << "\n";
    return 0;
  } catch (const std::invalid_argument& error) {
    std::cerr << "zk-token: " << error.what() << "\n";
    return 2;
  }
}
