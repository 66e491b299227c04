#pragma once
// Three (or any odd number of) real ZooKeeper servers on loopback forming one ensemble.
//
// The constructor returns once every server has joined the quorum (`srvr` says leader or
// follower; `ruok` only says the process is up). Tests kill, pause or restart single servers:
//
//   zktest::ZooKeeperEnsemble zk;
//   Client client(zk.connectString());        // all three servers
//   zk.kill9(*zk.leaderIndex());              // the ensemble elects a new leader
//   zk.awaitQuorum();
//   zk.restart(i);                            // back on its ports with its data, in the quorum

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zktest/zookeeper_server.hpp"

namespace zktest {

class ZooKeeperEnsemble {
 public:
  explicit ZooKeeperEnsemble(std::size_t size = 3, ZooKeeperOptions options = {});

  std::size_t size() const { return servers_.size(); }
  // "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
  std::string connectString() const;
  // Server i (0-based) for its port, pid, four-letter words, pause()/resume().
  ZooKeeperServer& server(std::size_t i) { return *servers_.at(i); }

  void kill9(std::size_t i) { server(i).kill9(); }
  void stop(std::size_t i) { server(i).stop(); }
  // Starts server i again (stopping it first if it runs) and waits until it is back in the quorum.
  void restart(std::size_t i) { server(i).restart(); }

  // The server that currently leads, if one answers that it does.
  std::optional<std::size_t> leaderIndex() const;
  // Waits until a majority of the servers serve (one leader, the rest followers); throws with
  // each server's state and log tail if that does not happen within `timeout`.
  void awaitQuorum(milliseconds timeout = milliseconds(60000)) const;

 private:
  // "leader", "follower", or why the server is not serving; asks with a short timeout.
  std::string mode(std::size_t i) const;

  std::vector<std::unique_ptr<ZooKeeperServer>> servers_;
};

}  // namespace zktest
