// Reads one znode with the ZooKeeper C client, for tests that check what a process wrote (or did
// not write) and tests that act as the holder of an account's `active` node.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace zktest {

struct ZNode {
  enum class State { found, absent, unreachable } state = State::unreachable;
  std::string data;  // when found
};

// `path` at the server(s) `connect`; unreachable when no answer came within `timeout`, so that a
// test asserting absence never passes on a server it could not ask.
ZNode readZNode(const std::string& connect, const std::string& path,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));
// Every path of `paths` on one session, in order, as readZNode reads one; `timeout` is for all of
// them together.
std::vector<ZNode> readZNodes(const std::string& connect, const std::vector<std::string>& paths,
                              std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Sets `path` (a persistent node, created with its parents when missing) to `data`; false when
// no server answered within `timeout`.
bool writeZNode(const std::string& connect, const std::string& path, const std::string& data,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace zktest
