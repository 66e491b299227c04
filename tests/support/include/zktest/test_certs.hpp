// Test certificates made once per test process by scripts/make-test-certs (openssl CLI): a CA,
// the gateway's certificate (localhost, 127.0.0.1), one for localhost alone, agents
// agent-a/-b/-c, an expired agent-a and an agent-a signed by another CA, and token keys under
// tokens/. See the script for the file names.
#pragma once

#include <filesystem>
#include <string>

namespace zktest {

// The directory holding them; throws when the script fails.
const std::filesystem::path& testCertificates();

// The text of tokens/<name> (a secret's trailing newline dropped), e.g. "hs256.secret".
std::string tokenKey(const std::string& name);

}  // namespace zktest
