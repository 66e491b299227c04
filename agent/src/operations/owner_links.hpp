// Heartbeats to every gateway the shard map names (docs/gateway-cluster.md, "Agents"): each
// owner's link state, for /v1/status, for /metrics (one series per owner in the map, removed when
// it leaves) and for the routes (ShardRoutes passes over an owner known down, so a dead owner
// costs a quick refusal instead of a connect or request timeout). Each owner gets the configured
// link's Heartbeat (gateway_link.hpp) on a kept-alive connection of its own, with the same
// interval, timeout and `?instance=`; interval 0 disables them all.
//
// Whole-agent readiness stays with the configured gateway's link: a lost owner is lost to every
// agent alike, and marking agents unready for it would move accounts between agents for nothing.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gateway_link.hpp"
#include "shard_routes.hpp"
#include "zkagent/agent/config.hpp"
#include "zkagent/metrics.hpp"

namespace zkagent::agent::detail {

class OwnerLinks : public std::enable_shared_from_this<OwnerLinks> {
 public:
  // The agent's per-owner families, labelled {owner} (the owner's URL).
  struct Families {
    metrics::GaugeFamily& up;
    metrics::CounterFamily& failures;
  };
  // The owners to beat to now (ShardRoutes::owners).
  using OwnerSource = std::function<ShardRoutes::Owners()>;

  OwnerLinks(boost::asio::io_context& io, const Config::Gateway& config, std::string instanceId,
             Families metrics);

  // Every heartbeat interval, follow(source()). Nothing with heartbeats disabled.
  void start(OwnerSource source);
  void stop();  // every owner's heartbeat stops; the set stays as it was

  // Owners in `owners` get a heartbeat (and their series); owners that are not lose theirs, but
  // only when `owners` is complete (an owner missing from a partial view may still own a shard).
  void follow(const ShardRoutes::Owners& owners);

  // Thread-safe. Whether `url`'s heartbeat says it is down; false for a URL without one (an
  // owner a 421 named, or one not beaten to yet): it is tried.
  bool down(const std::string& url) const;

  struct Link {
    std::string owner;
    std::string state;  // up, down, unjudged (no answer yet, and not yet a timeout's worth)
    std::optional<std::chrono::milliseconds> sinceLastAnswer;
    uint64_t failedBeats = 0;
  };
  // Thread-safe. Every owner beaten to, by URL.
  std::vector<Link> links() const;

 private:
  void tick();

  boost::asio::io_context& io_;
  const Config::Gateway config_;
  const std::string target_;
  Families metrics_;
  boost::asio::steady_timer timer_;
  OwnerSource source_;
  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Heartbeat>, std::less<>> beats_;
};

}  // namespace zkagent::agent::detail
