// Relayed subscriptions: the shard map as routes, one subscriber's links to the owners of its
// targets, and the two rules on what goes out (presence_relay.hpp).
#include "presence_relay.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>

#include "gateway.hpp"
#include "zkagent/http/tls.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace asio = boost::asio;
using ordered = nlohmann::ordered_json;

namespace {

constexpr std::chrono::milliseconds kMapPass{100};        // how often the shard map is read
constexpr std::chrono::milliseconds kFirstRetry{100};     // a link that ended, opened again after
constexpr std::chrono::milliseconds kLongestRetry{2000};  // ... doubling up to this

std::int64_t unixMinute() {
  return std::chrono::duration_cast<std::chrono::minutes>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<asio::ssl::context> clusterTls(const Config& config) {
  if (config.tlsClientCa.empty()) return nullptr;
  return std::make_unique<asio::ssl::context>(http::clientTlsContext({.ca = config.tlsClientCa}));
}

}  // namespace

// ---- RelayHub

RelayHub::RelayHub(asio::any_io_executor strand, const Config& config, ShardOwnership& shards)
    : strand_(strand),
      shards_(shards),
      gatewayId_(config.gatewayId),
      bearerToken_(config.bearerToken),
      tls_(clusterTls(config)),
      timer_(strand) {}

RelayHub::~RelayHub() = default;

void RelayHub::start() {
  asio::post(strand_, [self = shared_from_this()] { self->pass(); });
}

void RelayHub::stop() {
  asio::post(strand_, [self = shared_from_this()] {
    self->stopped_ = true;
    self->timer_.cancel();
    self->relays_.clear();
  });
}

const RelayHub::Route& RelayHub::routeOf(std::string_view target) const {
  static const Route unknown;
  if (routes_.empty()) return unknown;
  return routes_[naming::shardOf(target, static_cast<std::uint32_t>(routes_.size()))];
}

void RelayHub::track(const std::shared_ptr<SubscriberRelay>& relay) { relays_.push_back(relay); }

// Reads every shard's owner from the elections' in-memory gate; when any changed, every live
// relay moves its targets. Also drops the relays that are gone.
void RelayHub::pass() {
  if (stopped_) return;
  std::vector<Route> routes(shards_.shardCount());
  for (std::uint32_t shard = 0; shard < routes.size(); ++shard) {
    const auto answer = shards_.ownerOfShard(shard);
    if (answer.kind == ShardOwnership::Answer::Kind::Owned) {
      routes[shard].where = Route::Where::Here;
    } else if (answer.kind == ShardOwnership::Answer::Kind::Elsewhere &&
               !answer.subscribeUrl.empty()) {
      routes[shard].where = Route::Where::There;
      routes[shard].url = answer.subscribeUrl;
    }
  }
  const bool changed = routes != routes_;
  routes_ = std::move(routes);
  std::vector<std::shared_ptr<SubscriberRelay>> live;
  std::erase_if(relays_, [&live](const std::weak_ptr<SubscriberRelay>& weak) {
    auto relay = weak.lock();
    if (relay) live.push_back(std::move(relay));
    return !relay;
  });
  if (changed) {
    for (const auto& relay : live) relay->reroute();
  }
  timer_.expires_after(kMapPass);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->pass();
  });
}

// ---- SubscriberRelay

SubscriberRelay::SubscriberRelay(std::shared_ptr<RelayHub> hub, std::weak_ptr<RelaySink> sink,
                                 std::string viewer, std::string credential, bool links)
    : hub_(std::move(hub)),
      sink_(std::move(sink)),
      viewer_(std::move(viewer)),
      credential_(std::move(credential)),
      links_(links),
      retry_(hub_->strand_),
      backoff_(kFirstRetry) {}

void SubscriberRelay::add(const std::vector<std::string>& targets) {
  if (stopped_) return;
  targets_.insert(targets.begin(), targets.end());
  reroute();
}

void SubscriberRelay::remove(const std::vector<std::string>& targets) {
  for (const auto& target : targets) {
    if (targets_.erase(target) == 0) continue;
    detach(target);
    sent_.erase(target);
  }
}

void SubscriberRelay::stop() {
  stopped_ = true;
  retry_.cancel();
  for (auto& entry : byUrl_) entry.second.link->close();
  byUrl_.clear();
  on_.clear();
  sink_.reset();
}

// The elections' gate itself, not the routes of the last pass: the first lease a new owner takes
// for the target may be published before the next pass (and its change would be lost).
bool SubscriberRelay::here(const std::string& target) const {
  return hub_->shards_.owner(target).kind == ShardOwnership::Answer::Kind::Owned;
}

bool SubscriberRelay::admit(const std::string& target, std::uint64_t version) {
  auto [sent, first] = sent_.try_emplace(target, version);
  if (first) return true;
  if (version < sent->second) return false;
  sent->second = version;
  return true;
}

void SubscriberRelay::reroute() {
  if (stopped_ || !links_) return;
  std::map<std::string, std::vector<std::string>> additions;  // url: targets
  for (const auto& target : targets_) {
    const auto& route = hub_->routeOf(target);
    if (route.where == RelayHub::Route::Where::Unknown) continue;  // stays where it is
    const auto on = on_.find(target);
    if (on != on_.end() && route.where == RelayHub::Route::Where::There && on->second == route.url)
      continue;
    if (on != on_.end()) detach(target);
    if (route.where == RelayHub::Route::Where::There) additions[route.url].push_back(target);
  }
  attach(additions);
}

