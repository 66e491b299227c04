// Privacy rules in ZooKeeper (cluster mode; docs/gateway-cluster.md "Presence"): a rule set PUT
// at any gateway is written to `{root}/@gateway-cluster/privacy/{account}` (the privacyJson of
// presence_privacy.hpp) and every gateway watches those nodes, so the owner of an account's shard
// applies rules set anywhere and they survive the loss of any gateway.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "zkagent/election.hpp"

namespace zkagent::gateway {

class ClusterPrivacyRules {
 public:
  // `apply(account, data)`: data nullopt when the account's node is gone.
  using Handler =
      std::function<void(const std::string& account, const std::optional<std::string>& data)>;

  // Runs its ZooKeeper calls on `group`'s session, on `io` (the shards' election thread); `root`
  // is the cluster's root.
  ClusterPrivacyRules(boost::asio::io_context& io, election::ElectionGroup& group,
                      std::string root);

  // On the io thread, once the cluster is verified: reads (and watches) every rule node.
  void start();
  // On the io thread, on every new connection: every watch went with the old one, read again.
  void reconnected();
  // Any thread. Creates or sets the account's node to `rules`; blocks up to `timeout`: nullopt
  // once ZooKeeper acknowledged it, else why not (not connected: nothing written; the link lost
  // or no answer in time: the write may or may not be applied).
  std::optional<std::string> write(const std::string& account, const std::string& rules,
                                   std::chrono::milliseconds timeout);
  // Any thread. `apply` for every rule node: all of them on start and on every reconnect, then
  // each one created, changed or deleted, on the io thread. An empty function stops the calls
  // (returns once none is running).
  void watch(Handler apply);

 private:
  using Written = std::shared_ptr<std::promise<std::optional<std::string>>>;

  void readAll();
  void readChildren(std::uint64_t round);
  void readNode(const std::string& account, std::uint64_t round);
  void deliver(const std::string& account, const std::optional<std::string>& data);
  void setNode(const std::string& path, const std::string& data, int attempts, const Written& done);
  void createNode(const std::string& path, const std::string& data, int attempts,
                  const Written& done);
  static void failed(const Written& done, election::ZkError error);

  boost::asio::io_context& io_;
  election::ElectionGroup& group_;
  const std::string root_;
  bool started_ = false;     // io thread only
  std::mutex handlerMutex_;  // held while the handler runs, so that clearing it waits for it
  Handler handler_;
  std::set<std::string> known_;  // io thread only: rule nodes read on this connection
  std::uint64_t round_ = 0;      // io thread only: readAll() calls so far
};

}  // namespace zkagent::gateway
