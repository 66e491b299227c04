// Where an account's operations and lease writes go when the gateway is a cluster
// (docs/gateway-cluster.md): the owner of the account's shard. The one routing rule, shared by the
// gateway link (operations) and the lease writer (presence): the owner the shard's `active` node
// names, watched with a LeaderObserver on {root}/@gateway-shards once the agent has read the
// cluster's shard count; else the owner a 421 named; else the configured gateway (nullopt).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "zkagent/agent/config.hpp"
#include "zkagent/election.hpp"
#include "zkagent/http.hpp"

namespace zkagent::agent::detail {

// Points `options` at a shard owner's URL (as ownerOf or learn gave it: already checked).
void aimAt(http::ClientOptions& options, const std::string& ownerUrl);

class ShardRoutes {
 public:
  explicit ShardRoutes(const Config::Gateway& gateway);

  // The cluster node read: watch `shards` shard leaders under `shardsRoot` on a session of its own
  // (the observer's), reading every shard at once so the first batch already has its owners. Once;
  // a later call with another count is ignored (the count is fixed when the cluster is created).
  void watch(boost::asio::io_context& io, election::SessionOptions session,
             const std::string& shardsRoot, std::uint32_t shards);
  // Closes the observer's session (the agent's stop, while its io_context runs); routes fall back
  // to 421s and the configured URL.
  void stop();

  // Thread-safe. The owner URL of `account`'s shard, or nullopt: the configured gateway.
  std::optional<std::string> ownerOf(std::string_view account) const;
  // A 421's owner: remembered for its shard; nullopt when the answer names none we may dial
  // (another scheme than the configured gateway's, a malformed body).
  std::optional<std::string> learn(const http::ClientResponse& misdirected);
  // The owner a 421 named for `account`'s shard did not answer: forgotten.
  void forget(std::string_view account);

 private:
  bool dialable(const std::string& url) const;

  const bool tls_;
  mutable std::mutex mu_;
  std::uint32_t shards_ = 0;  // 0: no cluster known
  std::unique_ptr<election::LeaderObserver> observer_;
  std::map<std::string, std::string, std::less<>> learned_;  // shard -> owner URL, from 421s
};

}  // namespace zkagent::agent::detail
