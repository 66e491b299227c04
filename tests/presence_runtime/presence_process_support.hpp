// What the presence process tests share: the compressed timings, the zk-device CONNECTED line,
// and reading the gateway's and agents' Prometheus text.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace zktest::presence_process {

inline constexpr int kSessionTimeoutMs = 1500;
inline constexpr int kHeartbeatMs = 200;
inline constexpr int kPingTimeoutMs = 600;
inline constexpr int kCheckIntervalMs = 100;
inline constexpr int kRenewIntervalMs = 400;
inline constexpr int kLeaseTtlMs = 1200;
inline constexpr int kSweepMs = 100;

// One "CONNECTED <account> <device> <agent> <token>.<counter> <unix_ns>" line.
struct Connected {
  std::string account, device, agent;
  uint64_t token = 0, counter = 0;
};

inline Connected parseConnected(const std::string& line) {
  std::istringstream in(line);
  std::string word, epoch;
  Connected c;
  in >> word >> c.account >> c.device >> c.agent >> epoch;
  const auto dot = epoch.find('.');
  c.token = std::stoull(epoch.substr(0, dot));
  c.counter = std::stoull(epoch.substr(dot + 1));
  return c;
}

// The gateway's sample of lease entries by op (renew, remove) and result.
inline std::string leaseEntries(const std::string& op, const std::string& result) {
  return R"(zkagent_gateway_presence_lease_entries_total{op=")" + op + R"(",result=")" + result +
         R"("})";
}

// The value of one sample of Prometheus text, 0 when absent.
inline double sampleOf(const std::string& metrics, const std::string& sample) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(sample + " ")) return std::stod(line.substr(sample.size() + 1));
  }
  return 0;
}

}  // namespace zktest::presence_process
