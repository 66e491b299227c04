// An in-process election contender for integration tests: an ElectionGroup on its own io thread
// that records every leadership event, plus blocking helpers (with deadlines) for raw znode work.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "zkagent/election.hpp"
#include "zktest/zookeeper_server.hpp"

namespace zktest {

using namespace std::chrono_literals;
namespace el = zkagent::election;

class Contender {
 public:
  // `digest` ("user:password"): the session authenticates and creates nodes with ACLs.
  Contender(std::string hosts, std::string root, std::string instanceId,
            std::chrono::milliseconds sessionTimeout = 1500ms, std::string digest = {});
  ~Contender();

  el::ElectionGroup& group() { return *group_; }
  const std::string& instanceId() const { return instanceId_; }
  void join(const std::string& account) { group_->join(account); }
  // Graceful stop; returns once the session is closed (or after a deadline).
  void stop();
  // Destroys the group without stop(), the io thread still running (completions in flight find
  // nothing dangling). Only the events remain usable afterwards.
  void abandon();
  // Blocks the io thread, and so every strand of the group, until the returned function is called
  // (or 10 s pass): ZooKeeper's answers and watch events queue up unprocessed meanwhile.
  std::function<void()> holdIo();

  el::GateDecision check(const std::string& account) const { return group_->check(account); }
  el::GateDecision checkStrict(const std::string& account);
  bool leads(const std::string& account) const { return check(account).allowed(); }
  // Accounts this contender's election currently has in LEADER.
  int leadingCount() const;

  std::vector<el::LeadershipEvent> events() const;
  // Number of Acquired events for the account so far.
  size_t acquisitions(const std::string& account) const;
  // The latest Lost event's reason for the account, if any.
  std::optional<el::LossReason> lastLoss(const std::string& account) const;

  // Blocking znode helpers on this contender's session; each throws after `timeout`.
  el::ZkError set(const std::string& path, const std::string& data);
  el::ZkError remove(const std::string& path);
  el::ZkError createEphemeral(const std::string& path, const std::string& data);
  std::optional<std::string> get(const std::string& path);
  std::vector<std::string> children(const std::string& path);
  // Deletes `path` and everything below it; true if `path` itself was deleted.
  bool removeTree(const std::string& path);

 private:
  template <typename T>
  T await(std::function<void(std::function<void(T)>)> start);

  std::string instanceId_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<el::ElectionGroup> group_;
  mutable std::mutex mu_;
  std::vector<el::LeadershipEvent> events_;
  std::thread thread_;
  bool stopped_ = false;
};

// Tests against the binary's shared ZooKeeper server, each under a root of its own.
class SharedZooKeeperTest : public ::testing::Test {
 protected:
  std::string hosts() const { return sharedZooKeeper().connectString(); }
  std::string root = uniqueTestRoot();
};

}  // namespace zktest
