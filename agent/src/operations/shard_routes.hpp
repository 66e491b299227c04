// Where an account's operations and lease writes go when the gateway is a cluster
// (docs/gateway-cluster.md): the owner of the account's shard. The one routing rule, shared by the
// gateway link (operations) and the lease writer (presence): the owner the shard's `active` node
// names, watched with a LeaderObserver on {root}/@gateway-shards once the agent has read the
// cluster's shard count; else the owner a 421 named; else the configured gateway (nullopt). An
// owner whose heartbeat says it is down (owner_links.hpp) is passed over: the configured gateway
// instead, which answers 421 or 503 at once where the dead owner would cost a timeout.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

  // Whether an owner is known unreachable now (OwnerLinks::down); consulted by every route. Set
  // once, before the routes are used; unset, every owner counts as reachable.
  void avoidDown(std::function<bool(const std::string& url)> down);

  struct Route {
    std::optional<std::string> owner;       // where to send; nullopt: the configured gateway
    std::optional<std::string> passedOver;  // the shard's owner, not used: its link is down
  };
  // Thread-safe. Where `account`'s operations and lease writes go now.
  Route routeOf(std::string_view account) const;
  std::optional<std::string> ownerOf(std::string_view account) const {
    return routeOf(account).owner;
  }
  // A 421's owner: remembered for its shard, and the owner to send the request to once more;
  // nullopt when the answer names none we may dial (another scheme than the configured
  // gateway's, a malformed body), or when its link is down (passedOver names it).
  Route learn(const http::ClientResponse& misdirected);
  // The owner a 421 named for `account`'s shard did not answer: forgotten.
  void forget(std::string_view account);

  // The owners the watched map names now (what OwnerLinks beats to). `complete` when every
  // shard's node is read: a shard between a watch event and its read again, or a session that is
  // not connected, leaves it false, and then an owner missing from `urls` may be only unseen.
  struct Owners {
    std::set<std::string> urls;
    bool complete = false;
  };
  Owners owners() const;

 private:
  bool dialable(const std::string& url) const;
  bool isDown(const std::string& url) const { return down_ && down_(url); }

  const bool tls_;
  std::function<bool(const std::string& url)> down_;
  mutable std::mutex mu_;
  std::uint32_t shards_ = 0;  // 0: no cluster known
  std::unique_ptr<election::LeaderObserver> observer_;
  std::map<std::string, std::string, std::less<>> learned_;  // shard -> owner URL, from 421s
};

}  // namespace zkagent::agent::detail
