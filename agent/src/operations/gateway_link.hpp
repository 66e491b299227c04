// The agent's link to the fencing-gateway (each side notices the other's silence): a heartbeat (GET
// /healthz over a kept-alive connection) every interval; no answer for `heartbeatTimeout` marks the
// link down, the next answer marks it up again (the client reconnects by itself). Detection is
// bounded by heartbeatTimeout + heartbeatInterval. The gateway sees the agent's instance id on
// every heartbeat (`?instance=`), so it can tell when an agent has gone quiet. Interval 0 disables
// the heartbeat and the link counts as up.
#pragma once

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "shard_routes.hpp"
#include "zkagent/agent/config.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"

namespace zkagent::agent::detail {

// TLS for every client that talks to the gateway (operations, heartbeats, lease batches).
inline std::optional<http::ClientTls> gatewayClientTls(const Config::Gateway& config) {
  if (!config.tls) return std::nullopt;
  return http::ClientTls{.ca = config.tls->ca, .cert = config.tls->cert, .key = config.tls->key};
}

class GatewayLink : public std::enable_shared_from_this<GatewayLink> {
 public:
  using ChangeHandler = std::function<void(bool up)>;

  // `failures` counts every failed or timed-out heartbeat, where it happens (the agent's metric).
  GatewayLink(boost::asio::io_context& io, const Config::Gateway& config, std::string instanceId,
              metrics::Counter& failures, std::shared_ptr<ShardRoutes> routes);

  void start(ChangeHandler onChange);  // onChange runs on the io_context
  void stop();

  bool up() const { return up_.load(); }
  bool heartbeatEnabled() const { return config_.heartbeatInterval.count() > 0; }
  // Time since the last answered heartbeat; nullopt before the first one.
  std::optional<std::chrono::milliseconds> sinceLastAnswer() const;
  uint64_t missedHeartbeats() const { return static_cast<uint64_t>(failures_.value()); }

  // POST /v1/ops on the io_context; `done` runs there (at most connect + 2 x request timeout
  // later). With a cluster of gateways (docs/gateway-cluster.md) the operation goes to the owner
  // of the account's shard (ShardRoutes), else to the configured gateway, and one 421 is followed
  // to the owner it names.
  void forward(const std::string& account, std::string body,
               std::function<void(http::ClientResponse)> done);

 private:
  // The client for `account`'s shard owner when one is known, else the configured gateway's.
  http::Client& route(const std::string& account);
  http::Client& peer(const std::string& url);
  void tick();
  void answered(bool ok);
  void setUp(bool up);

  const Config::Gateway config_;
  const std::string heartbeatTarget_;
  boost::asio::steady_timer timer_;
  http::Client heartbeats_;  // its own connection: a beat never queues behind operations
  http::Client operations_;
  boost::asio::io_context& io_;
  const std::shared_ptr<ShardRoutes> routes_;
  std::mutex peersMu_;  // one client per shard owner, made on first use
  std::map<std::string, std::unique_ptr<http::Client>, std::less<>> peers_;
  std::atomic<bool> up_{false};
  std::atomic<bool> stopped_{false};
  metrics::Counter& failures_;
  bool inFlight_ = false;  // timer/handler state, only touched on the io_context
  mutable std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> lastAnswer_;
  ChangeHandler onChange_;
};

}  // namespace zkagent::agent::detail
