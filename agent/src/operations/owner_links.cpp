#include "owner_links.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

namespace zkagent::agent::detail {
namespace asio = boost::asio;

OwnerLinks::OwnerLinks(asio::io_context& io, const Config::Gateway& config, std::string instanceId,
                       Families metrics)
    : io_(io),
      config_(config),
      target_("/healthz?instance=" + instanceId),
      metrics_(metrics),
      timer_(asio::make_strand(io)) {}

void OwnerLinks::start(OwnerSource source) {
  if (config_.heartbeatInterval.count() <= 0) return;
  source_ = std::move(source);
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->tick(); });
}

void OwnerLinks::stop() {
  stopped_ = true;
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
  std::lock_guard lock(mu_);
  for (auto& entry : beats_) entry.second->stop();
}

// Timer: the map is read here rather than on its watch events (the observer has none to give),
// so a new owner gets its first beat within one interval of its node being read.
void OwnerLinks::tick() {
  if (stopped_) return;
  follow(source_());
  timer_.expires_after(config_.heartbeatInterval);
  timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->tick();
  });
}

void OwnerLinks::follow(const ShardRoutes::Owners& owners) {
  if (stopped_ || config_.heartbeatInterval.count() <= 0) return;
  std::lock_guard lock(mu_);
  for (const auto& url : owners.urls) {
    if (beats_.contains(url)) continue;
    auto options = gatewayClientOptions(io_, config_, config_.heartbeatTimeout, 1);
    aimAt(options, url);
    auto beat = std::make_shared<Heartbeat>(io_, std::move(options), target_, config_,
                                            metrics_.failures.with({url}));
    auto& up = metrics_.up.with({url});
    up.set(0);
    // The gauge lives as long as the agent's registry: not touched once the links are stopped.
    beat->start([weak = weak_from_this(), &up, url](bool isUp) {
      const auto self = weak.lock();
      if (!self || self->stopped_) return;
      up.set(isUp ? 1 : 0);
      spdlog::log(isUp ? spdlog::level::info : spdlog::level::warn, "shard owner link {} owner={}",
                  isUp ? "up" : "down", url);
    });
    beats_.emplace(url, std::move(beat));
    spdlog::info("shard owner {} in the map: heartbeats start", url);
  }
  if (!owners.complete) return;
  for (auto it = beats_.begin(); it != beats_.end();) {
    if (owners.urls.contains(it->first)) {
      ++it;
      continue;
    }
    it->second->stop();
    metrics_.up.remove({it->first});
    metrics_.failures.remove({it->first});
    spdlog::info("shard owner {} left the map: heartbeats stop", it->first);
    it = beats_.erase(it);
  }
}

bool OwnerLinks::down(const std::string& url) const {
  std::lock_guard lock(mu_);
  const auto it = beats_.find(url);
  return it != beats_.end() && it->second->down();
}

std::vector<OwnerLinks::Link> OwnerLinks::links() const {
  std::lock_guard lock(mu_);
  std::vector<Link> links;
  for (const auto& entry : beats_) {
    const auto& beat = *entry.second;
    links.push_back({entry.first,
                     beat.up()     ? "up"
                     : beat.down() ? "down"
                                   : "unjudged",
                     beat.sinceLastAnswer(), beat.failures()});
  }
  return links;
}

}  // namespace zkagent::agent::detail
