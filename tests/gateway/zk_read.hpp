// Reads one znode with the ZooKeeper C client, for tests that must act as the holder of an
// account's `active` node (its instanceId and sessionId).
#pragma once

#include <zookeeper/zookeeper.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace zkagent::gateway::testing {

inline std::optional<std::string> readZNode(const std::string& connect, const std::string& path) {
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t* zh = zookeeper_init(connect.c_str(), nullptr, 10000, nullptr, nullptr, 0);
  if (zh == nullptr) return std::nullopt;
  std::optional<std::string> result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    char buffer[4096];
    int length = sizeof buffer;
    int rc = zoo_get(zh, path.c_str(), 0, buffer, &length, nullptr);
    if (rc == ZOK) {
      result = std::string(buffer, static_cast<size_t>(length > 0 ? length : 0));
      break;
    }
    if (rc == ZNONODE) break;
    // Not connected yet: the C client has no blocking connect to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  zookeeper_close(zh);
  return result;
}

}  // namespace zkagent::gateway::testing
