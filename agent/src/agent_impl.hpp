// Agent::Impl, shared by agent.cpp (runtime: health, placement, gate, events) and admin_api.cpp
// (the admin HTTP API). Private to the agent library.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "device_endpoint.hpp"
#include "gateway_link.hpp"
#include "zkagent/agent.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"

namespace zkagent::agent {
namespace asio = boost::asio;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using election::GateDecision;
using election::Role;
using std::chrono::milliseconds;

namespace detail {

inline std::string hexSession(int64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(id));
  return buf;
}

// Every metric family of the agent (docs/agent.md lists them). No per-account labels.
struct Metrics {
  explicit Metrics(metrics::Registry& registry);

  metrics::GaugeFamily& accounts;
  metrics::CounterFamily& transitions;
  metrics::GaugeFamily& sessionState;
  metrics::Counter& sessionExpirations;
  metrics::Counter& sessionDisconnects;
  metrics::CounterFamily& gateDecisions;
  metrics::CounterFamily& forwarded;
  metrics::Histogram& forwardSeconds;
  metrics::Histogram& failoverSeconds;
  metrics::Gauge& ownReportAge;
  metrics::GaugeFamily& peers;
  metrics::CounterFamily& reportWrites;
  metrics::GaugeFamily& lifecycle;
  metrics::Gauge& runtimeReady;
  metrics::Gauge& schedulable;
  metrics::Gauge& gatewayUp;
  metrics::Counter& gatewayMissed;
  metrics::GaugeFamily& blocked;
};

// What the agent decided last for one account, and its cached successor lookup.
struct AccountState {
  PlacementDecision decision;
  std::optional<int64_t> healthReportAgeMs;  // of the report the decision relied on
  bool successorKnown = false;
  bool lookupInFlight = false;
  std::optional<std::string> successor;
  Clock::time_point successorReadAt{};
  Clock::time_point lockDelayUntil{};
};

}  // namespace detail

struct Agent::Impl : Gate, std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& ioc, Config cfg);

  // ---- set-up and shutdown
  void start();
  void shutdown(std::function<void()> done);
  void closeNow();
  void drain();
  void every(asio::steady_timer& timer, milliseconds period, std::function<void(Impl&)> fn);

  // ---- health
  HealthReport currentReport();
  void publishHealth();
  void wroteReport(const HealthReport& report);
  void pollPeers();
  bool runtimeReady() const;
  std::vector<std::string> ownBlocks(Clock::time_point now);

  // ---- placement
  void reconcileSoon();
  void reconcile();
  void lookUpSuccessor(const std::string& account);
  std::optional<Successor> successorOf(const detail::AccountState& state, Clock::time_point now);
  bool setLifecycle(Lifecycle next, std::initializer_list<Lifecycle> onlyFrom = {});

  // ---- gate and events
  Outcome execute(std::string_view account,
                  const std::function<void(const fencing::FencingToken&)>& operation) override;
  GateDecision decideGate(std::string_view account);
  void onLeadership(const election::LeadershipEvent& event);
  void onSession(const election::SessionEvent& event);

  // ---- admin API
  http::Router router();
  http::Response forwardOperation(const http::Request& request);
  http::Response resign(const http::Request& request);
  std::optional<election::ActiveInfo> readActive(const std::string& account);
  std::string statusJson();
  std::string metricsText();

  asio::io_context& io;
  const Config config;
  const std::string healthPath;
  metrics::Registry registry;
  detail::Metrics m{registry};
  asio::strand<asio::io_context::executor_type> control;
  asio::steady_timer healthTimer, reconcileTimer;
  std::shared_ptr<detail::GatewayLink> link;
  std::unique_ptr<http::Server> server;
  std::string endpoint;
  std::unique_ptr<detail::DeviceEndpoint> devices;  // before group: it advertises the endpoint
  std::unique_ptr<election::ElectionGroup> group;

  std::atomic<bool> stopping{false}, reconcileQueued{false};
  std::atomic<uint64_t> opCounter{0};

  mutable std::mutex mu;  // guards everything below
  Lifecycle lifecycle = Lifecycle::Joining;
  HealthTracker tracker;
  uint64_t reportSeq = 0;
  std::map<std::string, detail::AccountState, std::less<>> accounts;
};

}  // namespace zkagent::agent
