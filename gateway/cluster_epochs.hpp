// The cluster's presence epoch (docs/gateway-cluster.md "Presence"): the counter
// `{root}/@gateway-cluster/epoch`, bumped by compare-and-set each time this gateway takes a shard,
// is the high part of the presence versions it publishes for that shard, so that a new owner's
// versions start above every earlier owner's and never go backwards when a shard moves.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/election.hpp"

namespace zkagent::gateway {

// The counter's decimal text (a trailing newline or space allowed); nullopt when it is not one.
std::optional<std::uint64_t> parseEpoch(std::string_view text);

class ClusterEpochs {
 public:
  // Runs its ZooKeeper calls on `group`'s session and its retries on `io` (the shards' election
  // thread); `root` is the cluster's root, `shards` its shard count.
  ClusterEpochs(boost::asio::io_context& io, election::ElectionGroup& group, std::string root,
                std::uint32_t shards);

  // On the io thread: shard `index` taken under `token` (bumps the counter until it succeeds or
  // the take ends), or lost (token -1).
  void onTakeOrLoss(std::uint32_t index, std::int64_t token);
  // Thread-safe, no I/O. The epoch of the take `token` of shard `index`; 0 while its bump is not
  // acknowledged (no presence write is taken until then).
  std::uint64_t epochFor(std::uint32_t index, std::int64_t token) const;
  // The latest take's epoch, kept after the shard is lost (0: never taken by this process).
  std::uint64_t latest(std::uint32_t index) const;

 private:
  struct Take {
    std::int64_t token = -1;       // the current take (-1: not owned)
    std::int64_t epochToken = -1;  // the take `epoch` was bumped for
    std::uint64_t epoch = 0;       // the latest take's epoch, kept after a loss
  };

  bool stillTaken(std::uint32_t index, std::int64_t token) const;
  void bump(std::uint32_t index, std::int64_t token);
  void retry(std::uint32_t index, std::int64_t token, election::ZkError error,
             std::chrono::milliseconds after);
  void got(std::uint32_t index, std::int64_t token, std::uint64_t epoch);

  boost::asio::io_context& io_;
  election::ElectionGroup& group_;
  const std::string path_;
  mutable std::mutex mutex_;
  std::vector<Take> takes_;  // by shard index, under mutex_
};

}  // namespace zkagent::gateway
