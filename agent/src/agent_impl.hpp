// Agent::Impl, shared by agent.cpp (runtime: health, placement, events), gate.cpp (the gate),
// balancer.cpp (the balance pass) and admin_api.cpp (the admin HTTP API). Private to the agent
// library.
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
#include <set>

#include "devices/device_endpoint.hpp"
#include "operations/gateway_link.hpp"
#include "operations/owner_links.hpp"
#include "operations/shard_routes.hpp"
#include "zkagent/agent.hpp"
#include "zkagent/balance.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"
#include "zkagent/naming.hpp"

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

// A callback for an asynchronous answer that calls `done` once: with the answer, or with
// `fallback` once `timeout` has passed first (a later answer is then dropped).
template <typename T>
std::function<void(T)> answerWithin(asio::io_context& io, std::chrono::milliseconds timeout,
                                    T fallback, std::function<void(T)> done) {
  struct Pending {
    std::mutex mu;
    std::function<void(T)> done;
    asio::steady_timer timer;
    explicit Pending(asio::io_context& context) : timer(context) {}
    std::function<void(T)> take() {
      std::lock_guard lock(mu);
      return std::exchange(done, nullptr);
    }
  };
  auto pending = std::make_shared<Pending>(io);
  pending->done = std::move(done);
  pending->timer.expires_after(timeout);
  pending->timer.async_wait(
      [pending, fallback = std::move(fallback)](boost::system::error_code ec) mutable {
        if (ec) return;
        if (auto first = pending->take()) first(std::move(fallback));
      });
  return [pending](T answer) {
    if (auto first = pending->take()) {
      pending->timer.cancel();
      first(std::move(answer));
    }
  };
}

// Every metric family of the agent (docs/agent.md lists them). No per-account labels; the
// per-owner families are labelled by the owners in the gateway cluster's shard map only.
struct Metrics {
  explicit Metrics(metrics::Registry& registry);

  metrics::GaugeFamily& accounts;
  metrics::CounterFamily& transitions;
  metrics::GaugeFamily& sessionState;
  metrics::Counter& sessionExpirations;
  metrics::Counter& sessionDisconnects;
  metrics::CounterFamily& gateDecisions;
  metrics::Counter& gateExecuted;  // gateDecisions{executed}, looked up once: every operation
  metrics::CounterFamily& forwarded;
  metrics::Counter& forwardedAccepted;  // forwarded{accepted}, likewise
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
  metrics::GaugeFamily& ownerUp;
  metrics::CounterFamily& ownerMissed;
  metrics::GaugeFamily& blocked;
  metrics::CounterFamily& balanceMoves;
  metrics::Gauge& balanceLeading;
  metrics::Gauge& balanceTarget;
  metrics::Gauge& balanceInFlight;
};

// What the agent decided last for one account, and its cached successor lookup.
struct AccountState {
  PlacementDecision decision;
  std::optional<int64_t> healthReportAgeMs;  // of the report the decision relied on
  bool successorKnown = false;
  bool lookupInFlight = false;
  std::optional<std::string> successor;
  std::vector<election::MemberInfo> queue;  // the members at the last lookup, by seq
  Clock::time_point successorReadAt{};
  Clock::time_point lockDelayUntil{};
};

// A handover balance starts: to whom, the receiver's member and the members ahead of it.
struct BalanceMove {
  std::string account, to, why;
  int64_t receiverSeq = -1;
  std::vector<int64_t> ahead;
};

