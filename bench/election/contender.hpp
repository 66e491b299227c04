#pragma once
// One election process under benchmark: zk-elect, or a peer driver (kazoo, Curator) speaking the
// same line protocol on stdout:
//   SESSION <unix_ns> <negotiated_timeout_ms> | READY | LEADER <account> <token> <unix_ns> | LOST
//   ...
// Every process stands for the same accounts (one per line of an accounts file) under one root.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "zkagent/naming.hpp"
#include "zktest/child_process.hpp"

namespace zkbench {

using std::chrono::milliseconds;

// How to start one implementation, and where its candidate nodes of an account live.
struct Implementation {
  std::string name;  // "zkagent", "floor", "kazoo", "curator"
  std::string program;
  std::vector<std::string> leadingArgs;  // before the common --zk ... arguments
  bool queueInMembers;  // the candidates' parent: {root}/{account}/members, else {root}/{account}

  std::string queuePath(const std::string& root, const std::string& account) const {
    return queueInMembers ? zkagent::naming::membersPath(root, account)
                          : zkagent::naming::accountPath(root, account);
  }
};

// zk-elect: `zkElect`, or this build's when empty.
Implementation zkagentImplementation(const std::filesystem::path& zkElect);
// election-floor-probe (floor_probe.cpp), this build's: the layout's unavoidable work on a raw
// client, the floor the others are measured against. `multiBytes` > 0: its takeover multis carry
// at most that many bytes of ops (else the server's limit, jute.maxbuffer).
Implementation floorImplementation(size_t multiBytes);
// /usr/bin/python3 bench/peers/kazoo_peer.py.
Implementation kazooImplementation(const std::filesystem::path& peersDir);
// Compiles bench/peers/CuratorPeer.java into `classesDir` with javac (throws with javac's output if
// that fails) and runs it on the Debian Curator jars.
Implementation curatorImplementation(const std::filesystem::path& peersDir,
                                     const std::filesystem::path& classesDir);

int64_t unixNanos();

// When the lines of one kind came, in ms after a moment: the first, the middle and the last, and
// the longest pause between two of them with how many lines came before it. A pause is waiting,
// an even spread is work.
struct LineTimeline {
  size_t lines = 0;  // 0: none came
  double firstMs = 0, halfMs = 0, lastMs = 0, longestPauseMs = 0;
  size_t pauseAfter = 0;
};

struct ContenderOptions {
  std::string zk;    // connect string
  std::string root;  // election root of this series
  std::filesystem::path accountsFile;
  size_t accounts = 0;  // lines in accountsFile
  milliseconds sessionTimeout{2000};
};

class Contender {
 public:
  Contender(const Implementation& impl, const ContenderOptions& options, std::string instanceId);

  // Each reads output until its condition holds; throws (naming the process) when it does not
  // within `timeout`. Lines that arrive meanwhile are recorded, whatever their order.
  void awaitSession(milliseconds timeout);
  void awaitReady(milliseconds timeout);
  void awaitLeadingAll(milliseconds timeout);

  int64_t spawnedAtNs() const { return spawnedAtNs_; }
  int64_t sessionAtNs() const { return sessionAtNs_; }
  milliseconds negotiatedTimeout() const { return negotiatedTimeout_; }
  // Unix ns of the last LEADER line so far (the moment the process held every account it holds).
  int64_t lastLeaderAtNs() const {
    return leaderAtNs_.empty() ? 0 : *std::max_element(leaderAtNs_.begin(), leaderAtNs_.end());
  }
  size_t leading() const { return leading_.size(); }
  // The LEADER lines (a takeover) and the LOST lines (a stop) from `sinceNs` on.
  LineTimeline timeline(int64_t sinceNs) const { return timelineOf(leaderAtNs_, sinceNs); }
  LineTimeline lossTimeline(int64_t sinceNs) const { return timelineOf(lostAtNs_, sinceNs); }

  // Graceful stop (SIGTERM); returns the unix ns just before the signal.
  int64_t terminate();
  // kill -9 of the whole process group; returns the unix ns just before the signal.
  int64_t crash();
  // Waits for the process to exit after terminate(); kills it if it does not in time.
  void reap(milliseconds timeout);
  std::string name() const { return process_->name(); }

 private:
  void consume(const std::string& line);
  static LineTimeline timelineOf(const std::vector<int64_t>& lineTimes, int64_t sinceNs);
  template <typename Done>
  void pump(Done done, milliseconds timeout, const char* what);

  std::string implName_;
  size_t accounts_;
  int64_t spawnedAtNs_ = 0;
  std::unique_ptr<zktest::ChildProcess> process_;
  int64_t sessionAtNs_ = 0;
  milliseconds negotiatedTimeout_{0};
  bool ready_ = false;
  std::unordered_set<std::string> leading_;
  std::vector<int64_t> leaderAtNs_;  // every LEADER line's time, as read
  std::vector<int64_t> lostAtNs_;    // every LOST line's time, as read
};

}  // namespace zkbench
