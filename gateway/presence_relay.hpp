// Relayed subscriptions (docs/gateway-cluster.md "Relayed subscriptions"): in cluster mode a
// subscriber may connect to any gateway, its edge. For each target whose shard another gateway
// owns, the edge subscribes at the owner for the subscriber's viewer (one RelayLink per owner,
// presenting the credential the subscriber proved itself with, so that the owner applies the
// privacy rules for that viewer) and forwards what the owner sends. Two rules decide what goes
// out of a subscriber session in cluster mode, whichever way it came:
//
//   - a target's status comes from the gateway that owns its shard now: the edge's own model for
//     a target it owns (here()), the owner's link for the others;
//   - a status goes out only when its version is at least the highest one sent for the target
//     (admit()): versions are (epoch << 32) + count and each take of a shard gets a higher epoch,
//     so what a former owner still sends after a move is dropped.
//
// RelayHub is the endpoint's: the shard map as last read (every 100 ms, from the elections'
// in-memory gate) and the live relays it re-routes when the map changes. SubscriberRelay is one
// subscriber session's. Everything runs on the presence model's strand.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "relay_link.hpp"

namespace boost::asio::ssl {
class context;
}

namespace zkagent::gateway {

struct Config;
class ShardOwnership;
class SubscriberRelay;

// What a relay hands its subscriber session.
class RelaySink {
 public:
  virtual ~RelaySink() = default;
  // One target's entry from its owner, the version rule passed: a status ({"target", "status",
  // "version", "observed_at_minute"[, "last_seen_minute"]}) or a removal ({"target", "removed"}).
  virtual void relayed(const std::string& target, nlohmann::ordered_json entry) = 0;
  // An owner refused the subscriber's credentials (401, 403, 400): the session closes with 4008
  // and `why`, so that the subscriber comes back with fresh ones.
  virtual void relayRefused(const std::string& why) = 0;
};

class RelayHub : public std::enable_shared_from_this<RelayHub> {
 public:
  // Who serves a shard's targets, as the edge last saw it.
  struct Route {
    enum class Where { Unknown, Here, There } where = Where::Unknown;
    std::string url;  // There: the owner's subscriber listener
    bool operator==(const Route&) const = default;
  };

  // Throws std::invalid_argument when tls.client_ca cannot be loaded.
  RelayHub(boost::asio::any_io_executor strand, const Config& config, ShardOwnership& shards);
  ~RelayHub();
  void start();  // reads the map now, then every 100 ms
  void stop();

  const Route& routeOf(std::string_view target) const;
  void track(const std::shared_ptr<SubscriberRelay>& relay);

 private:
  friend class SubscriberRelay;
  void pass();

  boost::asio::any_io_executor strand_;
  ShardOwnership& shards_;
  const std::string gatewayId_;
  const std::string bearerToken_;  // presented for a subscriber without a token of its own
  std::unique_ptr<boost::asio::ssl::context> tls_;  // wss:// owners; null without tls.client_ca
  boost::asio::steady_timer timer_;
  std::vector<Route> routes_;  // by shard index
  std::vector<std::weak_ptr<SubscriberRelay>> relays_;
  bool stopped_ = false;
};

class SubscriberRelay : public std::enable_shared_from_this<SubscriberRelay> {
 public:
  // `viewer` as the edge verified it; `credential` the token it was proved with (empty: none, the
  // agents' bearer token is presented). `links` false for a subscription another gateway relays
  // (via): it serves what this gateway owns and never relays in turn.
  SubscriberRelay(std::shared_ptr<RelayHub> hub, std::weak_ptr<RelaySink> sink, std::string viewer,
                  std::string credential, bool links);

  void add(const std::vector<std::string>& targets);
  void remove(const std::vector<std::string>& targets);
  void stop();  // closes every link; nothing reaches the sink afterwards

  // Whether this gateway owns `target`'s shard now (its own model's entries may go out): the
  // elections' in-memory gate, read at each call.
  bool here(const std::string& target) const;
  // The version rule: true, and remembered, when `version` is at least the highest sent.
  bool admit(const std::string& target, std::uint64_t version);

  // The hub saw the shard map change, or a link ended: move targets to their owners' links.
  void reroute();

 private:
  struct Link {
    std::shared_ptr<RelayLink> link;
    std::set<std::string> targets;
  };

  void attach(const std::map<std::string, std::vector<std::string>>& byUrl);
  void detach(const std::string& target);
  void onMessage(const std::string& url, std::string_view text);
  void onEnded(const std::string& url, const RelayLink* which, const RelayLink::End& end);
  void forward(const std::string& url, nlohmann::ordered_json entry);

  std::shared_ptr<RelayHub> hub_;
  std::weak_ptr<RelaySink> sink_;
  const std::string viewer_;
  const std::string credential_;
  const bool links_;
  std::set<std::string> targets_;
  std::map<std::string, std::string> on_;  // target: the url of the link serving it
  std::map<std::string, Link> byUrl_;
  std::unordered_map<std::string, std::uint64_t> sent_;  // target: the highest version sent
  boost::asio::steady_timer retry_;
  std::chrono::milliseconds backoff_;
  bool retryArmed_ = false, stopped_ = false;
};

}  // namespace zkagent::gateway
