// Test certificates made once per test process by scripts/make-test-certs (openssl CLI): a CA,
// the gateway's certificate (localhost, 127.0.0.1), agents agent-a/-b/-c, an expired agent-a
// and an agent-a signed by another CA. See the script for the file names.
#pragma once

#include <filesystem>

namespace zktest {

// The directory holding them; throws when the script fails.
const std::filesystem::path& testCertificates();

}  // namespace zktest
