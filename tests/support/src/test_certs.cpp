#include "zktest/test_certs.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>

namespace zktest {

const std::filesystem::path& testCertificates() {
  static std::once_flag once;
  static std::filesystem::path dir;
  std::call_once(once, [] {
    auto where =
        std::filesystem::temp_directory_path() / ("zkagent-certs-" + std::to_string(::getpid()));
    const std::string command = std::string("'") + ZKAGENT_SOURCE_DIR +
                                "/scripts/make-test-certs' '" + where.string() + "' >/dev/null";
    if (std::system(command.c_str()) != 0) {
      throw std::runtime_error("cannot make test certificates: " + command);
    }
    dir = where;
  });
  return dir;
}

std::string tokenKey(const std::string& name) {
  std::ifstream in(testCertificates() / "tokens" / name, std::ios::binary);
  if (!in) throw std::runtime_error("no test token key " + name);
  std::ostringstream text;
  text << in.rdbuf();
  std::string key = text.str();
  while (!key.empty() && key.back() == '\n') key.pop_back();
  return key;
}

}  // namespace zktest
