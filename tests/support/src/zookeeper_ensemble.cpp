#include "zktest/zookeeper_ensemble.hpp"

#include <algorithm>
#include <stdexcept>

#include "loopback.hpp"

namespace zktest {

ZooKeeperEnsemble::ZooKeeperEnsemble(std::size_t size, ZooKeeperOptions options) {
  if (size == 0 || size % 2 == 0) {
    throw std::invalid_argument("a ZooKeeper ensemble needs an odd number of servers, not " +
                                std::to_string(size));
  }
  const Deadline deadline(options.startTimeout);
  for (int attempt = 1;; ++attempt) {
    const std::vector<std::uint16_t> ports = detail::reserveLoopbackPorts(3 * size);
    std::vector<ZooKeeperServer::Peer> peers;
    for (std::size_t i = 0; i < size; ++i)
      peers.push_back({ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]});
    // All members start at once: none can serve before a majority runs.
    servers_.clear();
    for (std::size_t i = 0; i < size; ++i) {
      servers_.push_back(std::unique_ptr<ZooKeeperServer>(
          new ZooKeeperServer(options, static_cast<int>(i + 1), peers)));
    }
    try {
      for (auto& member : servers_) member->awaitServing(deadline);
      return;
    } catch (const std::runtime_error&) {
      const bool portLost = std::any_of(servers_.begin(), servers_.end(),
                                        [](const auto& member) { return member->lostPortRace(); });
      if (attempt == detail::maxPortRaceAttempts || !portLost) throw;
    }
  }
}

std::string ZooKeeperEnsemble::connectString() const {
  std::string text;
  for (const auto& member : servers_) {
    if (!text.empty()) text += ',';
    text += member->connectString();
  }
  return text;
}

std::string ZooKeeperEnsemble::mode(std::size_t i) const {
  const ZooKeeperServer& member = *servers_.at(i);
  if (!member.running()) return "not running";
  const auto status = fourLetterWord(member.port(), "srvr", milliseconds(500));
  if (!status) return "no answer";
  for (const char* role : {"leader", "follower"}) {
    if (status->find(std::string("Mode: ") + role) != std::string::npos) return role;
  }
  return "not serving";
}

std::optional<std::size_t> ZooKeeperEnsemble::leaderIndex() const {
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (mode(i) == "leader") return i;
  }
  return std::nullopt;
}

void ZooKeeperEnsemble::awaitQuorum(milliseconds timeout) const {
  const auto quorumServes = [&] {
    std::size_t leaders = 0, followers = 0;
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      const std::string role = mode(i);
      leaders += role == "leader";
      followers += role == "follower";
    }
    return leaders == 1 && leaders + followers > servers_.size() / 2;
  };
  if (eventually(quorumServes, timeout, milliseconds(50))) return;
  std::string report = "no quorum in the ensemble " + connectString() + " after " +
                       std::to_string(timeout.count()) + " ms:\n";
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    report += "server " + std::to_string(i) + " (" + servers_[i]->connectString() +
              "): " + mode(i) + "\n" + servers_[i]->logTail(20);
  }
  throw std::runtime_error(report);
}

}  // namespace zktest
