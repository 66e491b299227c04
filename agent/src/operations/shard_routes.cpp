#include "shard_routes.hpp"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "zkagent/cluster_node.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::agent::detail {

void aimAt(http::ClientOptions& options, const std::string& ownerUrl) {
  naming::HostPort address;
  bool https = false;
  naming::httpUrlError(ownerUrl, address, https);  // checked by ShardRoutes
  options.host = address.host;
  options.port = address.port;
}

ShardRoutes::ShardRoutes(const Config::Gateway& gateway) : tls_(gateway.tls.has_value()) {}

void ShardRoutes::watch(boost::asio::io_context& io, election::SessionOptions session,
                        const std::string& shardsRoot, std::uint32_t shards) {
  std::lock_guard lock(mu_);
  if (observer_ || shards == 0) return;
  if (shards != shards_) learned_.clear();
  shards_ = shards;
  observer_ = std::make_unique<election::LeaderObserver>(io, std::move(session), shardsRoot);
  observer_->start();
  for (std::uint32_t shard = 0; shard < shards; ++shard) {
    observer_->lookup(naming::shardId(shard), [](const election::LeaderObserver::View&) {});
  }
  spdlog::info("gateway cluster: {} shards, watching their owners under {}", shards, shardsRoot);
}

void ShardRoutes::stop() {
  std::lock_guard lock(mu_);
  if (observer_) observer_->stop();
}

bool ShardRoutes::dialable(const std::string& url) const {
  naming::HostPort address;
  bool https = false;
  return !naming::httpUrlError(url, address, https) && https == tls_;
}

void ShardRoutes::avoidDown(std::function<bool(const std::string& url)> down) {
  down_ = std::move(down);
}

ShardRoutes::Route ShardRoutes::routeOf(std::string_view account) const {
  std::lock_guard lock(mu_);
  if (shards_ == 0) return {};
  const auto shard = naming::shardId(naming::shardOf(account, shards_));
  std::optional<std::string> owner;
  // The watched node first: it follows every move within a round trip, where a 421's owner is
  // only replaced by the next 421.
  if (observer_) {
    const auto view = observer_->current(shard);
    if (view.state == election::LeaderObserver::View::State::Leader &&
        dialable(view.active.endpoint)) {
      owner = view.active.endpoint;
    }
  }
  if (!owner) {
    const auto learned = learned_.find(shard);
    if (learned == learned_.end()) return {};
    owner = learned->second;
  }
  if (isDown(*owner)) return {std::nullopt, std::move(owner)};
  return {std::move(owner), std::nullopt};
}

ShardRoutes::Route ShardRoutes::learn(const http::ClientResponse& misdirected) {
  const auto body = nlohmann::json::parse(misdirected.body, nullptr, false);
  // Checked field by field: json::value() throws on a field of another type, and this runs in a
  // completion handler on whatever any gateway (or anything at its address) answered.
  const auto text = [&body](const char* key) {
    const auto field = body.is_object() ? body.find(key) : body.end();
    return field != body.end() && field->is_string() ? field->get<std::string>() : std::string();
  };
  const auto shards = naming::shardCountIn(body);
  const auto shard = text("shard");
  const auto owner = text("owner");
  if (!shards || naming::accountIdError(shard) || !dialable(owner)) return {};
  std::lock_guard lock(mu_);
  if (*shards != shards_) learned_.clear();
  shards_ = *shards;
  learned_[shard] = owner;
  if (isDown(owner)) return {std::nullopt, owner};
  return {owner, std::nullopt};
}

ShardRoutes::Owners ShardRoutes::owners() const {
  std::lock_guard lock(mu_);
  Owners owners;
  if (!observer_) return owners;
  owners.complete = true;
  for (std::uint32_t shard = 0; shard < shards_; ++shard) {
    const auto view = observer_->current(naming::shardId(shard));
    switch (view.state) {
      case election::LeaderObserver::View::State::Leader:
        if (dialable(view.active.endpoint)) owners.urls.insert(view.active.endpoint);
        break;
      case election::LeaderObserver::View::State::NoLeader:
        break;
      case election::LeaderObserver::View::State::Unknown:
        owners.complete = false;
        break;
    }
  }
  return owners;
}

void ShardRoutes::forget(std::string_view account) {
  std::lock_guard lock(mu_);
  if (shards_ != 0) learned_.erase(naming::shardId(naming::shardOf(account, shards_)));
}

}  // namespace zkagent::agent::detail
