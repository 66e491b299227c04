#include "gateway_link.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

namespace zkagent::agent::detail {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {
// Both clients run on the agent's own io_context: no thread hand-off per request, and no worker
// thread that could run a completion (holding this link) after the io_context is gone.
http::ClientOptions clientOptions(asio::io_context& io, const Config::Gateway& config,
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
}  // namespace

GatewayLink::GatewayLink(asio::io_context& io, const Config::Gateway& config,
                         std::string instanceId, metrics::Counter& failures,
                         std::shared_ptr<ShardRoutes> routes)
    : config_(config),
      heartbeatTarget_("/healthz?instance=" + instanceId),
      timer_(asio::make_strand(io)),  // tick and answered never run at once
      heartbeats_(clientOptions(io, config, config.heartbeatTimeout, 1)),
      operations_(clientOptions(io, config, config.requestTimeout, 64)),
      io_(io),
      routes_(std::move(routes)),
      failures_(failures) {
  if (!heartbeatEnabled()) up_ = true;
}

void GatewayLink::start(ChangeHandler onChange) {
  onChange_ = std::move(onChange);
  if (heartbeatEnabled()) tick();
}

void GatewayLink::stop() {
  stopped_ = true;
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
}

std::optional<std::chrono::milliseconds> GatewayLink::sinceLastAnswer() const {
  std::lock_guard lock(mu_);
  if (!lastAnswer_) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *lastAnswer_);
}

void GatewayLink::forward(const std::string& account, std::string body,
                          std::function<void(http::ClientResponse)> done) {
  auto& client = route(account);
  const bool routed = &client != &operations_;
  auto retry = std::make_shared<std::string>(body);  // for one 421 or a lost owner
  client.asyncRequest(http::Method::Post, "/v1/ops", std::move(body),
                      [self = shared_from_this(), account, retry, routed,
                       done = std::move(done)](http::ClientResponse answer) mutable {
                        if (answer.status == 421) {
                          if (auto owner = self->routes_->learn(answer)) {
                            self->peer(*owner).asyncRequest(http::Method::Post, "/v1/ops",
                                                            std::move(*retry), std::move(done));
                            return;
                          }
                        }
                        if (!answer.delivered() && routed) {
                          // The owner we were sent to is gone (its shards move when its session
                          // expires): a 421's owner is forgotten; the watched map follows the move.
                          self->routes_->forget(account);
                        }
                        done(std::move(answer));
                      });
}

http::Client& GatewayLink::route(const std::string& account) {
  const auto owner = routes_->ownerOf(account);
  return owner ? peer(*owner) : operations_;
}

http::Client& GatewayLink::peer(const std::string& url) {
  std::lock_guard lock(peersMu_);
  auto& client = peers_[url];
  if (!client) {
    auto options = clientOptions(io_, config_, config_.requestTimeout, 64);
    aimAt(options, url);
    client = std::make_unique<http::Client>(std::move(options));
  }
  return *client;
}

// Timer: judge the link, then send the next beat unless the previous one is still out (a
// blackholed beat is bounded by the client's request timeout == heartbeatTimeout).
void GatewayLink::tick() {
  if (stopped_) return;
  {
    std::lock_guard lock(mu_);
    const bool fresh = lastAnswer_ && Clock::now() - *lastAnswer_ <= config_.heartbeatTimeout;
    if (!fresh && up_) setUp(false);
  }
  if (!inFlight_) {
    inFlight_ = true;
    heartbeats_.asyncRequest(http::Method::Get, heartbeatTarget_, "",
                             [self = shared_from_this()](http::ClientResponse response) {
                               const bool ok = response.delivered() && response.status == 200;
                               asio::post(self->timer_.get_executor(),
                                          [self, ok] { self->answered(ok); });
                             });
  }
  timer_.expires_after(config_.heartbeatInterval);
  timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->tick();
  });
}

void GatewayLink::answered(bool ok) {
  inFlight_ = false;
  if (stopped_) return;
  if (!ok) {
    failures_.inc();
    return;
  }
  std::lock_guard lock(mu_);
  lastAnswer_ = Clock::now();
  if (!up_) setUp(true);
}

void GatewayLink::setUp(bool up) {
  up_ = up;
  if (onChange_) asio::post(timer_.get_executor(), [cb = onChange_, up] { cb(up); });
}

}  // namespace zkagent::agent::detail
