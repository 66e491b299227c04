#include "zktest/znode.hpp"

#include <zookeeper/zookeeper.h>

#include "zktest/deadline.hpp"

namespace zktest {

namespace {

// Runs `attempt` (a ZooKeeper return code) until it gives anything but a connection error, or
// until `timeout`: the C client has no blocking connect to wait on. The last code.
template <typename Attempt>
int withSession(const std::string& connect, std::chrono::milliseconds timeout, Attempt attempt) {
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zhandle_t* zh = zookeeper_init(connect.c_str(), nullptr, 10000, nullptr, nullptr, 0);
  if (zh == nullptr) return ZSYSTEMERROR;
  int rc = ZCONNECTIONLOSS;
  (void)eventually(
      [&] {
        rc = attempt(zh);
        return rc != ZCONNECTIONLOSS && rc != ZINVALIDSTATE && rc != ZOPERATIONTIMEOUT;
      },
      timeout, std::chrono::milliseconds(20));
  zookeeper_close(zh);
  return rc;
}

}  // namespace

ZNode readZNode(const std::string& connect, const std::string& path,
                std::chrono::milliseconds timeout) {
  return readZNodes(connect, {path}, timeout).front();
}

std::vector<ZNode> readZNodes(const std::string& connect, const std::vector<std::string>& paths,
                              std::chrono::milliseconds timeout) {
  std::vector<ZNode> nodes(paths.size());
  std::size_t next = 0;  // the paths before it are read
  withSession(connect, timeout, [&](zhandle_t* zh) {
    for (; next < paths.size(); ++next) {
      char buffer[4096];
      int length = sizeof buffer;
      const int rc = zoo_get(zh, paths[next].c_str(), 0, buffer, &length, nullptr);
      if (rc == ZOK) {
        nodes[next].state = ZNode::State::found;
        nodes[next].data.assign(buffer, static_cast<size_t>(length > 0 ? length : 0));
      } else if (rc == ZNONODE) {
        nodes[next].state = ZNode::State::absent;
      } else {
        return rc;
      }
    }
    return static_cast<int>(ZOK);
  });
  return nodes;
}

bool writeZNode(const std::string& connect, const std::string& path, const std::string& data,
                std::chrono::milliseconds timeout) {
  const int rc = withSession(connect, timeout, [&](zhandle_t* zh) {
    for (auto slash = path.find('/', 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      const int created = zoo_create(zh, path.substr(0, slash).c_str(), nullptr, -1,
                                     &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
      if (created != ZOK && created != ZNODEEXISTS) return created;
    }
    int done = zoo_set(zh, path.c_str(), data.data(), static_cast<int>(data.size()), -1);
    if (done == ZNONODE) {
      done = zoo_create(zh, path.c_str(), data.data(), static_cast<int>(data.size()),
                        &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    }
    return done;
  });
  return rc == ZOK;
}

}  // namespace zktest
