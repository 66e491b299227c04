#pragma once
// Records every change of every account's `active` node, as seen from each ZooKeeper server on a
// session of its own (one server down still leaves the others watching). A sample says "at time
// t (ms since the run started), server s showed the account's active node as present (seq,
// instance, session, czxid, creation time) or absent (the account node's pzxid)". zxids order
// samples from different servers: the sample with the larger zxid is the newer state.
//
// Uses ZooKeeper's C client directly (watches with full stats, czxid and pzxid), which the
// product's election::Session does not expose; this is test tooling, not product code.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zkagent::chaos {

struct ActiveSample {
  std::int64_t tMs = 0;
  int server = 0;
  std::string account;
  bool present = false;
  std::int64_t seq = -1;
  std::string instance;
  std::int64_t sessionId = 0;
  // czxid of the node when present (the checker finds the node's life in ZooKeeper's logs by
  // it), pzxid of the account node when absent
  std::int64_t zxid = 0;
};

class ActiveObserver {
 public:
  ActiveObserver(std::vector<std::string> serverHosts, std::string root,
                 std::vector<std::string> accounts, std::chrono::steady_clock::time_point t0);
  ~ActiveObserver();
  ActiveObserver(const ActiveObserver&) = delete;
  ActiveObserver& operator=(const ActiveObserver&) = delete;

  std::vector<ActiveSample> samples() const;
  // The newest state known for the account across servers (largest zxid), if any.
  std::optional<ActiveSample> latest(const std::string& account) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zkagent::chaos
