#include "zktest/znode.hpp"

#include <zookeeper/zookeeper.h>

#include <thread>

namespace zktest {

ZNode readZNode(const std::string& connect, const std::string& path,
                std::chrono::milliseconds timeout) {
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t* zh = zookeeper_init(connect.c_str(), nullptr, 10000, nullptr, nullptr, 0);
  ZNode node;
  if (zh == nullptr) return node;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    char buffer[4096];
    int length = sizeof buffer;
    const int rc = zoo_get(zh, path.c_str(), 0, buffer, &length, nullptr);
    if (rc == ZOK) {
      node.state = ZNode::State::found;
      node.data.assign(buffer, static_cast<size_t>(length > 0 ? length : 0));
      break;
    }
    if (rc == ZNONODE) {
      node.state = ZNode::State::absent;
      break;
    }
    // Not connected yet: the C client has no blocking connect to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  zookeeper_close(zh);
  return node;
}

}  // namespace zktest
