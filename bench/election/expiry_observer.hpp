#pragma once
// A bystander ZooKeeper session that notes the moment a crashed leader's session expired: it
// watches the children of one account's candidate queue, and the server deletes the dead
// session's ephemeral node there when (and only when) it expires the session.
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "zkagent/election.hpp"

namespace zkbench {

class ExpiryObserver {
 public:
  // Connects to `zk`; throws when no session comes within 30 s.
  explicit ExpiryObserver(const std::string& zk);
  ~ExpiryObserver();
  ExpiryObserver(const ExpiryObserver&) = delete;
  ExpiryObserver& operator=(const ExpiryObserver&) = delete;

  // Arms a child watch on `queuePath` and returns once the server has it; forgets an earlier fire.
  void watch(const std::string& queuePath);
  // Unix ns at which the watch fired, or 0 while it has not.
  int64_t firedAtNs() const { return firedAtNs_.load(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<zkagent::election::ElectionGroup> group_;
  std::thread thread_;
  std::atomic<int64_t> firedAtNs_{0};
};

}  // namespace zkbench
