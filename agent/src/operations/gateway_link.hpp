// The agent's link to the fencing-gateway (each side notices the other's silence): a heartbeat (GET
// /healthz over a kept-alive connection) every interval; no answer for `heartbeatTimeout` marks the
// link down, the next answer marks it up again (the client reconnects by itself). Detection is
// bounded by heartbeatTimeout + heartbeatInterval. The gateway sees the agent's instance id on
// every heartbeat (`?instance=`), so it can tell when an agent has gone quiet. Interval 0 disables
// the heartbeat and the link counts as up. The same Heartbeat beats to every shard owner of a
// gateway cluster (owner_links.hpp).
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

// A client of the gateway at config.address (aimAt moves it to an owner's URL) on `io`: the
// link's clients run on the agent's own io_context (no thread hand-off per request, and no worker
// thread that could run a completion after the io_context is gone).
http::ClientOptions gatewayClientOptions(boost::asio::io_context& io, const Config::Gateway& config,
                                         std::chrono::milliseconds timeout, size_t idle);

// One peer's heartbeat: GET `target` every interval on a kept-alive connection of its own (a beat
// never queues behind operations); the peer is up from an answer until `heartbeatTimeout` passes
// without one, down from then (or from `heartbeatTimeout` after start when none came), and
// neither before it was first judged. Only with heartbeatInterval > 0.
class Heartbeat : public std::enable_shared_from_this<Heartbeat> {
 public:
  using ChangeHandler = std::function<void(bool up)>;

  // `failures` counts every failed or timed-out beat, where it happens (the caller's metric).
  Heartbeat(boost::asio::io_context& io, http::ClientOptions client, std::string target,
            const Config::Gateway& config, metrics::Counter& failures);

  void start(ChangeHandler onChange);  // onChange runs on the io_context, when up() changes
  void stop();

  bool up() const { return state_.load() == State::Up; }
  bool down() const { return state_.load() == State::Down; }
  // Time since the last answered beat; nullopt before the first one.
  std::optional<std::chrono::milliseconds> sinceLastAnswer() const;
  uint64_t failures() const { return static_cast<uint64_t>(failures_.value()); }

 private:
  enum class State { Unjudged, Up, Down };
  void tick();
  void answered(bool ok);
  void set(State next);

  const std::chrono::milliseconds interval_, timeout_;
  const std::string target_;
  boost::asio::steady_timer timer_;
  http::Client client_;
  std::atomic<State> state_{State::Unjudged};
  std::atomic<bool> stopped_{false};
  metrics::Counter& failures_;
  bool inFlight_ = false;  // timer/handler state, only touched on the timer's strand
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point startedAt_;
  std::optional<std::chrono::steady_clock::time_point> lastAnswer_;
  ChangeHandler onChange_;
};

class GatewayLink : public std::enable_shared_from_this<GatewayLink> {
 public:
  using ChangeHandler = Heartbeat::ChangeHandler;

  // `failures` counts every failed or timed-out heartbeat, where it happens (the agent's metric).
  GatewayLink(boost::asio::io_context& io, const Config::Gateway& config, std::string instanceId,
              metrics::Counter& failures, std::shared_ptr<ShardRoutes> routes);

  void start(ChangeHandler onChange);  // onChange runs on the io_context
  void stop();

  bool up() const { return !beat_ || beat_->up(); }
  bool heartbeatEnabled() const { return beat_ != nullptr; }
  // Time since the last answered heartbeat; nullopt before the first one.
  std::optional<std::chrono::milliseconds> sinceLastAnswer() const;
  uint64_t missedHeartbeats() const { return beat_ ? beat_->failures() : 0; }

  // POST /v1/ops on the io_context; `done` runs there (at most connect + 2 x request timeout
  // later). With a cluster of gateways (docs/gateway-cluster.md) the operation goes to the owner
  // of the account's shard (ShardRoutes: not to an owner whose link is down), else to the
  // configured gateway, and one 421 is followed to the owner it names unless that owner's link
  // is down: then the caller gets 503 shard_owner_unreachable at once, as when the shard's owner
  // is down and so is the configured gateway.
  void forward(const std::string& account, std::string body,
               std::function<void(http::ClientResponse)> done);

 private:
  // The client for a shard owner's URL, made on first use.
  http::Client& peer(const std::string& url);
  // The quick refusal for an operation whose shard owner cannot be reached now.
  static http::ClientResponse ownerUnreachable(const std::string& owner);

  const Config::Gateway config_;
  std::shared_ptr<Heartbeat> beat_;  // null: heartbeats disabled
  http::Client operations_;
  boost::asio::io_context& io_;
  const std::shared_ptr<ShardRoutes> routes_;
  std::mutex peersMu_;  // one client per shard owner, made on first use
  std::map<std::string, std::unique_ptr<http::Client>, std::less<>> peers_;
};

}  // namespace zkagent::agent::detail