// The balancing of one agent (docs/agent.md, "Balance"); control strand, read under `mu`.
struct BalanceState {
  // Agents seen leading one of our accounts or queued for one: only they share our accounts (an
  // agent standing for other accounts only would be a receiver nobody can give to).
  std::set<std::string> standing;
  Clock::time_point lastProbe{};        // the last queue read made only to see who stands
  std::string probed;                   // ...and its account (the next probe takes the next one)
  std::vector<std::string> membership;  // schedulable agents standing with us, sorted
  Clock::time_point membershipSince{};
  bool giving = false;  // started giving for this membership: goes on down to its target
  // The agent last seen leading each account: an account between two leaders still counts for
  // the one it left, so the counts every agent plans from move one account at a time.
  std::map<std::string, std::string, std::less<>> lastLeader;
  struct Move {
    std::string to;
    std::string why;  // balance, preferred
    Clock::time_point startedAt;
    // Our candidate may take a while to see the new `active`: we read it ourselves.
    bool reading = false;
    Clock::time_point readAt{};
    std::optional<std::string> seenLeader;
  };
  std::map<std::string, Move, std::less<>> inFlight;  // handovers started, not yet seen land
  size_t lookupsInFlight = 0;
  std::string state = "disabled";  // disabled, unschedulable, settling, electing, balanced, giving
  std::map<std::string, size_t> counts;  // balanced accounts each member leads, as seen here
  size_t unplaced = 0;                   // balanced accounts with no leader seen yet
  balance::BalancePlan plan;
  std::map<std::string, size_t> row;  // what this agent still gives, by receiver
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
  // Reads the account's members (the successor, and the queue balance chooses from); `answered`
  // runs on the control strand once the answer is stored.
  void lookUpSuccessor(const std::string& account, std::function<void()> answered = {});
  std::optional<Successor> successorOf(const detail::AccountState& state, Clock::time_point now);
  bool setLifecycle(Lifecycle next, std::initializer_list<Lifecycle> onlyFrom = {});

  // ---- balance
  void rebalance(const std::map<std::string, election::AccountStatus, std::less<>>& status,
                 Clock::time_point now, bool selfSchedulable);
  std::vector<std::string> schedulableAgents(Clock::time_point now, bool selfSchedulable);
  void pickMoves(const std::map<std::string, election::AccountStatus, std::less<>>& status,
                 Clock::time_point now, std::vector<detail::BalanceMove>& picks,
                 std::vector<std::string>& lookups);
  bool inMembership(const std::string& id) const;
  const std::string* pinnedTo(const std::string& account) const;
  void readLanding(const std::string& account);
  void startMove(const std::string& account, const std::string& to, int64_t receiverSeq,
                 std::vector<int64_t> ahead, const std::string& why);
  json balanceJson(Clock::time_point now) const;

  // ---- gate and events
  // Whether an operation for `account` may go out now, and under which token: after the
  // account's lock delay (on a timer), by the fast or the strict gate. `decided` runs on an io
  // thread, or at once; the token is set when the outcome is Executed. Holds no thread.
  using Admitted = std::function<void(Outcome, std::optional<fencing::FencingToken>)>;
  void admit(std::string account, Admitted decided);
  // The decision admit() turns into an Outcome: unknown account, then the lock delay, then the
  // fast or strict gate. What devices are admitted by too. `done` runs on an io thread, or at once.
  void gateDecision(std::string account, std::function<void(GateDecision)> done);
  void decideGate(const std::string& account, std::function<void(GateDecision)> done);
  // admit(), then the operation on the calling thread: embedders' blocking form, never to be
  // called on the io_context's threads.
  Outcome execute(std::string_view account,
                  const std::function<void(const fencing::FencingToken&)>& operation) override;
  void onLeadership(const election::LeadershipEvent& event);
  void onSession(const election::SessionEvent& event);
  // Reads {root}/@gateway-cluster on the session (watching for its creation when missing): once
  // found, the routes watch the cluster's shard owners.
  void readGatewayCluster();

  // ---- admin API
  http::Router router();
  void forwardOperation(const http::Request& request, http::Responder respond);
  void send(fencing::Operation op, fencing::FencingToken token, http::Responder respond);
  http::Response resign(const http::Request& request);
  void readActive(const std::string& account,
                  std::function<void(std::optional<election::ActiveInfo>)> done);
  std::string statusJson();
  std::string metricsText();

  asio::io_context& io;
  const Config config;
  const std::string healthPath;
  metrics::Registry registry;
  detail::Metrics m{registry};
  asio::strand<asio::io_context::executor_type> control;
  asio::steady_timer healthTimer, reconcileTimer;
  std::shared_ptr<detail::ShardRoutes> routes;  // before link and devices: both route by it
  std::shared_ptr<detail::GatewayLink> link;
  std::shared_ptr<detail::OwnerLinks> ownerLinks;  // heartbeats to every shard owner
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
  detail::BalanceState balance;
};

}  // namespace zkagent::agent
