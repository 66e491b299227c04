// Small helpers shared by the agent's process tests and its whole-system benchmark.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace zkagent_test {

// "LISTENING 127.0.0.1:4242" -> 4242
inline uint16_t portOf(const std::string& listeningLine) {
  return static_cast<uint16_t>(std::stoi(listeningLine.substr(listeningLine.rfind(':') + 1)));
}

// acct-0 ... acct-(n-1)
inline std::vector<std::string> accountNames(size_t n, const std::string& prefix = "acct-") {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// The port of the first "LISTENING host:port" line a server wrote to `log`, waiting up to
// `timeout` (servers whose whole output goes to a file).
inline std::optional<uint16_t> awaitListeningPort(const std::filesystem::path& log,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  do {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("LISTENING ")) return portOf(line);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

}  // namespace zkagent_test