void SubscriberRelay::attach(const std::map<std::string, std::vector<std::string>>& byUrl) {
  for (const auto& addition : byUrl) {
    const std::string& url = addition.first;
    const auto& targets = addition.second;
    auto& link = byUrl_[url];
    if (!link.link) {
      const auto endpoint = parseRelayUrl(url);
      if (!endpoint) {
        spdlog::warn("presence relay: the shard node names '{}', not ws[s]://HOST:PORT", url);
        byUrl_.erase(url);
        continue;
      }
      const std::string& token = credential_.empty() ? hub_->bearerToken_ : credential_;
      RelayLink::Request request;
      request.target =
          "/v1/presence/subscribe?viewer=" + viewer_ + "&targets=&via=" + hub_->gatewayId_;
      if (!token.empty()) request.authorization = "Bearer " + token;
      std::weak_ptr<SubscriberRelay> weak = shared_from_this();
      auto which = std::make_shared<const RelayLink*>(nullptr);
      RelayLink::Handlers handlers;
      handlers.message = [weak, url](std::string_view text) {
        if (auto self = weak.lock()) self->onMessage(url, text);
      };
      handlers.ended = [weak, url, which](const RelayLink::End& end) {
        if (auto self = weak.lock()) self->onEnded(url, *which, end);
      };
      link.link = RelayLink::open(hub_->strand_, *endpoint, hub_->tls_.get(), std::move(request),
                                  std::move(handlers));
      *which = link.link.get();
    }
    for (const auto& target : targets) {
      link.targets.insert(target);
      on_[target] = url;
    }
    link.link->send(ordered{{"type", "add"}, {"targets", targets}}.dump());
  }
}

void SubscriberRelay::detach(const std::string& target) {
  const auto on = on_.find(target);
  if (on == on_.end()) return;
  const auto link = byUrl_.find(on->second);
  on_.erase(on);
  if (link == byUrl_.end()) return;
  link->second.targets.erase(target);
  if (link->second.targets.empty()) {
    link->second.link->close();
    byUrl_.erase(link);
    return;
  }
  link->second.link->send(
      ordered{{"type", "remove"}, {"targets", std::vector<std::string>{target}}}.dump());
}

void SubscriberRelay::onMessage(const std::string& url, std::string_view text) {
  if (stopped_) return;
  auto message = ordered::parse(text, nullptr, false);
  if (message.is_discarded() || !message.is_object()) return;
  const std::string type = message.value("type", "");
  if (type == "snapshot") {
    backoff_ = kFirstRetry;  // the owner answers: the next failure starts the backoff again
    const auto minute = unixMinute();
    for (auto& entry : message["targets"]) {
      if (entry.is_object() && !entry.contains("observed_at_minute")) {
        entry["observed_at_minute"] = minute;
      }
      forward(url, std::move(entry));
    }
  } else if (type == "events") {
    for (auto& entry : message["events"]) forward(url, std::move(entry));
  } else if (type == "error") {
    spdlog::warn("presence relay for {} at {}: {}", viewer_, url, message.value("error", "?"));
  }
}

// One entry from `url`'s owner, if that owner still serves the target and its version is not
// below what was sent.
void SubscriberRelay::forward(const std::string& url, ordered entry) {
  if (!entry.is_object()) return;
  const auto target = entry.find("target");
  if (target == entry.end() || !target->is_string()) return;
  const std::string name = target->get<std::string>();
  const auto on = on_.find(name);
  if (on == on_.end() || on->second != url) return;  // moved on: not this owner's to say
  auto sink = sink_.lock();
  if (!sink) return;
  if (!entry.value("removed", false)) {
    const auto version = entry.find("version");
    if (version == entry.end() || !version->is_number_unsigned()) return;
    if (!admit(name, version->get<std::uint64_t>())) return;
  }
  sink->relayed(name, std::move(entry));
}

void SubscriberRelay::onEnded(const std::string& url, const RelayLink* which,
                              const RelayLink::End& end) {
  const auto link = byUrl_.find(url);
  if (stopped_ || link == byUrl_.end() || link->second.link.get() != which) return;
  for (const auto& target : link->second.targets) on_.erase(target);
  byUrl_.erase(link);
  if (end.status == 400 || end.status == 401 || end.status == 403) {
    if (auto sink = sink_.lock()) {
      sink->relayRefused("resubscribe: " + url + " refused the relayed subscription: HTTP " +
                         std::to_string(end.status) + " " + end.why.substr(0, 80));
    }
    return;
  }
  if (backoff_ == kFirstRetry) {
    spdlog::info("presence relay for {} to {} ended: {}; opened again when it answers", viewer_,
                 url, end.why);
  }
  if (retryArmed_) return;
  retryArmed_ = true;
  retry_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, kLongestRetry);
  retry_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    if (auto self = weak.lock()) {
      self->retryArmed_ = false;
      self->reroute();
    }
  });
}

}  // namespace zkagent::gateway
