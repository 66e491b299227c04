#include "gateway_link.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

namespace zkagent::agent::detail {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

http::ClientOptions gatewayClientOptions(asio::io_context& io, const Config::Gateway& config,
                                         std::chrono::milliseconds timeout, size_t idle) {
  http::ClientOptions options;
  options.io = &io;
  options.host = config.address.host;
  options.port = config.address.port;
  options.connectTimeout = std::min(timeout, std::chrono::milliseconds(2000));
  options.requestTimeout = timeout;
  options.bearerToken = config.token;
  options.tls = gatewayClientTls(config);
  options.maxIdleConnections = idle;
  return options;
}

// ---------------------------------------------------------------------------------------------
// Heartbeat

Heartbeat::Heartbeat(asio::io_context& io, http::ClientOptions client, std::string target,
                     const Config::Gateway& config, metrics::Counter& failures)
    : interval_(config.heartbeatInterval),
      timeout_(config.heartbeatTimeout),
      target_(std::move(target)),
      timer_(asio::make_strand(io)),  // tick and answered never run at once
      client_(std::move(client)),
      failures_(failures) {}

void Heartbeat::start(ChangeHandler onChange) {
  onChange_ = std::move(onChange);
  {
    std::lock_guard lock(mu_);
    startedAt_ = Clock::now();
  }
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->tick(); });
}

void Heartbeat::stop() {
  stopped_ = true;
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
}

std::optional<std::chrono::milliseconds> Heartbeat::sinceLastAnswer() const {
  std::lock_guard lock(mu_);
  if (!lastAnswer_) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *lastAnswer_);
}

// Timer: judge the peer, then send the next beat unless the previous one is still out (a
// blackholed beat is bounded by the client's request timeout == heartbeatTimeout).
void Heartbeat::tick() {
  if (stopped_) return;
  {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    const bool fresh = lastAnswer_ && now - *lastAnswer_ <= timeout_;
    // A peer that never answered is down once it has had as long as an answering one gets.
    const bool judged = lastAnswer_ || now - startedAt_ > timeout_;
    if (!fresh && judged && !down()) set(State::Down);
  }
  if (!inFlight_) {
    inFlight_ = true;
    client_.asyncRequest(
        http::Method::Get, target_, "", [self = shared_from_this()](http::ClientResponse response) {
          const bool ok = response.delivered() && response.status == 200;
          asio::post(self->timer_.get_executor(), [self, ok] { self->answered(ok); });
        });
  }
  timer_.expires_after(interval_);
  timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->tick();
  });
}

void Heartbeat::answered(bool ok) {
  inFlight_ = false;
  if (stopped_) return;
  if (!ok) {
    failures_.inc();
    return;
  }
  std::lock_guard lock(mu_);
  lastAnswer_ = Clock::now();
  if (!up()) set(State::Up);
}

void Heartbeat::set(State next) {
  const bool wasUp = up();
  state_ = next;
  if (onChange_ && wasUp != up()) {
    asio::post(timer_.get_executor(), [self = shared_from_this(), up = up()] {
      if (!self->stopped_) self->onChange_(up);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// GatewayLink

GatewayLink::GatewayLink(asio::io_context& io, const Config::Gateway& config,
                         std::string instanceId, metrics::Counter& failures,
                         std::shared_ptr<ShardRoutes> routes)
    : config_(config),
      operations_(gatewayClientOptions(io, config, config.requestTimeout, 64)),
      io_(io),
      routes_(std::move(routes)) {
  if (config.heartbeatInterval.count() > 0) {
    beat_ = std::make_shared<Heartbeat>(
        io, gatewayClientOptions(io, config, config.heartbeatTimeout, 1),
        "/healthz?instance=" + instanceId, config, failures);
  }
}

void GatewayLink::start(ChangeHandler onChange) {
  if (beat_) beat_->start(std::move(onChange));
}

void GatewayLink::stop() {
  if (beat_) beat_->stop();
}

std::optional<std::chrono::milliseconds> GatewayLink::sinceLastAnswer() const {
  return beat_ ? beat_->sinceLastAnswer() : std::nullopt;
}

http::ClientResponse GatewayLink::ownerUnreachable(const std::string& owner) {
  http::ClientResponse answer;
  answer.status = 503;
  answer.contentType = "application/json";
  answer.body = nlohmann::json{{"error", "shard_owner_unreachable"}, {"owner", owner}}.dump();
  return answer;
}

void GatewayLink::forward(const std::string& account, std::string body,
                          std::function<void(http::ClientResponse)> done) {
  const auto route = routes_->routeOf(account);
  if (route.passedOver && beat_ && beat_->down()) {
    // The owner is down and so is the configured gateway: nowhere to send it but into a timeout.
    asio::post(io_, [done = std::move(done), answer = ownerUnreachable(*route.passedOver)] {
      done(answer);
    });
    return;
  }
  auto& client = route.owner ? peer(*route.owner) : operations_;
  auto retry = std::make_shared<std::string>(body);  // for one 421
  client.asyncRequest(http::Method::Post, "/v1/ops", std::move(body),
                      [self = shared_from_this(), account, retry, routed = route.owner.has_value(),
                       done = std::move(done)](http::ClientResponse answer) mutable {
                        if (answer.status == 421) {
                          const auto named = self->routes_->learn(answer);
                          if (named.owner) {
                            self->peer(*named.owner)
                                .asyncRequest(http::Method::Post, "/v1/ops", std::move(*retry),
                                              std::move(done));
                            return;
                          }
                          // Its link is down: following it would cost the caller a timeout.
                          if (named.passedOver) return done(ownerUnreachable(*named.passedOver));
                        }
                        if (!answer.delivered() && routed) {
                          // The owner we were sent to is gone (its shards move when its session
                          // expires): a 421's owner is forgotten; the watched map follows the move.
                          self->routes_->forget(account);
                        }
                        done(std::move(answer));
                      });
}

http::Client& GatewayLink::peer(const std::string& url) {
  std::lock_guard lock(peersMu_);
  auto& client = peers_[url];
  if (!client) {
    auto options = gatewayClientOptions(io_, config_, config_.requestTimeout, 64);
    aimAt(options, url);
    client = std::make_unique<http::Client>(std::move(options));
  }
  return *client;
}

}  // namespace zkagent::agent::detail
